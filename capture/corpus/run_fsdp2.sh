#!/usr/bin/env bash
# The FSDP2 corpus rows, on a two-GPU machine: pytorch/examples' distributed/FSDP2/example.py
# (copied unchanged into .corpus/src by fetch.sh), run under torchrun on two GPUs as its
# README runs it (10 steps), fp32 and --mixed-precision, each plain (whole-run time) and under
# `steptrace capture` with the default options (a program this short ends inside the timing
# phase: capture runs it again with a fitted window), then with STEPTRACE_REFERENCE=1 (torch's
# max_memory_allocated per window step, FlopCounterMode), and once more with a neighbour
# process running matrix products on GPU 1 (`_neighbour`: capture/corpus/gpu_neighbour.py),
# each capture analysed. The example saves a checkpoint at its end and loads it at its start
# when one exists: each run starts in a fresh folder, as a first run does.
#
#   bash capture/corpus/run_fsdp2.sh                      # the corpus rows
#   FSDP2_RUNS=samples bash capture/corpus/run_fsdp2.sh   # the committed samples and the slowed rank
#   FSDP2_RUNS=four bash capture/corpus/run_fsdp2.sh      # four processes (a 4-GPU machine): the
#       fp32 row with the default options, and the committed samples sample_traces/corpus/fsdp2_4_*
#       (a short window, then rank 1's host slowed), trimmed by trim_run.py
# (needs target/release/steptrace and .corpus/; writes $OUT/fsdp2_*.tar.gz)
set -u
# NVLink multicast stays off (the machine's rule; programs started here inherit it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c 'import torch;print("devices", torch.cuda.device_count(), torch.__version__)'
NPROC=2; [ "${FSDP2_RUNS:-all}" = four ] && NPROC=4
ROOT=$(pwd); ST=$ROOT/target/release/steptrace; W=/tmp/fsdp2; rm -rf $W; mkdir -p $W
SRC=$ROOT/.corpus/src/examples/distributed/FSDP2
now() { date +%s.%N; }
el() { python3 -c "print(round($(now) - $1, 2))"; }
fresh() { rm -rf $W/$1 && mkdir -p $W/$1 && cp $SRC/*.py $W/$1/ && cd $W/$1; }
# run NAME CAPTURE(0|1) REF(0|1) ARGS...: one run in a fresh folder.
run() {
  local name=$1 cap=$2 ref=$3; shift 3
  fresh $name
  local t0=$(now)
  if [ $cap = 0 ]; then
    timeout 300 torchrun --standalone --nproc-per-node $NPROC example.py "$@" >run.log 2>&1
    echo "$name plain rc=$? $(el $t0) s"
  else
    STEPTRACE_REFERENCE=$ref timeout 400 $ST capture --out $W/$name/run ${SCHEDULE_ARGS:-} \
      -- torchrun --standalone --nproc-per-node $NPROC example.py "$@" >run.log 2>&1
    echo "$name capture rc=$? $(el $t0) s"; grep "^steptrace" run.log
    $ST analyze $W/$name/run --out $W/$name/an >analyze.log 2>&1; echo "$name analyze rc=$?"
    sed -n '/ranks (step/,$p' analyze.log | head -20
  fi
  cd $ROOT
}
# slow_rank1 CORE: the example's host-bound step is slowed on rank 1 only, as a busy neighbour
# on its host would: every process with LOCAL_RANK=1 (both runs of a capture) is pinned, all
# its threads, to CORE, where two spinning processes run too. Runs until killed.
slow_rank1() {
  local core=$1 seen=" " p
  taskset -c $core python3 -c 'while True: pass' & taskset -c $core python3 -c 'while True: pass' &
  while true; do
    for p in $(pgrep -f example.py); do
      [[ "$seen" == *" $p "* ]] && continue
      if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx LOCAL_RANK=1; then
        taskset -a -p -c $core $p >/dev/null 2>&1 && seen="$seen$p " && echo "pinned rank 1 (pid $p) to core $core" >>$W/slow.log
      fi
    done
    sleep 0.1
  done
}
case "${FSDP2_RUNS:-all}" in
all)
  for mp in "" "--mixed-precision"; do
    tag=fp32; [ -n "$mp" ] && tag=mp
    run fsdp2_${tag}_plain 0 0 $mp
    run fsdp2_${tag}_plain2 0 0 $mp
    run fsdp2_${tag} 1 0 $mp
    run fsdp2_${tag}.ref 1 1 $mp
  done
  CUDA_VISIBLE_DEVICES=1 python3 $ROOT/capture/corpus/gpu_neighbour.py 200 8192 >$W/neighbour.log 2>&1 & hog=$!
  sleep 8
  run fsdp2_fp32_neighbour 1 0
  kill $hog; wait $hog
  keep="fsdp2_fp32 fsdp2_mp fsdp2_fp32.ref fsdp2_mp.ref fsdp2_fp32_neighbour";;
samples)
  # The committed samples (sample_traces/corpus/fsdp2_*): a shorter window, so that they stay
  # small; then rank 1's host slowed on purpose, and a plain run beside it.
  SCHEDULE_ARGS="--schedule skip_first=1,wait=1,warmup=1,active=2" run fsdp2_fp32_sample 1 1
  [ -n "${SKIP_MP:-}" ] || SCHEDULE_ARGS="--schedule skip_first=1,wait=1,warmup=1,active=1" run fsdp2_mp_sample 1 1 --mixed-precision
  slow_rank1 7 & slow=$!
  sleep 2
  run fsdp2_fp32_slow_plain 0 0
  SCHEDULE_ARGS="--schedule skip_first=1,wait=1,warmup=1,active=2" run fsdp2_fp32_slow 1 1
  kill $slow; pkill -f 'while True: pass'; wait $slow 2>/dev/null
  cat $W/slow.log
  keep="fsdp2_fp32_sample fsdp2_mp_sample fsdp2_fp32_slow";;
four)
  run fsdp2_4_fp32_plain 0 0
  run fsdp2_4_fp32 1 1
  SCHEDULE_ARGS="--schedule skip_first=1,wait=1,warmup=1,active=1" run fsdp2_4_mp 1 1 --mixed-precision
  slow_rank1 7 & slow=$!
  sleep 2
  SCHEDULE_ARGS="--schedule skip_first=1,wait=1,warmup=1,active=2" run fsdp2_4_mp_slow 1 1 --mixed-precision
  kill $slow; pkill -f '^python3 -c while'; wait $slow 2>/dev/null
  cat $W/slow.log
  for d in fsdp2_4_fp32 fsdp2_4_mp fsdp2_4_mp_slow; do python3 $ROOT/capture/corpus/trim_run.py $W/$d/run; done
  keep="fsdp2_4_fp32 fsdp2_4_mp fsdp2_4_mp_slow";;
esac
cd $W
for d in $keep; do
  tar czf $OUT/$d.tar.gz $d/run $d/*.log $d/an/summary.json $d/an/ranks.csv $d/an/ranks.json 2>/dev/null
done
tar czf $OUT/fsdp2_logs.tar.gz */*.log $(ls neighbour.log slow.log 2>/dev/null)
ls -la $OUT

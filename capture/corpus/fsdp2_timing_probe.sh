#!/usr/bin/env bash
# Why capture's timing phase on pytorch/examples' FSDP2 example (fp32, two ranks) read 13-27%
# above the program run plain (docs/capture.md): plain runs and captures interleaved, all of
# the example under capture/corpus/programs/fsdp2_step_timer.py, so that inside a capture the
# program's own printed step times (the hook waits for the GPU) stand beside the shim's timing
# figure. PROBE=parts (default): variants take the shim's parts away one at a time;
# PROBE=pairs: six plain runs and six captures (first run only), alternately. Logs and manifests to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi -L
ROOT=$PWD; ST=$ROOT/target/release/steptrace; SRC=$ROOT/.corpus/src/examples/distributed/FSDP2
mkdir -p $OUT/logs
k=0
run() {  # run NAME [capture options...]; "plain" runs without steptrace
  local name=$1; shift; k=$((k+1))
  local d=/tmp/probe_$k; rm -rf $d; mkdir -p $d
  cp $SRC/*.py $ROOT/capture/corpus/programs/fsdp2_step_timer.py $d
  local t0=$(date +%s.%N)
  if [ $name = plain ]; then
    (cd $d && timeout 200 torchrun --standalone --nproc-per-node 2 fsdp2_step_timer.py > $OUT/logs/${k}_$name.log 2>&1)
  else
    (cd $d && timeout 300 $ST capture --out $d/run "$@" -- torchrun --standalone --nproc-per-node 2 fsdp2_step_timer.py > $OUT/logs/${k}_$name.log 2>&1)
    for m in $d/run/manifest.json $d/run/*/manifest.json; do [ -f $m ] && cp $m $OUT/logs/${k}_${name}_manifest.json; done
    ls $d/run > $OUT/logs/${k}_${name}_ls.txt 2>&1
    for s in $d/run/shim_rank*.json; do [ -f $s ] && cp $s $OUT/logs/${k}_${name}_$(basename $s); done
  fi
  echo "$k $name rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
}
if [ "${PROBE:-parts}" = parts ]; then
  run plain
  run capture
  run plain
  run bare --no-rerun --no-trace --no-memory --no-et --no-nvtx
  run plain
  run nomem --no-rerun --no-memory
  run capture
  run plain
else  # PROBE=pairs: the program plain and under capture's first run, alternately, six times
  for i in 1 2 3 4 5 6; do run plain; run first --no-rerun; done
fi
(cd $OUT && tar czf logs.tgz logs && rm -rf logs)

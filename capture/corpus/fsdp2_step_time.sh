#!/usr/bin/env bash
# The FSDP2 step-time reference (docs/capture.md, FSDP2 rows), on a two-GPU machine: pytorch/
# examples distributed/FSDP2/example.py (.corpus/src, unchanged) run twice plain under
# capture/corpus/programs/fsdp2_step_timer.py (a global optimizer-step hook printing each
# step's wall time per rank) and once under `steptrace capture` with default options, fp32 and
# --mixed-precision. Writes the logs, manifests and ranks tables to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi -L
ROOT=$PWD; ST=$ROOT/target/release/steptrace; SRC=$ROOT/.corpus/src/examples/distributed/FSDP2
for tag in fp32 mp; do
  mp=""; [ $tag = mp ] && mp="--mixed-precision"
  for k in 1 2; do
    d=/tmp/t_${tag}_$k; rm -rf $d; mkdir -p $d; cp $SRC/*.py $ROOT/capture/corpus/programs/fsdp2_step_timer.py $d
    (cd $d && timeout 200 torchrun --standalone --nproc-per-node 2 fsdp2_step_timer.py $mp > $OUT/plain_${tag}_$k.log 2>&1; echo "plain $tag $k rc=$?")
  done
  d=/tmp/c_${tag}; rm -rf $d; mkdir -p $d; cp $SRC/*.py $d
  (cd $d && t0=$(date +%s.%N); timeout 300 $ST capture --out $d/run -- torchrun --standalone --nproc-per-node 2 example.py $mp > $OUT/cap_${tag}.log 2>&1; echo "capture $tag rc=$? $(python3 -c "import time;print(round(time.time()-$t0,1))") s")
  $ST analyze $d/run --out $d/an > $OUT/an_${tag}.log 2>&1; echo "analyze rc=$?"
  cp $d/run/manifest.json $OUT/manifest_${tag}.json; cp $d/an/ranks.csv $OUT/ranks_${tag}.csv
done
grep -h "iter" $OUT/plain_*.log | head -3

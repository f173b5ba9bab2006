#!/usr/bin/env bash
# The two-GPU corpus run (issue 18), on the nvidia-h200-x2 machine: pytorch/examples'
# distributed/ddp-tutorial-series/multigpu_torchrun.py (copied unchanged into .corpus/src by
# fetch.sh), run under torchrun on two GPUs, plain and under `steptrace capture`, twice: with
# both GPUs to itself (`ddp_torchrun`), and with another process running matrix products on
# GPU 1 (`ddp_torchrun_neighbour`: capture/corpus/gpu_neighbour.py), then analysed.
# The run directories are sample_traces/corpus/ddp_torchrun{,_neighbour}.
#
#   SCHEDULE=skip_first=20,wait=1,warmup=1,active=6 bash capture/corpus/run_ddp.sh
#   # needs target/release/steptrace and .corpus/; writes $OUT/ddp.tar.gz
set -u
# NVLink multicast stays off (the machine's rule; programs started here inherit it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L; python3 -c 'import torch;print("devices", torch.cuda.device_count(), torch.__version__)'
ROOT=$(pwd); ST=$ROOT/target/release/steptrace; W=/tmp/ddp; rm -rf $W; mkdir -p $W
EPOCHS=${EPOCHS:-12}
run() { # NAME
  mkdir -p $W/$1 && cp .corpus/src/examples/distributed/ddp-tutorial-series/*.py $W/$1/ && cd $W/$1
  local t0=$(date +%s.%N)
  timeout 200 torchrun --standalone --nproc-per-node 2 multigpu_torchrun.py $EPOCHS 1000 >plain.log 2>&1
  echo "$1 plain rc=$? $(python3 -c "import time;print(round(time.time()-$t0,2))") s"
  rm -f snapshot.pt; t0=$(date +%s.%N)
  STEPTRACE_REFERENCE=1 timeout 300 $ST capture --out $W/$1/run ${SCHEDULE:+--schedule $SCHEDULE} \
    -- torchrun --standalone --nproc-per-node 2 multigpu_torchrun.py $EPOCHS 1000 >capture.log 2>&1
  echo "$1 capture rc=$? $(python3 -c "import time;print(round(time.time()-$t0,2))") s"; tail -n 5 capture.log
  $ST analyze $W/$1/run --out $W/$1/an >analyze.log 2>&1; echo "$1 analyze rc=$?"; tail -n 30 analyze.log
  cd $ROOT
}
run even
CUDA_VISIBLE_DEVICES=1 python3 capture/corpus/gpu_neighbour.py 400 4096 >$W/neighbour.log 2>&1 & hog=$!
sleep 8
run neighbour
kill $hog; wait $hog
cd $W && tar czf $OUT/ddp.tar.gz --exclude='*.py' even neighbour; ls -la $OUT

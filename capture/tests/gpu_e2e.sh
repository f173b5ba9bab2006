#!/usr/bin/env bash
# End-to-end capture on the GPU machine: Python (CNN, GPT bf16, GPT with non-reentrant
# checkpointing), a libtorch C++ binary, torchrun with 2 processes, SIGINT forwarding, and NVTX
# ranges counted by an injection library. Each run is analysed. Results land in $OUT/e2e.tar.gz.
#
#   bash capture/tests/gpu_e2e.sh            # needs target/release/steptrace built beforehand
set -u
ROOT=$(pwd)
ST=$ROOT/target/release/steptrace
W=/tmp/e2e
rm -rf $W && mkdir -p $W/logs
export STEPTRACE_CACHE=$W/cache PYTHONUNBUFFERED=1
gcc -shared -fPIC -O2 -o $W/libnvtx_counter.so capture/tests/nvtx_counter.c -lpthread || echo "nvtx counter build failed"
export NVTX_INJECTION64_PATH=$W/libnvtx_counter.so
cd capture/examples

run() { # name, then the capture arguments
  local name=$1; shift
  # ONLY="cpp ddp" runs just those cases.
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  mkdir -p $W/ref_$name
  local t0=$(date +%s)
  NVTX_COUNTER_OUT=$W/nvtx_$name.txt STEPTRACE_REF_OUT=$W/ref_$name STEPTRACE_REFERENCE=1 \
    $ST capture --out $W/$name "$@" >$W/logs/$name.out 2>$W/logs/$name.err
  echo "== $name: exit $? in $(( $(date +%s) - t0 )) s"; grep steptrace: $W/logs/$name.err | tail -n 8
  # The program's own measurements go beside the capture as its reference.
  cp $W/ref_$name/* $W/$name/ 2>/dev/null
}

run cnn -- python3 train_cnn.py
run gpt -- python3 train_gpt.py
run gpt_ckpt -- python3 train_gpt.py --ckpt
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake -S cpp -B $W/cppbuild -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >$W/logs/cppbuild.log 2>&1 \
  && cmake --build $W/cppbuild >>$W/logs/cppbuild.log 2>&1 || tail -n 30 $W/logs/cppbuild.log
run cpp -- $W/cppbuild/train 8
run ddp -- torchrun --standalone --nproc-per-node 2 train_ddp.py
run manual -- python3 train_manual.py
CUDA_VISIBLE_DEVICES= run cpu_only -- python3 train_manual.py --cpu
run exit7 -- python3 -c 'import torch, sys; torch.zeros(1, device="cuda"); sys.exit(7)'

# SIGINT sent to steptrace (not the terminal) is forwarded; what was recorded is kept.
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" sigint "* ]]; then
$ST capture --out $W/sigint -- python3 train_cnn.py --steps 100000 >$W/logs/sigint.out 2>$W/logs/sigint.err &
pid=$!
for i in $(seq 1 60); do sleep 1; [ -f $W/sigint/trace.json ] && break; done
kill -INT $pid; wait $pid; echo "== sigint: steptrace exit $? (the child's own status)"; tail -n 5 $W/logs/sigint.err
fi

cd $W
for d in cnn gpt gpt_ckpt cpp ddp sigint manual cpu_only; do
  [ -d $d ] || continue
  echo "== analyze $d"; $ST analyze $d --out $d.an --top 3 2>&1 | head -n 12
done
for d in cpp manual cpu_only; do [ -f $d/manifest.json ] && python3 -c "
import json,sys; m=json.load(open('$d/manifest.json')); print('$d', m['completed'], m['incomplete_reasons'], m['files'], m['notes'], [r['boundary'] for r in m['ranks']])"; done
for f in nvtx_*.txt; do echo "== $f"; sort -t$'\t' -k1,1nr $f | head -n 12; done
ls -la $W/cache/shim/* 2>/dev/null | head
tar czf $OUT/e2e.tar.gz --exclude=cache --exclude=cppbuild -C $W . && ls -la $OUT

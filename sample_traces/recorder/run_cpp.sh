#!/usr/bin/env bash
# Builds and runs the libtorch sample. Usage: run_cpp.sh OUTDIR
set -u
out=${1:?OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
bdir=/tmp/train_mlp_build
prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
cmake -S "$here" -B $bdir -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >$bdir.log 2>&1 \
  && cmake --build $bdir >>$bdir.log 2>&1 || { tail -n 40 $bdir.log; exit 1; }
mkdir -p "$out/libtorch_mlp"
$bdir/train_mlp "$out/libtorch_mlp" && gzip -9 "$out/libtorch_mlp/trace.json" "$out/libtorch_mlp/snapshot.pickle"

#!/usr/bin/env bash
# Records every sample in sample_traces/ on the GPU machine. Usage: run_all.sh OUTDIR
set -u
out=${1:?OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
for m in resnet18 gpt_bf16 gpt_bf16_ckpt; do
  PYTHONUNBUFFERED=1 python3 "$here/record.py" --model $m --out "$out/$m" 2>&1 | tail -n 20
done
# libtorch C++: built against the Python install's libtorch.
bash "$here/run_cpp.sh" "$out"
ls -la "$out"/*

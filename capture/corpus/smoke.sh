#!/usr/bin/env bash
# A quick end-to-end check of `steptrace capture` + `analyze` on the GPU machine after changes to
# the capture crate: pytorch/examples word_language_model (unchanged, .corpus/src) and the HF
# Trainer GPT-2 driver (capture/corpus/programs, gradient accumulation 4, a logging step in the
# window). Prints each run's manifest timing and analyze's warnings; nothing is kept.
set -u
ROOT=$PWD; ST=$ROOT/target/release/steptrace
nvidia-smi -L
one() {  # one NAME DIR -- PROGRAM...
  local name=$1 dir=$2; shift 3
  local out=/tmp/smoke_$name; rm -rf $out
  local t0=$(date +%s.%N)
  (cd $dir && timeout 300 $ST capture --out $out -- "$@" > /tmp/smoke_$name.log 2>&1); local rc=$?
  echo "== $name: capture rc=$rc $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
  tail -3 /tmp/smoke_$name.log
  python3 - $out/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("completed", m["completed"], m.get("incomplete_reasons"), "step_time_s", m.get("step_time_s"))
for r in m["ranks"]:
    t = r.get("timing") or {}
    p = t.get("timing_phase") or {}
    print("rank", r["rank"], "source", t.get("source"), "host", p.get("step_time_s"), "cuda", p.get("step_time_cuda_s"), "steps", p.get("steps"))
PY
  $ST analyze $out --out $out.an --no-plots 2>&1 | grep -iE "iterations|warn|missing|extra|step time" | head -12
}
W=$(mktemp -d); cp $ROOT/capture/corpus/programs/*.py $W
one wlm $ROOT/.corpus/src/examples/word_language_model -- python3 main.py --accel --epochs 1
one hf $W -- python3 hf_trainer_gpt2.py

#!/usr/bin/env bash
# Issue 75: a plan applied by `capture --plan` from each module's first call, against the same
# checkpointing written into the program by its own switch, over the whole run. For each
# program: the plan (made beforehand from the committed capture without a plan, every block
# recomputed) applied under capture, and the program run plain with its own switch (HF's
# `gradient_checkpointing`, torch.utils.checkpoint by hand); each prints torch's
# max_memory_allocated over the whole run and its step times (nanoGPT's format).
#
#   bash capture/corpus/plan_first_call.sh PLANS_DIR
# PLANS_DIR holds hf_every/plan.json and pl_every/plan.json and data/wikitext-2.txt (the
# stand-in text the Lightning base capture read). Needs $ST (default target/release/steptrace).
# Writes $OUT/plan_first_call.jsonl and $OUT/plan_first_call_runs.tar.gz.
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
P=$(cd "${1:?plans dir}" && pwd)
W=/tmp/pfc
rm -rf $W && mkdir -p $W/fw/data $W/runs $W/logs
cp $ROOT/capture/corpus/programs/*.py $W/fw/
cp $P/data/wikitext-2.txt $W/fw/data/
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
# one NAME HOW -- COMMAND...: HOW is `plan` (under capture with the plan) or `own` (plain).
one() {
  local name=$1 how=$2; shift 3
  local t0=$(date +%s.%N)
  if [ $how = plan ]; then
    (cd $W/fw && timeout 400 $ST capture --force --out $W/runs/$name --plan $P/${name%%_*}_every/plan.json \
      --timing-steps 20 --timing-max-steps 40 --timing-max-s 20 -- "$@" >$W/logs/$name.out 2>$W/logs/$name.err)
  else
    (cd $W/fw && timeout 400 "$@" >$W/logs/$name.out 2>$W/logs/$name.err)
  fi
  local rc=$?
  python3 - "$name" "$how" "$rc" "$(python3 -c "print($(date +%s.%N) - $t0)")" "$W" "$P" <<'PY' | tee -a $OUT/plan_first_call.jsonl
import json, re, statistics, sys
name, how, rc, secs, w, p = sys.argv[1:]
out = open(f"{w}/logs/{name}.out").read()
peak = [int(m) for m in re.findall(r"^max_memory_allocated (\d+)", out, re.M)]
steps = [float(m) for m in re.findall(r"time ([0-9.]+)ms", out)]
row = {"name": name, "how": how, "rc": int(rc), "wall_s": round(float(secs), 1),
       "whole_run_max_memory_allocated": peak[-1] if peak else None,
       "steps": len(steps), "median_step_ms": statistics.median(steps[5:]) if len(steps) > 5 else None}
if how == "plan":
    plan = json.load(open(f"{p}/{name.split('_')[0]}_every/plan.json"))
    row["predicted_peak_bytes"] = plan["predicted_peak_bytes"]
    row["predicted_step_ms"] = plan["predicted_step_time_s"] * 1e3
    try:
        m = json.load(open(f"{w}/runs/{name}/manifest.json"))
        row["capture_step_ms"] = m.get("step_time_s", 0) * 1e3
        st = json.load(open(f"{w}/runs/{name}/shim.json"))
        row["applied"] = st.get("plan", {}).get("applied")
        row["from_first_call"] = st.get("plan", {}).get("from_first_call")
        row["missing"] = st.get("plan", {}).get("missing")
        row["window_peaks"] = st.get("reference", {}).get("window_step_peaks_bytes")
    except Exception as exc:
        row["error"] = str(exc)
print(json.dumps(row))
PY
}
one hf_plan plan -- python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256 --max-steps 80
one hf_own own -- python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256 --max-steps 80 --gradient-checkpointing
one pl_plan plan -- python3 lightning_transformer.py
one pl_own own -- python3 lightning_transformer.py --checkpoint-decoder-layers
tar czf $OUT/plan_first_call_runs.tar.gz -C $W runs logs 2>/dev/null

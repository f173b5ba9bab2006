#!/usr/bin/env bash
# Issue 75: a program that already checkpoints, planned on top. The HF Trainer GPT-2 driver
# with HF's own `gradient_checkpointing` is captured, planned at 90% of its peak (the plan
# names what the program already recomputes and acts on the rest), and captured again with
# that plan; the program prints torch's max_memory_allocated over the whole run.
#
#   bash capture/corpus/plan_on_top.sh      # needs $ST (default target/release/steptrace)
# Writes $OUT/plan_on_top.json and $OUT/plan_on_top_runs.tar.gz.
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
W=/tmp/pot
rm -rf $W && mkdir -p $W/fw $W/logs
cp $ROOT/capture/corpus/programs/*.py $W/fw/
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
CMD=(python3 hf_trainer_gpt2.py --n-layer 4 --seq-len 256 --max-steps 80 --gradient-checkpointing)
(cd $W/fw && timeout 300 $ST capture --out $W/base -- "${CMD[@]}" >$W/logs/base.out 2>$W/logs/base.err)
echo "base capture: $?"
$ST plan $W/base --budget 90% --out $W/plan90 >$W/logs/plan.out 2>&1
echo "plan: $?"; cat $W/logs/plan.out
(cd $W/fw && timeout 300 $ST capture --out $W/planned --plan $W/plan90/plan.json -- "${CMD[@]}" \
  >$W/logs/planned.out 2>$W/logs/planned.err)
echo "planned capture: $?"
python3 - $W <<'PY' | tee $OUT/plan_on_top.json
import json, re, sys
w = sys.argv[1]
def peak(name):
    m = re.findall(r"^max_memory_allocated (\d+)", open(f"{w}/logs/{name}.out").read(), re.M)
    return int(m[-1]) if m else None
plan = json.load(open(f"{w}/plan90/plan.json"))
st = json.load(open(f"{w}/planned/shim.json")).get("plan", {})
print(json.dumps({"base_whole_run_peak": peak("base"), "already_recomputed": plan.get("already_recomputed"),
                  "decisions": [(d.get("fqn") or d["module"], d["action"]) for d in plan["decisions"]],
                  "budget_bytes": plan["budget_bytes"], "predicted_peak_bytes": plan["predicted_peak_bytes"],
                  "measured_peak_bytes": plan["measured_peak_bytes"],
                  "planned_whole_run_peak": peak("planned"), "applied": st.get("applied"),
                  "from_first_call": st.get("from_first_call"), "missing": st.get("missing")}, indent=1))
PY
tar czf $OUT/plan_on_top_runs.tar.gz -C $W base plan90/plan.json planned logs 2>/dev/null

#!/usr/bin/env bash
# Issue 75: Lightning's demo swept with --plan-ab on the H200: what each plan adds to a step,
# measured in one process (steps with and without it, alternating) against its prediction.
#   [BUDGETS=every-block,90%] [REPLAN=N] bash capture/corpus/plan_ab_lightning.sh [pl|plb]
# Needs target/release/steptrace; writes $OUT/. With REPLAN=N, each plan is then applied by
# `capture --plan` N more times (every step with it), to see its step time from run to run.
set -u
ROOT=$(pwd); ST=$ROOT/target/release/steptrace; W=/tmp/plab
mkdir -p $W/fw/data && cp $ROOT/capture/corpus/programs/*.py $W/fw/
NAME=${1:-pl}
. "$ROOT/capture/corpus/plan_programs.sh"
write_wikitext $W/fw/data/wikitext-2.txt
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
(cd $W/fw && timeout 280 $ST sweep --plan-ab --budgets ${BUDGETS:-every-block,90%} --timing-steps 30 --timing-max-steps 80 --timing-max-s 20 --out $W/sw -- $(prog $NAME | sed 's/--max-steps 200/--max-steps 300/') > $W/sweep.out 2> $W/sweep.err)
echo "rc $?"; tail -12 $W/sweep.out; tail -3 $W/sweep.err
cp $W/sweep.out $OUT/; cp $W/sw/sweep_budgets.csv $OUT/ 2>/dev/null
for d in $W/sw/base $W/sw/budget_*; do n=$(basename $d); mkdir -p $OUT/$n; cp $d/manifest.json $d/shim.json $OUT/$n/ 2>/dev/null; done
for plan in $W/sw/plan_*/plan.json; do
  p=$(basename $(dirname $plan)); [ $p = plan_curve ] && continue
  for rep in $(seq 1 ${REPLAN:-0}); do
    (cd $W/fw && timeout 120 $ST capture --out $W/re_${p}_$rep --plan $plan -- $(prog $NAME) > $W/re_${p}_$rep.out 2>&1)
    python3 - $W/re_${p}_$rep "$p" "$rep" <<'PY' | tee -a $OUT/replan.jsonl
import json, statistics, sys
d, p, rep = sys.argv[1:]
s = json.load(open(d + "/shim.json")); m = json.load(open(d + "/manifest.json"))
aw = s.get("after_window_ns") or []
st = [(b - a) / 1e6 for a, b in zip(aw, aw[1:])]
print(json.dumps({"plan": p, "rep": int(rep), "step_time_s": m.get("step_time_s"),
                  "after_window_median_ms": round(statistics.median(st), 3) if st else None,
                  "run_max_memory_allocated": m.get("run_max_memory_allocated")}))
PY
  done
done

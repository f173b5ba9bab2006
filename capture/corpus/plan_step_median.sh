#!/usr/bin/env bash
# Issue 75: step-time predictions against the median of several runs, for a program whose own
# step moves between runs of one command by more than a plan adds (Lightning's demo). Each of
# REPS rounds captures the program without a plan, then with each plan applied from its first
# step (`capture --plan`, every step with the plan), alternately, so drift hits all alike. Each
# round's capture without a plan is kept whole: the plans' steps are then predicted from each
# of them (`steptrace plan BASE --modules ...`, off the GPU) and set against the planned runs'
# median.
#
#   REPS=3 bash capture/corpus/plan_step_median.sh NAME PLAN...   # NAME: pl, plb (plan_programs.sh)
# PLAN: capture/corpus/plans/*.json (plans whose decisions name modules by qualified name).
# Writes $OUT/plan_step_median.jsonl (a line per run), $OUT/plan_step_median_NAME_base_R.tar.gz
# and $OUT/plan_step_median_NAME_status.tar.gz (every run's manifest and shim status).
# A PLAN of the form own:FLAGS is the program with its own switch instead (FLAGS added to its
# command, nothing of steptrace loaded), timed by the steps it prints (from the 6th on).
# PIN=CPUS (a taskset list, such as 0-7) runs every capture on those CPUs: the host's speed
# then moves less between runs (the row records it).
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
name=${1:?name}
shift
W=/tmp/psm
rm -rf $W && mkdir -p $W/fw/data $W/runs $W/logs
cp $ROOT/capture/corpus/programs/*.py $W/fw/
. "$ROOT/capture/corpus/plan_programs.sh"
write_wikitext $W/fw/data/wikitext-2.txt
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
pin=""
[ -n "${PIN:-}" ] && pin="taskset -c $PIN"
for rep in $(seq 1 ${REPS:-3}); do
  for plan in base "$@"; do
    label=$(basename "$plan" .json)
    case "$plan" in own:*) label=own$(echo "${plan#own:}" | tr -c 'A-Za-z0-9\n' '_') ;; esac
    tag=${name}_${label}_$rep
    if [ "${plan#own:}" != "$plan" ]; then
      (cd $W/fw && timeout 200 $pin $(prog $name) ${plan#own:} >$W/logs/$tag.out 2>$W/logs/$tag.err)
    elif [ "$plan" = base ]; then
      (cd $W/fw && timeout 200 $pin $ST capture --out $W/runs/$tag -- $(prog $name) >$W/logs/$tag.out 2>$W/logs/$tag.err)
    else
      (cd $W/fw && timeout 200 $pin $ST capture --out $W/runs/$tag --plan $ROOT/$plan -- $(prog $name) \
        >$W/logs/$tag.out 2>$W/logs/$tag.err)
    fi
    python3 - "$name" "$label" "$rep" "$?" "$W/runs/$tag" "${PIN:-}" <<'PY' | tee -a $OUT/plan_step_median.jsonl
import json, statistics, sys
name, label, rep, rc, d, pin = sys.argv[1:]
row = {"name": name, "plan": label, "rep": int(rep), "rc": int(rc), "pin": pin or None}
try:
  if label.startswith("own"):
    import re
    out = open(d.replace("/runs/", "/logs/") + ".out").read()
    steps = [float(x) for x in re.findall(r"time ([0-9.]+)ms", out)][5:]
    peak = re.findall(r"^max_memory_allocated (\d+)", out, re.M)
    row["own_steps"] = len(steps)
    row["step_time_s"] = round(statistics.fmean(steps) / 1e3, 6) if steps else None
    row["median_ms"] = round(statistics.median(steps), 3) if steps else None
    row["run_max_memory_allocated"] = int(peak[-1]) if peak else None
  else:
    m = json.load(open(f"{d}/manifest.json"))
    row["step_time_s"] = m.get("step_time_s")
    row["step_time_source"] = m.get("step_time_source")
    s = json.load(open(f"{d}/shim.json"))
    aw = s.get("after_window_ns") or []
    row["after_window_steps"] = max(0, len(aw) - 1)
    row["after_window_median_ms"] = (round(statistics.median([(b - a) / 1e6 for a, b in zip(aw, aw[1:])]), 3)
                                     if len(aw) > 1 else None)
    p = s.get("plan") or {}
    row["applied"] = len(p.get("applied") or [])
    row["from_first_call"] = len(p.get("from_first_call") or [])
except Exception as exc:
    row["error"] = str(exc)
print(json.dumps(row))
PY
    [ "$plan" = base ] && tar czf $OUT/plan_step_median_${name}_base_$rep.tar.gz -C $W/runs $tag
  done
done
# Every run's manifest and shim status (the planned runs' own forward and backward times, set
# against the plan's host_phases), in one file: $OUT brings back few.
(cd $W/runs && tar czf $OUT/plan_step_median_${name}_status.tar.gz */manifest.json */shim.json)

#!/usr/bin/env bash
# Issue 75: the step time a plan costs, as the user will run it, against the same checkpointing
# written into the program by its own switch; the whole run's peak beside it. For each
# program: `steptrace sweep --budgets every-block,90%` (a capture without a plan, the plans
# made from it, each applied by `capture --plan` from the first step and captured), then the
# program run plain with its own switch, nothing of steptrace loaded. Each program prints
# torch's max_memory_allocated over the whole run and each step's wall time (nanoGPT's format).
#
#   [BUDGETS=every-block,90%] bash capture/corpus/plan_step_time.sh NAME...   # NAME: hf, pl, plb, timm
# Needs $ST (default target/release/steptrace); pl needs data/wikitext-2.txt (make_data.py).
# Writes $OUT/plan_step_time.jsonl and $OUT/plan_step_time_<NAME>.tar.gz (the sweep's CSV,
# console, plans, and each run's manifest and shim status; no traces; with KEEP_BASE=NAME,...
# also the capture without a plan, whole, as plan_step_time_<NAME>_base.tar.gz).
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
W=/tmp/pst
mkdir -p $W/fw/data $W/logs
cp $ROOT/capture/corpus/programs/*.py $W/fw/
. "$ROOT/capture/corpus/plan_programs.sh"
write_wikitext $W/fw/data/wikitext-2.txt
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache


for name in "$@"; do
  rm -rf $W/sw_$name
  t0=$(date +%s)
  (cd $W/fw && timeout 420 $ST sweep --budgets ${BUDGETS:-every-block,90%} --out $W/sw_$name -- $(prog $name) \
    >$W/logs/${name}_sweep.out 2>$W/logs/${name}_sweep.err)
  echo "$name sweep: rc $? in $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  (cd $W/fw && timeout 200 $(prog $name) $(switch $name) >$W/logs/${name}_own.out 2>$W/logs/${name}_own.err)
  echo "$name own switch: rc $? in $(( $(date +%s) - t0 )) s"
  python3 - "$name" "$W" <<'PY' | tee -a $OUT/plan_step_time.jsonl
import csv, glob, json, os, re, statistics, sys
name, w = sys.argv[1:]
def med(v):
    return round(statistics.median(v), 3) if v else None
own = open(f"{w}/logs/{name}_own.out").read()
steps = [float(m) for m in re.findall(r"time ([0-9.]+)ms", own)]
peak = re.findall(r"^max_memory_allocated (\d+)", own, re.M)
row = {"name": name, "own_switch": {"whole_run_max_memory_allocated": int(peak[-1]) if peak else None,
       "steps": len(steps), "median_step_ms_from_6": med(steps[5:]),
       "median_step_ms_second_half": med(steps[len(steps) // 2:]),
       "reentrant_line": re.findall(r"^timm checkpoint_seq.*$", own, re.M)}}
sw = f"{w}/sw_{name}"
try:
    row["sweep_csv"] = list(csv.DictReader(open(f"{sw}/sweep_budgets.csv")))
except Exception as exc:
    row["sweep_csv_error"] = str(exc)
runs = {}
for d in sorted(glob.glob(f"{sw}/base") + glob.glob(f"{sw}/budget_*")):
    r = {}
    try:
        m = json.load(open(f"{d}/manifest.json"))
        r["manifest_step_time_s"] = m.get("step_time_s")
        r["manifest_timing"] = m.get("timing")
        r["run_max_memory_allocated"] = m.get("run_max_memory_allocated")
        s = json.load(open(f"{d}/shim.json"))
        aw = s.get("after_window_ns") or []
        r["after_window_steps"] = max(0, len(aw) - 1)
        r["after_window_median_ms"] = med([(b - a) / 1e6 for a, b in zip(aw, aw[1:])])
        tn = s.get("timing_ns") or []
        r["timing_phase_median_ms"] = med([(b - a) / 1e6 for a, b in zip(tn, tn[1:])])
        p = s.get("plan") or {}
        r["applied"] = len(p.get("applied") or [])
        r["from_first_call"] = len(p.get("from_first_call") or [])
        r["missing"] = p.get("missing")
    except Exception as exc:
        r["error"] = str(exc)
    runs[os.path.basename(d)] = r
row["runs"] = runs
print(json.dumps(row))
PY
  tar czf $OUT/plan_step_time_$name.tar.gz -C $W logs/${name}_sweep.out logs/${name}_sweep.err logs/${name}_own.out \
    $(cd $W && ls -d sw_$name/*.csv sw_$name/*.txt sw_$name/plan_*/plan.json sw_$name/*/manifest.json sw_$name/*/shim.json 2>/dev/null)
  # The capture the plans were made from, whole, where asked (KEEP_BASE=name,...).
  case ",${KEEP_BASE:-}," in *",$name,"*) tar czf $OUT/plan_step_time_${name}_base.tar.gz -C $W/sw_$name base ;; esac
done

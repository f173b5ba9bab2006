#!/usr/bin/env bash
# Issue 75: the step time of a plan applied by `capture --plan` against the same checkpointing
# by the program's own switch, each run REPS times, alternating, so that drift on a shared GPU
# hits both alike. The plans are the every-block plans plan_step_time.sh's sweeps made.
#
#   REPS=2 bash capture/corpus/plan_step_repeat.sh PLANS_DIR NAME...   # NAME: hf, pl, timm
# PLANS_DIR holds NAME_every.json. Needs $ST (default target/release/steptrace).
# Writes $OUT/plan_step_repeat.jsonl (a line per run) and, with KEEP_RUN=NAME, the first
# planned capture of NAME whole as $OUT/plan_step_repeat_NAME_run.tar.gz.
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
P=$(cd "${1:?plans dir}" && pwd)
shift
W=/tmp/psr
rm -rf $W && mkdir -p $W/fw/data $W/runs $W/logs
cp $ROOT/capture/corpus/programs/*.py $W/fw/
. "$ROOT/capture/corpus/plan_programs.sh"
write_wikitext $W/fw/data/wikitext-2.txt   # the text plan_step_time.sh's base read
export PYTHONUNBUFFERED=1 STEPTRACE_CACHE=$W/cache
for name in "$@"; do
  for rep in $(seq 1 ${REPS:-2}); do
    for how in own plan; do
      tag=${name}_${how}_$rep
      if [ $how = own ]; then
        (cd $W/fw && timeout 200 $(prog $name) $(switch $name) >$W/logs/$tag.out 2>$W/logs/$tag.err)
      else
        (cd $W/fw && timeout 300 $ST capture --out $W/runs/$tag --plan $P/${name}_every.json -- $(prog $name) \
          >$W/logs/$tag.out 2>$W/logs/$tag.err)
      fi
      python3 - "$name" "$how" "$rep" "$?" "$W" <<'PY' | tee -a $OUT/plan_step_repeat.jsonl
import json, re, statistics, sys
name, how, rep, rc, w = sys.argv[1:]
tag = f"{name}_{how}_{rep}"
out = open(f"{w}/logs/{tag}.out").read()
steps = [float(m) for m in re.findall(r"time ([0-9.]+)ms", out)]
peak = re.findall(r"^max_memory_allocated (\d+)", out, re.M)
row = {"name": name, "how": how, "rep": int(rep), "rc": int(rc), "steps": len(steps),
       "whole_run_max_memory_allocated": int(peak[-1]) if peak else None,
       "printed_median_ms_from_6": round(statistics.median(steps[5:]), 3) if len(steps) > 5 else None}
if how == "plan":
    try:
        m = json.load(open(f"{w}/runs/{tag}/manifest.json"))
        row["capture_step_time_ms"] = m["step_time_s"] * 1e3
        row["capture_timing"] = {k: v for k, v in (m.get("timing") or {}).items() if k != "timing_phase"}
        row["run_max_memory_allocated"] = m.get("run_max_memory_allocated")
        st = json.load(open(f"{w}/runs/{tag}/shim.json"))
        aw = st.get("after_window_ns") or []
        row["after_window_steps"] = max(0, len(aw) - 1)
        row["after_window_median_ms"] = (round(statistics.median([(b - a) / 1e6 for a, b in zip(aw, aw[1:])]), 3)
                                         if len(aw) > 1 else None)
        row["from_first_call"] = len(st.get("plan", {}).get("from_first_call") or [])
    except Exception as exc:
        row["error"] = str(exc)
print(json.dumps(row))
PY
    done
  done
  [ "${KEEP_RUN:-}" = "$name" ] && tar czf $OUT/plan_step_repeat_${name}_run.tar.gz -C $W/runs ${name}_plan_1
done

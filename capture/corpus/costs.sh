#!/usr/bin/env bash
# Where a captured run's extra time goes, with capture run as users run it (no validation
# references): each program plain, then captured once per variant, then analysed. One JSON
# line per capture in $OUT/costs.jsonl: whole-run times and slowdown, the manifest's
# `costs_ms` (each piece of the shim's work and the launcher's compression), the shim's clock
# readings at the window's edges, and what analyze reports (step time, peak, breakdown).
#
#   VARIANTS="default TORCH_SYMBOLIZE_MODE=fast" bash capture/corpus/costs.sh NAMES...
# A variant is `default` or VAR=VALUE set for its capture. Needs target/release/steptrace and
# .corpus/ (run.sh's set-up).
set -u
. capture/corpus/programs.sh
corpus_init "$@"
[[ "$ONLY" == *" cpp_"* ]] && corpus_setup cpp || corpus_setup
now() { date +%s.%N; }

each() {
  [ $2 = ddp ] && [[ "$ONLY" != *" $1 "* ]] && return 0  # the two-GPU machine only, when named
  local name=$1 dir=$3; shift 6
  want $name || return 0
  cd $dir
  local t0=$(now)
  "$@" >$W/logs/$name.plain.out 2>&1
  local plain_rc=$? t1=$(now)
  for v in ${VARIANTS:-default}; do
    local run=$W/runs/$name.$v an=$W/an/$name.$v
    local t2=$(now)
    if [ $v = default ]; then
      timeout 400 $ST capture --out $run -- "$@" >$W/logs/$name.$v.out 2>&1
    else
      env "$v" timeout 400 $ST capture --out $run -- "$@" >$W/logs/$name.$v.out 2>&1
    fi
    local cap_rc=$? t3=$(now)
    $ST analyze $run --out $an -q >$W/logs/$name.$v.analyze 2>&1
    local an_rc=$?
    python3 - "$name" "$v" "$plain_rc" "$cap_rc" "$an_rc" "$t0" "$t1" "$t2" "$t3" "$run" "$an" <<'PY' >>$OUT/costs.jsonl
import json, sys
name, v, prc, crc, arc, t0, t1, t2, t3, run, an = sys.argv[1:]
plain, cap = float(t1) - float(t0), float(t3) - float(t2)
row = {"name": name, "variant": v, "plain_exit": int(prc), "capture_exit": int(crc),
       "analyze_exit": int(arc), "plain_run_s": round(plain, 3), "capture_run_s": round(cap, 3),
       "slowdown": round(cap / plain, 3) if plain > 0 else None}
try:
    m = json.load(open(run + "/manifest.json"))
    r = m["ranks"][0]
    row.update(costs_ms=r.get("costs_ms"), steps=r.get("steps"), boundary=r.get("boundary"),
               step_time_s=m.get("step_time_s"), completed=m.get("completed"), files=sorted(r["files"]))
    st = json.load(open(run + "/" + ("shim_rank0.json" if "_rank" in r["files"].get("trace", "") else "shim.json")))
    keys = ("start_ns", "window_start_ns", "window_end_ns", "after_window_start_ns", "exit_ns")
    row["shim_clock_ns"] = {k: st.get(k) for k in keys}
except Exception as e:
    row["manifest_error"] = str(e)
try:
    s = json.load(open(an + "/summary.json"))
    row.update(peak_allocated=s.get("peak_allocated_bytes"), peak_breakdown=s.get("peak_breakdown_bytes"),
               analyzed_step_time_s=s.get("step_time_s"), step_time_source=s.get("step_time_source"),
               warnings=len(s.get("warnings", [])))
except Exception as e:
    row["analyze_error"] = str(e)
print(json.dumps(row))
PY
    tail -n 1 $OUT/costs.jsonl
  done
  cd $ROOT
}
corpus_programs
cd $W && tar czf $OUT/costs_runs.tar.gz runs an logs 2>/dev/null

#!/usr/bin/env bash
# Issue 79: is the verdict right? capture/corpus/programs/verdict_mlp.py at a host-bound and a
# GPU-bound size: captured eagerly by `steptrace capture` (its analysis says how long a step a
# host that cost nothing would leave), then run with its whole step in a CUDA graph, nothing
# of steptrace loaded, REPS times each way alternating. The eager program's own step is
# timed plain too.
#
#   REPS=3 bash capture/corpus/verdict.sh       # needs $ST (default target/release/steptrace)
# Writes $OUT/verdict.jsonl (a line per run) and $OUT/verdict_<size>.tar.gz (the eager capture).
set -u
ROOT=$(pwd)
ST=${ST:-$ROOT/target/release/steptrace}
W=/tmp/verdict
rm -rf $W && mkdir -p $W/logs
P=$ROOT/capture/corpus/programs/verdict_mlp.py
declare -A SIZE=([host]="--batch 64 --width 256 --layers 24" [gpu]="--batch 16384 --width 2048 --layers 8")
for size in host gpu; do
  args=${SIZE[$size]}
  timeout 200 $ST capture --out $W/cap_$size -- python3 $P $args >$W/logs/cap_$size.out 2>$W/logs/cap_$size.err
  echo "capture $size rc $?"
  timeout 100 $ST analyze -q --out $W/an_$size $W/cap_$size >/dev/null 2>$W/logs/an_$size.err
  for rep in $(seq 1 ${REPS:-3}); do
    for how in eager graphs; do
      flag=""; [ $how = graphs ] && flag=--graphs
      timeout 100 python3 $P $args $flag >$W/logs/${size}_${how}_$rep.out 2>&1
      python3 - "$size" "$how" "$rep" "$W" <<'PY' | tee -a $OUT/verdict.jsonl
import json, re, statistics, sys
size, how, rep, w = sys.argv[1:]
out = open(f"{w}/logs/{size}_{how}_{rep}.out").read()
t = [float(x) for x in re.findall(r"time ([0-9.]+)ms", out)]
print(json.dumps({"size": size, "how": how, "rep": int(rep), "steps": len(t),
                  "median_step_ms_from_20": round(statistics.median(t[20:]), 4) if len(t) > 20 else None}))
PY
    done
  done
  python3 - "$size" "$W" <<'PY' | tee -a $OUT/verdict.jsonl
import json, sys
size, w = sys.argv[1:]
s = json.load(open(f"{w}/an_{size}/summary.json"))
cp = s.get("critical_path") or {}
print(json.dumps({"size": size, "how": "analysis", "step_time_s": s["step_time_s"], "step_time_source": s["step_time_source"],
                  "gpu_busy_s": s["gpu_busy_s"], "host_free_step_s": cp.get("host_free_step_s"), "bound": cp.get("bound"),
                  "host_share": cp.get("host_share"), "host_s_at_program_speed": cp.get("host_s_at_program_speed")}))
PY
  tar czf $OUT/verdict_$size.tar.gz -C $W cap_$size
done

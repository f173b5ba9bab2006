#!/usr/bin/env bash
# A/B of two or more builds on the 1 GB generated snapshot (benches/gen_snapshot.py
# --reuse-addresses, as bench.py --snapshot 1000 --snapshot-reuse makes it), each build's
# `steptrace analyze SNAPSHOT` timed RUNS times, alternating, with its peak RSS, then Python's
# pickle.load of the same file once; the first two builds' outputs compared. For a machine with
# more cores than the 2-core one bench.py is run on (the GPU machine's CPU).
#
#   VARIANTS="new base" bash benches/snapshot_ab.sh [MB] [RUNS]
# Needs .corpus/bin/steptrace_<variant>.xz (stripped builds, carried to the device); writes
# timings.txt and the machine's description to $OUT (or ./snapshot_ab_out).
set -euo pipefail
MB=${1:-1000}
RUNS=${2:-3}
OUT=${OUT:-$(pwd)/snapshot_ab_out}
mkdir -p "$OUT"
VARIANTS=${VARIANTS:-new base}
ROOT=$(pwd)
source benches/snapshot_ab_common.sh
W=/tmp/snapshot_ab; mkdir -p $W
SNAP=$W/snapshot_${MB}mb_reuse.pickle
[ -f "$SNAP" ] || python3 benches/gen_snapshot.py sample_traces/resnet18/snapshot.pickle.gz "$SNAP" --mb "$MB" --reuse-addresses
ls -l "$SNAP" | tee $OUT/file.txt
(nproc; lscpu | grep -E "Model name|^CPU\(s\)") | tee $OUT/machine.txt
cat "$SNAP" > /dev/null
PICKLE_LOAD=1 ab_runs "$SNAP" "$W" "$RUNS"

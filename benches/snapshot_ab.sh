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
B=/tmp/b; mkdir -p $B
VARIANTS=${VARIANTS:-new base}
for v in $VARIANTS; do xz -dc .corpus/bin/steptrace_$v.xz > $B/steptrace_$v; chmod +x $B/steptrace_$v; done
W=/tmp/snapshot_ab; mkdir -p $W
SNAP=$W/snapshot_${MB}mb_reuse.pickle
[ -f "$SNAP" ] || python3 benches/gen_snapshot.py sample_traces/resnet18/snapshot.pickle.gz "$SNAP" --mb "$MB" --reuse-addresses
ls -l "$SNAP" | tee $OUT/file.txt
(nproc; lscpu | grep -E "Model name|^CPU\(s\)") | tee $OUT/machine.txt
cat "$SNAP" > /dev/null
for i in $(seq 1 "$RUNS"); do for v in $VARIANTS; do
  /usr/bin/time -f "$v run $i: %e s %M KB %U user" $B/steptrace_$v analyze "$SNAP" --out $W/o_${v}_$i -q 2>&1 | tail -1 | tee -a $OUT/timings.txt
done; done
set -- $VARIANTS
if [ $# -ge 2 ]; then
  diff -r $W/o_${1}_1 $W/o_${2}_1 > $OUT/diff.txt && echo "outputs identical ($1 vs $2)" | tee -a $OUT/timings.txt
fi
cp $W/o_${1}_1/summary.json $OUT/summary_$1.json
/usr/bin/time -f "pickle.load: %e s %M KB" python3 -c "import pickle; pickle.load(open('$SNAP', 'rb'))" 2>&1 | tail -1 | tee -a $OUT/timings.txt

#!/usr/bin/env bash
# A/B of two or more builds on one real snapshot (nanoGPT's train.py unchanged, as
# capture/corpus/real_snapshot.sh runs it, for SECONDS of training), each build timed three
# times, alternating, with its peak RSS; the first two builds' outputs compared.
#
#   VARIANTS="new base" [PICKLE_LOAD=1] bash capture/corpus/real_snapshot_ab.sh SECONDS
#   (on the GPU machine)
# Needs .corpus/src/nanoGPT and .corpus/bin/steptrace_<variant>.xz (builds without Parquet,
# stripped, carried to the device); writes timings.txt, diff.txt and the file's size to $OUT.
# Results: benches/results/real_snapshot_nanogpt_1128/.
set -euo pipefail
SECS=${1:-150}
B=/tmp/b; mkdir -p $B
VARIANTS=${VARIANTS:-new base}
for v in $VARIANTS; do xz -dc .corpus/bin/steptrace_$v.xz > $B/steptrace_$v; chmod +x $B/steptrace_$v; done
ROOT=$(pwd)
W=/tmp/real_snapshot
bash "$ROOT/capture/corpus/nanogpt_snapshot.sh" "$W" "$SECS"
SNAP=$W/snapshot.pickle
cd "$W"
ls -l "$SNAP" | tee $OUT/file.txt
for i in 1 2 3; do for v in $VARIANTS; do
  /usr/bin/time -f "$v run $i: %e s %M KB" $B/steptrace_$v analyze "$SNAP" --out $W/o_${v}_$i -q 2>&1 | tail -1 | tee -a $OUT/timings.txt
done; done
set -- $VARIANTS
if [ $# -ge 2 ]; then
  diff -r $W/o_${1}_1 $W/o_${2}_1 > $OUT/diff.txt && echo "outputs identical ($1 vs $2)" | tee -a $OUT/timings.txt
fi
cp $W/o_${1}_1/summary.json $OUT/summary_$1.json
# PICKLE_LOAD=1: Python's pickle.load of the same file once (what every other viewer does).
if [ "${PICKLE_LOAD:-0}" = 1 ]; then
  /usr/bin/time -f "pickle.load: %e s %M KB" python3 -c "import pickle; pickle.load(open('$SNAP', 'rb'))" 2>&1 | tail -1 | tee -a $OUT/timings.txt
fi
python3 -c "
import pickletools, itertools
f = open('$SNAP', 'rb')
ops = {}
for op, arg, pos in itertools.islice(pickletools.genops(f), 3_000_000):
    ops[op.name] = ops.get(op.name, 0) + 1
print(sorted(ops.items(), key=lambda x: -x[1])[:20])
" | tee $OUT/opcodes_first3M.txt
nproc

#!/usr/bin/env bash
# A/B of two or more builds on one real snapshot (nanoGPT's train.py unchanged, as
# capture/corpus/real_snapshot.sh runs it, for SECONDS of training), each build timed three
# times, alternating, with its peak RSS; the first two builds' outputs compared.
#
#   VARIANTS="new base" [PICKLE_LOAD=1] bash capture/corpus/real_snapshot_ab.sh SECONDS
#   (on the GPU machine)
# Needs .corpus/src/nanoGPT and .corpus/bin/steptrace_<variant>.xz (builds without Parquet,
# stripped, carried to the device); writes timings.txt, diff.txt and the file's size to $OUT.
set -euo pipefail
SECS=${1:-150}
VARIANTS=${VARIANTS:-new base}
ROOT=$(pwd)
source "$ROOT/benches/snapshot_ab_common.sh"
W=/tmp/real_snapshot
bash "$ROOT/capture/corpus/nanogpt_snapshot.sh" "$W" "$SECS"
SNAP=$W/snapshot.pickle
cd "$W"
ls -l "$SNAP" | tee $OUT/file.txt
# PICKLE_LOAD=1: Python's pickle.load of the same file once too (what every other viewer does).
ab_runs "$SNAP" "$W" 3
python3 -c "
import pickletools, itertools
f = open('$SNAP', 'rb')
ops = {}
for op, arg, pos in itertools.islice(pickletools.genops(f), 3_000_000):
    ops[op.name] = ops.get(op.name, 0) + 1
print(sorted(ops.items(), key=lambda x: -x[1])[:20])
" | tee $OUT/opcodes_first3M.txt
nproc

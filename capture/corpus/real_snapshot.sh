#!/usr/bin/env bash
# A large memory snapshot of a program this project did not write, the way users make one:
# nanoGPT's train.py (github.com/karpathy/nanoGPT, .corpus/src/nanoGPT, run unchanged, on
# stand-in tokens as make_data.py writes them) under torch.cuda.memory._record_memory_history(), dumped
# with torch's own _dump_snapshot after SECONDS (default 180) of training. Then, on the same machine and
# file: `steptrace analyze SNAPSHOT` (twice), Python's pickle.load, and torch's
# `_memory_viz stats`, each timed with its peak RSS (docs/performance.md, "Memory snapshots").
#
#   bash capture/corpus/real_snapshot.sh OUT_DIR [SECONDS]     (on the GPU machine)
# Needs target/release/steptrace and .corpus/src/nanoGPT (the device's carried copies).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1
SECS=${2:-180}
W=/tmp/real_snapshot
mkdir -p "$OUT"
bash "$ROOT/capture/corpus/nanogpt_snapshot.sh" "$W" "$SECS"
SNAP=$W/snapshot.pickle
cd "$W"
ls -l "$SNAP"
timed() { /usr/bin/time -f "%e s %M KB  $1" "${@:2}" > /dev/null 2>> "$OUT/timings.txt" || echo "failed: $1" >> "$OUT/timings.txt"; tail -1 "$OUT/timings.txt"; }
"$ROOT/target/release/steptrace" analyze "$SNAP" --out "$W/a0" -q
cp "$W/a0/summary.json" "$OUT/summary.json"
timed "steptrace analyze SNAPSHOT (1)" "$ROOT/target/release/steptrace" analyze "$SNAP" --out "$W/a1" -q
timed "steptrace analyze SNAPSHOT (2)" "$ROOT/target/release/steptrace" analyze "$SNAP" --out "$W/a2" -q
timed "python pickle.load" python3 -c "import pickle; pickle.load(open('$SNAP', 'rb'))"
timed "torch _memory_viz stats" python3 -m torch.cuda._memory_viz stats "$SNAP"
# Ground truth for the peak: torch's own replay of the same file (memviz_reference.py).
timed "memviz_reference.py (pickle.load + torch's replay)" python3 "$ROOT/capture/corpus/memviz_reference.py" "$OUT/memviz_reference.json.gz" "$SNAP"
echo "file bytes: $(stat -c %s "$SNAP")" >> "$OUT/timings.txt"
nproc >> "$OUT/timings.txt"

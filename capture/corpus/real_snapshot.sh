#!/usr/bin/env bash
# A large memory snapshot of a program this project did not write, the way users make one:
# nanoGPT's train.py (github.com/karpathy/nanoGPT, .corpus/src/nanoGPT, run unchanged, on
# stand-in tokens as make_data.py writes them) under torch.cuda.memory._record_memory_history(), dumped
# with torch's own _dump_snapshot after SECONDS (default 180) of training. Then, on the same machine and
# file: `steptrace analyze SNAPSHOT` (twice), Python's pickle.load, and torch's
# `_memory_viz stats`, each timed with its peak RSS (docs/performance.md, "A real snapshot").
#
#   bash capture/corpus/real_snapshot.sh OUT_DIR [SECONDS]     (on the GPU machine)
# Needs target/release/steptrace and .corpus/src/nanoGPT (the device's carried copies).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1
SECS=${2:-180}
W=/tmp/real_snapshot
rm -rf "$W" && mkdir -p "$W" "$OUT"
cp -r "$ROOT/.corpus/src/nanoGPT" "$W/"
# Stand-in tokens as make_data.py writes them for the corpus (uint16, prepare.py's layout).
python3 - "$W/nanoGPT/data/openwebtext" <<'EOF'
import os, sys
import numpy as np
os.makedirs(sys.argv[1], exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train.bin", 4_000_000), ("val.bin", 400_000)):
    rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(os.path.join(sys.argv[1], name))
EOF
SNAP=$W/snapshot.pickle
cd "$W/nanoGPT"
# The program runs as `python3 train.py ARGS`; the history is recorded from the start and
# dumped when SECONDS have passed (the main thread interrupted, as Ctrl-C would).
python3 - "$SNAP" "$SECS" <<'EOF'
import runpy, sys, threading, time, _thread
import torch
snap, secs = sys.argv[1], float(sys.argv[2])
torch.cuda.memory._record_memory_history(max_entries=100_000_000)
sys.argv = ["train.py", "--dataset=openwebtext", "--compile=False", "--dtype=float16",
            "--gradient_accumulation_steps=4", "--batch_size=8", "--block_size=256",
            "--n_layer=6", "--n_head=6", "--n_embd=384", "--max_iters=1000000",
            "--lr_decay_iters=1000000", "--eval_interval=100000", "--eval_iters=2",
            "--log_interval=100", "--warmup_iters=10", "--out_dir=/tmp/real_snapshot/out"]
threading.Timer(secs, _thread.interrupt_main).start()
t0 = time.time()
try:
    runpy.run_path("train.py", run_name="__main__")
except KeyboardInterrupt:
    pass
t1 = time.time()
torch.cuda.memory._dump_snapshot(snap)
print(f"trained {t1 - t0:.0f} s; _dump_snapshot {time.time() - t1:.0f} s", flush=True)
EOF
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

#!/usr/bin/env bash
# A large memory snapshot of a program this project did not write, the way users make one:
# nanoGPT's train.py (github.com/karpathy/nanoGPT, .corpus/src/nanoGPT, run unchanged, on
# stand-in tokens as make_data.py writes them) under torch.cuda.memory._record_memory_history(),
# dumped with torch's own _dump_snapshot after SECONDS of training, as W/snapshot.pickle (W made
# anew). Used by real_snapshot.sh and real_snapshot_ab.sh.
#
#   bash capture/corpus/nanogpt_snapshot.sh W SECONDS     (on the GPU machine)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$1
SECS=$2
rm -rf "$W" && mkdir -p "$W"
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
python3 - "$SNAP" "$SECS" "$W/out" <<'EOF'
import runpy, sys, threading, time, _thread
import torch
snap, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
torch.cuda.memory._record_memory_history(max_entries=100_000_000)
sys.argv = ["train.py", "--dataset=openwebtext", "--compile=False", "--dtype=float16",
            "--gradient_accumulation_steps=4", "--batch_size=8", "--block_size=256",
            "--n_layer=6", "--n_head=6", "--n_embd=384", "--max_iters=1000000",
            "--lr_decay_iters=1000000", "--eval_interval=100000", "--eval_iters=2",
            "--log_interval=100", "--warmup_iters=10", "--out_dir=" + out]
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

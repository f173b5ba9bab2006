#!/usr/bin/env bash
# A/B of two or more builds on one real snapshot (nanoGPT's train.py unchanged, as
# capture/corpus/real_snapshot.sh runs it, for SECONDS of training), each build timed three
# times, alternating, with its peak RSS; the first two builds' outputs compared.
#
#   VARIANTS="new base" bash capture/corpus/real_snapshot_ab.sh SECONDS    (on the GPU machine)
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
rm -rf "$W" && mkdir -p "$W"
cp -r "$ROOT/.corpus/src/nanoGPT" "$W/"
python3 - "$W/nanoGPT/data/openwebtext" <<'PY'
import os, sys
import numpy as np
os.makedirs(sys.argv[1], exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train.bin", 4_000_000), ("val.bin", 400_000)):
    rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(os.path.join(sys.argv[1], name))
PY
SNAP=$W/snapshot.pickle
cd "$W/nanoGPT"
python3 - "$SNAP" "$SECS" <<'PY'
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
PY
cd "$W"
ls -l "$SNAP" | tee $OUT/file.txt
for i in 1 2 3; do for v in $VARIANTS; do
  /usr/bin/time -f "$v run $i: %e s %M KB" $B/steptrace_$v analyze "$SNAP" --out $W/o_${v}_$i -q 2>&1 | tail -1 | tee -a $OUT/timings.txt
done; done
set -- $VARIANTS
diff -r $W/o_${1}_1 $W/o_${2}_1 > $OUT/diff.txt && echo "outputs identical ($1 vs $2)" | tee -a $OUT/timings.txt
cp $W/o_${1}_1/summary.json $OUT/summary_$1.json
python3 -c "
import pickletools, itertools
f = open('$SNAP', 'rb')
ops = {}
for op, arg, pos in itertools.islice(pickletools.genops(f), 3_000_000):
    ops[op.name] = ops.get(op.name, 0) + 1
print(sorted(ops.items(), key=lambda x: -x[1])[:20])
" | tee $OUT/opcodes_first3M.txt
nproc

#!/usr/bin/env bash
# #46 on a real trace: nanoGPT's train.py unchanged under `steptrace capture` with a window
# of ACTIVE steps (capture writes trace.json.gz in members); the same text as one gzip stream
# (gzip -9, tensorboard_trace_handler's level) and plain; the default command on each at 2 and
# 16 threads, 5 interleaved rounds; capture's file brought back (to $OUT) for the 2-core runs.
set -euo pipefail
ACTIVE=${1:-20}
ROOT=$(pwd); B=/tmp/b; W=/tmp/w46; mkdir -p $B; rm -rf $W; mkdir -p $W
xz -dc .corpus/bin/steptrace_cur.xz > $B/st; chmod +x $B/st
cp -r .corpus/src/nanoGPT $W/
python3 - "$W/nanoGPT/data/openwebtext" <<'PY'
import os, sys
import numpy as np
os.makedirs(sys.argv[1], exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train.bin", 4_000_000), ("val.bin", 400_000)):
    rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(os.path.join(sys.argv[1], name))
PY
cd $W/nanoGPT
t0=$(date +%s)
$B/st capture --out $W/run --force --no-memory --no-et --stop-after-window 0 \
  --schedule skip_first=1,wait=1,warmup=1,active=$ACTIVE,repeat=1 -- \
  python3 train.py --dataset=openwebtext --compile=False --dtype=float16 \
  --gradient_accumulation_steps=4 --batch_size=8 --block_size=256 --n_layer=6 --n_head=6 --n_embd=384 \
  --max_iters=400 --lr_decay_iters=400 --eval_interval=100000 --eval_iters=2 --log_interval=10 --warmup_iters=10 \
  --out_dir=$W/ngout > $W/capture.log 2>&1 || { tail -30 $W/capture.log; exit 1; }
echo "capture: $(( $(date +%s) - t0 )) s" | tee $OUT/capture.txt
tail -5 $W/capture.log >> $OUT/capture.txt
cd $W
ls -l run/ | tee -a $OUT/capture.txt
cp run/trace.json.gz $OUT/nanogpt_trace.capture.json.gz
zcat run/trace.json.gz > plain.json
gzip -9 -c plain.json > one.pt.trace.json.gz
cp run/trace.json.gz members.capture.json.gz
ls -l plain.json one.pt.trace.json.gz members.capture.json.gz | tee $OUT/files.txt
python3 -c "
import gzip, json
for f in ('members.capture.json.gz', 'one.pt.trace.json.gz'):
    t = json.load(gzip.open(f))
    print(f, 'loads in gzip + json:', len(t['traceEvents']), 'events')
" | tee -a $OUT/files.txt
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')" | tee $OUT/times.txt
python3 - <<'PY' | tee -a $OUT/times.txt
import subprocess, time, statistics
W = "/tmp/w46"
files = (("plain", "plain.json"), ("one stream", "one.pt.trace.json.gz"), ("capture's members", "members.capture.json.gz"))
res = {}
for r in range(5):
    for j in (2, 16):
        for k, f in files:
            cmd = ["/tmp/b/st", "analyze", "-q", "-j", str(j), "--out", f"{W}/o_{j}_{k[0]}", f"{W}/{f}"]
            t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, k), []).append(time.perf_counter() - t0)
for j in (2, 16):
    p = statistics.median(res[(j, "plain")])
    for k, _ in files:
        m = statistics.median(res[(j, k)])
        print(f"-j {j:>2} default, {k}: median {m:.3f} s ({m/p:.2f}x plain); runs {[round(x, 3) for x in res[(j, k)]]}")
PY
for k in o m; do diff -r $W/o_2_p $W/o_2_$k > /dev/null && echo "outputs at -j 2: plain = ${k}" || diff -rq $W/o_2_p $W/o_2_$k | head -5; done | tee -a $OUT/times.txt
diff -r $W/o_2_p $W/o_16_p > /dev/null && echo "plain: -j 2 = -j 16" | tee -a $OUT/times.txt

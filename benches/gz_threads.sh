#!/usr/bin/env bash
# The same trace plain, as torch gzips it (one stream, gzip -6) and as capture writes it
# (members), timed at a few thread counts: default and lean `analyze`, 5 interleaved runs,
# medians and ratios to plain. Made for machines with many cores (the GPU machine's 16), where
# benches/bench.py's 2-thread rows do not show what bounds the run.
#
#   bash benches/gz_threads.sh STEPTRACE CAPTURE_FORM.json.gz [THREADS...]   (default: 2 16)
#
# CAPTURE_FORM.json.gz: a trace in capture's gzip members, e.g. the one bench.py writes
# (/tmp/steptrace-bench/trace_250mb.capture.json.gz); the plain and single-stream files are
# made from it in /tmp/gzb.
set -euo pipefail
B=$(readlink -f "${1:?steptrace binary}")
CAP=$(readlink -f "${2:?a capture-form .json.gz}")
shift 2
THREADS=${*:-2 16}
W=/tmp/gzb; mkdir -p $W
gunzip -c "$CAP" > $W/t.json
cp "$CAP" $W/t.capture.json.gz
python3 -c "
import gzip, shutil
with open('$W/t.json','rb') as fi, gzip.open('$W/t.pt.trace.json.gz','wb',compresslevel=6) as fo: shutil.copyfileobj(fi,fo)"
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')"
python3 - "$B" "$W" $THREADS <<'PY'
import subprocess, sys, time, statistics
B, W, threads = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
files = {"plain": f"{W}/t.json", "one stream": f"{W}/t.pt.trace.json.gz", "capture": f"{W}/t.capture.json.gz"}
res = {}
for r in range(5):
    for j in threads:
        for lean in (False, True):
            for k, f in files.items():
                cmd = [B, "analyze", "-q", "-j", str(j), "--out", f"{W}/o_{j}_{lean}_{k.replace(' ', '_')}"] + (["--no-plots", "--no-annotated-trace"] if lean else []) + [f]
                t0 = time.perf_counter(); subprocess.run(cmd, check=True); dt = time.perf_counter() - t0
                res.setdefault((j, lean, k), []).append(dt)
for j in threads:
    for lean in (False, True):
        base = statistics.median(res[(j, lean, "plain")])
        for k in files:
            m = statistics.median(res[(j, lean, k)])
            print(f"-j{j:<3} {'lean   ' if lean else 'default'} {k:<11} median {m:.3f} s  x{m/base:.2f}  runs {' '.join(f'{x:.3f}' for x in res[(j, lean, k)])}")
PY

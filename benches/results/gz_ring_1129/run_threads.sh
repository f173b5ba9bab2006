#!/usr/bin/env bash
# #46: what bounds one stream at many threads: the ring build's lean command on one stream at
# 2-16 threads, and the inflate alone (Python's zlib, C zlib) on the same file.
set -euo pipefail
B=/tmp/b; W=/tmp/w; mkdir -p $B $W
xz -dc .corpus/bin/steptrace_ring.xz > $B/st_ring; chmod +x $B/st_ring
python3 -c "import sys; sys.path.insert(0,'benches'); import bench; bench.make_trace('$W',250)"
gzip -6 -c $W/trace_250mb.json > $W/t.pt.trace.json.gz
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')"
python3 - <<'PY'
import subprocess, time, statistics, zlib
W = "/tmp/w"
raw = open(f"{W}/t.pt.trace.json.gz", "rb").read()
ts = []
for _ in range(3):
    t0 = time.perf_counter(); d = zlib.decompressobj(31); n = 0
    for i in range(0, len(raw), 1 << 20):
        n += len(d.decompress(raw[i:i + (1 << 20)], 1 << 22))
        while d.unconsumed_tail:
            n += len(d.decompress(d.unconsumed_tail, 1 << 22))
    ts.append(time.perf_counter() - t0)
print(f"C zlib (Python) inflate alone, 4 MiB outputs: {min(ts):.3f}-{max(ts):.3f} s for {n/1e6:.1f} MB")
res = {}
for r in range(5):
    for j in (2, 4, 8, 12, 14, 15, 16):
        for k, f in (("plain", f"{W}/trace_250mb.json"), ("one stream", f"{W}/t.pt.trace.json.gz")):
            cmd = ["/tmp/b/st_ring", "analyze", "-q", "-j", str(j), "--no-plots", "--no-annotated-trace", "--out", f"{W}/o_{j}_{k[0]}", f]
            t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, k), []).append(time.perf_counter() - t0)
for j in (2, 4, 8, 12, 14, 15, 16):
    p = statistics.median(res[(j, "plain")]); o = statistics.median(res[(j, "one stream")])
    print(f"-j {j:>2} lean: plain {p:.3f} s, one stream {o:.3f} s ({o/p:.2f}x)  one stream runs {[round(x,3) for x in res[(j,'one stream')]]}")
PY

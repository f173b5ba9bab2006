#!/usr/bin/env bash
# #46 on the GPU host's CPU: the single stream read a window at a time (ring) against the build
# before (new: the whole-text inflate), plain as the base; 5 interleaved rounds, 2 and 16 threads.
set -euo pipefail
B=/tmp/b; W=/tmp/w; mkdir -p $B $W
for v in new ring; do xz -dc .corpus/bin/steptrace_$v.xz > $B/st_$v; chmod +x $B/st_$v; done
python3 -c "import sys; sys.path.insert(0,'benches'); import bench; print(bench.make_trace('$W',250))"
gzip -6 -c $W/trace_250mb.json > $W/t.pt.trace.json.gz
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')"
python3 - <<'PY'
import subprocess, time, statistics, os, resource
B, W = "/tmp/b", "/tmp/w"
runs = {("ring","plain"): f"{W}/trace_250mb.json", ("ring","one stream"): f"{W}/t.pt.trace.json.gz", ("new","one stream"): f"{W}/t.pt.trace.json.gz"}
res = {}
for r in range(5):
    for j in (2, 16):
        for lean in (False, True):
            for (b, k), f in runs.items():
                out = f"{W}/o_{b}_{j}_{lean}_{k.replace(' ','_')}"
                cmd = ["/usr/bin/time", "-f", "%M", f"{B}/st_{b}", "analyze", "-q", "-j", str(j), "--out", out] + (["--no-plots", "--no-annotated-trace"] if lean else []) + [f]
                t0 = time.perf_counter(); p = subprocess.run(cmd, check=True, capture_output=True, text=True); dt = time.perf_counter() - t0
                res.setdefault((j, lean, b, k), []).append((dt, int(p.stderr.strip().splitlines()[-1]) / 1024))
for j in (2, 16):
    for lean in (False, True):
        base = statistics.median(x[0] for x in res[(j, lean, "ring", "plain")])
        for (b, k) in runs:
            v = res[(j, lean, b, k)]
            m = statistics.median(x[0] for x in v)
            print(f"{j:>2} threads {'lean   ' if lean else 'default'} {b:>4} {k:<10} median {m:.3f} s ({m/base:.2f}x plain) peak RSS {max(x[1] for x in v):.0f} MB  runs {[round(x[0],3) for x in v]}")
PY
for j in 2 16; do diff -r $W/o_ring_${j}_False_one_stream $W/o_new_${j}_False_one_stream > /dev/null && echo "outputs at $j threads identical (ring vs new, default)"; done

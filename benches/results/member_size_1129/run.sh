#!/usr/bin/env bash
# #46: what capture's member size does to the read, on the GPU machine's CPU. The 255 MB
# benchmark trace (benches/gen_trace.py) written by capture's writer with members of 1, 2 and
# 4 MiB (formats/examples/gzip_members.rs, MEMBER_KIB; 4 MiB is capture's), plain, and one stream (gzip -6); the
# default and the lean command at 2, 4, 8 and 16 threads, 5 interleaved rounds; build cd33dbe
# without Parquet (steptrace_hand).
set -euo pipefail
D=.corpus/m46; W=/tmp/w46m; rm -rf $W; mkdir -p $W
xz -dc $D/st.xz > $W/st; chmod +x $W/st
python3 -c "import sys; sys.path.insert(0,'benches'); import bench; print(bench.make_trace('$W',250))"
mv $W/trace_250mb.json $W/plain.json
# Capture's member form, by capture's own writer (formats/examples/gzip_members.rs, built at
# this commit) with members of 1, 2 and 4 MiB.
xz -dc $D/gzip_members.xz > $W/gzm; chmod +x $W/gzm
for k in 1024 2048 4096; do $W/gzm $W/plain.json $W/m$k.json.gz $k; done
gzip -6 -c $W/plain.json > $W/one.json.gz
ls -l $W | tee $OUT/files.txt
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')" | tee $OUT/times.txt
python3 - <<'PY' | tee -a $OUT/times.txt
import subprocess, time, statistics
W = "/tmp/w46m"
files = (("plain", "plain.json"), ("one stream", "one.json.gz"), ("members 1 MiB", "m1024.json.gz"), ("members 2 MiB", "m2048.json.gz"), ("members 4 MiB", "m4096.json.gz"))
lean = ["--no-plots", "--no-annotated-trace"]
res = {}
for r in range(5):
    for j in (2, 4, 8, 16):
        for mode in ("default", "lean"):
            for k, f in files:
                cmd = [f"{W}/st", "analyze", "-q", "-j", str(j), "--out", f"{W}/o_{j}_{mode}_{k.replace(' ', '_')}"] + (lean if mode == "lean" else []) + [f"{W}/{f}"]
                t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, mode, k), []).append(time.perf_counter() - t0)
for j in (2, 4, 8, 16):
    for mode in ("default", "lean"):
        p = statistics.median(res[(j, mode, "plain")])
        print(f"-j {j:>2} {mode}: " + "; ".join(f"{k} {statistics.median(res[(j, mode, k)]):.3f} s ({statistics.median(res[(j, mode, k)]) / p:.2f}x)" for k, _ in files))
print("runs:", {f"{j} {m} {k}": [round(x, 3) for x in v] for (j, m, k), v in res.items()})
PY
for j in 2 16; do for k in one_stream members_1_MiB members_2_MiB members_4_MiB; do
  diff -r $W/o_${j}_lean_plain $W/o_${j}_lean_$k > /dev/null && echo "lean outputs -j $j: plain = $k" || { echo "lean outputs -j $j: plain != $k"; diff -rq $W/o_${j}_lean_plain $W/o_${j}_lean_$k | head -3; }
done; done | tee -a $OUT/times.txt

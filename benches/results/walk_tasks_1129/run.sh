#!/usr/bin/env bash
# #46: a window (or piece) a rayon task in the parallel walks (with_max_len(1)) against 55fdc0b
# on the GPU machine's CPU: the 255 MB benchmark trace plain, as one stream (gzip -6), and by
# capture's writer in members of 2 MiB (capture's now) and 4 MiB; both builds (without
# Parquet), the default and the lean command at 2 and 16 threads, 5 interleaved rounds;
# outputs compared between the builds.
set -euo pipefail
D=.corpus/m46; W=/tmp/w46o; rm -rf $W; mkdir -p $W
xz -dc $D/st_new.xz > $W/st_a; xz -dc $D/st_ml.xz > $W/st_b; chmod +x $W/st_a $W/st_b
python3 -c "import sys; sys.path.insert(0,'benches'); import bench; print(bench.make_trace('$W',250))"
mv $W/trace_250mb.json $W/plain.json
xz -dc $D/gzip_members.xz > $W/gzm; chmod +x $W/gzm
$W/gzm $W/plain.json $W/m2048.json.gz; $W/gzm $W/plain.json $W/m4096.json.gz 4096
gzip -6 -c $W/plain.json > $W/one.json.gz
ls -l $W | tee $OUT/files.txt
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')" | tee $OUT/times.txt
python3 - <<'PY' | tee -a $OUT/times.txt
import subprocess, time, statistics
W = "/tmp/w46o"
files = (("plain", "plain.json"), ("one stream", "one.json.gz"), ("members 2 MiB", "m2048.json.gz"), ("members 4 MiB", "m4096.json.gz"))
lean = ["--no-plots", "--no-annotated-trace"]
res = {}
for r in range(5):
    for j in (2, 16):
        for mode in ("default", "lean"):
            for b in ("a", "b"):
                for k, f in files:
                    out = f"{W}/o_{b}_{j}_{mode}_{k.replace(' ', '_')}"
                    cmd = [f"{W}/st_{b}", "analyze", "-q", "-j", str(j), "--out", out] + (lean if mode == "lean" else []) + [f"{W}/{f}"]
                    t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, mode, b, k), []).append(time.perf_counter() - t0)
for j in (2, 16):
    for mode in ("default", "lean"):
        for b in ("a", "b"):
            p = statistics.median(res[(j, mode, b, "plain")])
            print(f"-j {j:>2} {mode:<7} {b}: " + "; ".join(f"{k} {statistics.median(res[(j, mode, b, k)]):.3f} s ({statistics.median(res[(j, mode, b, k)]) / p:.2f}x)" for k, _ in files))
print("runs:", {f"{j} {m} {b} {k}": [round(x, 3) for x in v] for (j, m, b, k), v in res.items()})
PY
set +e +o pipefail
for j in 2 16; do for m in default lean; do for k in plain one_stream members_2_MiB members_4_MiB; do
  if diff -r $W/o_a_${j}_${m}_$k $W/o_b_${j}_${m}_$k > /dev/null; then echo "outputs -j $j $m $k: a = b"; else echo "outputs -j $j $m $k: a != b"; diff -rq $W/o_a_${j}_${m}_$k $W/o_b_${j}_${m}_$k; fi
done; done; done 2>&1 | tee -a $OUT/times.txt

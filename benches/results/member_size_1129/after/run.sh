#!/usr/bin/env bash
# #46: 2 MiB members (55fdc0b) against cd33dbe on the GPU machine's CPU: the 255 MB benchmark
# trace plain, as one stream (gzip -6), and by capture's writer in members of 2 MiB (capture's
# now) and 4 MiB (capture's before); both builds (without Parquet), the default and the lean
# command at 2 and 16 threads, 5 interleaved rounds; outputs compared between the builds.
set -euo pipefail
D=.corpus/m46; W=/tmp/w46n; rm -rf $W; mkdir -p $W
xz -dc $D/st.xz > $W/st_old; xz -dc $D/st_new.xz > $W/st_new; chmod +x $W/st_old $W/st_new
python3 -c "import sys; sys.path.insert(0,'benches'); import bench; print(bench.make_trace('$W',250))"
mv $W/trace_250mb.json $W/plain.json
xz -dc $D/gzip_members.xz > $W/gzm; chmod +x $W/gzm
$W/gzm $W/plain.json $W/m2048.json.gz; $W/gzm $W/plain.json $W/m4096.json.gz 4096
gzip -6 -c $W/plain.json > $W/one.json.gz
ls -l $W | tee $OUT/files.txt
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')" | tee $OUT/times.txt
python3 - <<'PY' | tee -a $OUT/times.txt
import subprocess, time, statistics
W = "/tmp/w46n"
files = (("plain", "plain.json"), ("one stream", "one.json.gz"), ("members 2 MiB", "m2048.json.gz"), ("members 4 MiB", "m4096.json.gz"))
lean = ["--no-plots", "--no-annotated-trace"]
res = {}
for r in range(5):
    for j in (2, 16):
        for mode in ("default", "lean"):
            for b in ("old", "new"):
                for k, f in files:
                    out = f"{W}/o_{b}_{j}_{mode}_{k.replace(' ', '_')}"
                    cmd = [f"{W}/st_{b}", "analyze", "-q", "-j", str(j), "--out", out] + (lean if mode == "lean" else []) + [f"{W}/{f}"]
                    t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, mode, b, k), []).append(time.perf_counter() - t0)
for j in (2, 16):
    for mode in ("default", "lean"):
        for b in ("old", "new"):
            p = statistics.median(res[(j, mode, b, "plain")])
            print(f"-j {j:>2} {mode:<7} {b}: " + "; ".join(f"{k} {statistics.median(res[(j, mode, b, k)]):.3f} s ({statistics.median(res[(j, mode, b, k)]) / p:.2f}x)" for k, _ in files))
print("runs:", {f"{j} {m} {b} {k}": [round(x, 3) for x in v] for (j, m, b, k), v in res.items()})
PY
for j in 2 16; do for m in default lean; do for k in plain one_stream members_2_MiB members_4_MiB; do
  if diff -r $W/o_old_${j}_${m}_$k $W/o_new_${j}_${m}_$k > /dev/null; then echo "outputs -j $j $m $k: old = new"; else
    # the annotated .gz of a capture-form input is written in members of the new size: compare its text
    diff -rq $W/o_old_${j}_${m}_$k $W/o_new_${j}_${m}_$k | tee -a $OUT/diff.txt | head -3
    for g in $W/o_old_${j}_${m}_$k/*.json.gz; do n=$W/o_new_${j}_${m}_$k/$(basename $g); cmp <(zcat $g) <(zcat $n) > /dev/null && echo "  $(basename $g): the same text"; done
  fi
done; done; done 2>&1 | tee -a $OUT/times.txt

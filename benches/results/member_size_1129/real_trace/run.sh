#!/usr/bin/env bash
# #46 on a real trace: nanoGPT's train.py unchanged under `steptrace capture` (the 177.9 MB
# trace of benches/results/real_trace_nanogpt_gz_1129), written by capture's writer in 2 MiB
# members (capture's now) and 4 MiB members (capture's before), plain, and one stream (gzip -9,
# tensorboard_trace_handler's level); build 3ca7566 without Parquet; the default and the lean
# command at 2, 8 and 16 threads, 5 interleaved rounds.
set -euo pipefail
D=.corpus/m46; W=/tmp/w46r; rm -rf $W; mkdir -p $W
xz -dc $D/st_ml.xz > $W/st; chmod +x $W/st
xz -dc $D/gzip_members.xz > $W/gzm; chmod +x $W/gzm
cp $D/real_m2048.json.gz $W/m2048.json.gz
zcat $W/m2048.json.gz > $W/plain.json
$W/gzm $W/plain.json $W/m4096.json.gz 4096
gzip -9 -c $W/plain.json > $W/one.json.gz
ls -l $W | tee $OUT/files.txt
echo "$(nproc) cores; $(lscpu | grep -i 'model name' | sed 's/ \+/ /g')" | tee $OUT/times.txt
python3 - <<'PY' | tee -a $OUT/times.txt
import subprocess, time, statistics
W = "/tmp/w46r"
files = (("plain", "plain.json"), ("one stream", "one.json.gz"), ("members 2 MiB", "m2048.json.gz"), ("members 4 MiB", "m4096.json.gz"))
lean = ["--no-plots", "--no-annotated-trace"]
res = {}
for r in range(5):
    for j in (2, 8, 16):
        for mode in ("default", "lean"):
            for k, f in files:
                out = f"{W}/o_{j}_{mode}_{k.replace(' ', '_')}"
                cmd = [f"{W}/st", "analyze", "-q", "-j", str(j), "--out", out] + (lean if mode == "lean" else []) + [f"{W}/{f}"]
                t0 = time.perf_counter(); subprocess.run(cmd, check=True); res.setdefault((j, mode, k), []).append(time.perf_counter() - t0)
for j in (2, 8, 16):
    for mode in ("default", "lean"):
        p = statistics.median(res[(j, mode, "plain")])
        print(f"-j {j:>2} {mode:<7}: " + "; ".join(f"{k} {statistics.median(res[(j, mode, k)]):.3f} s ({statistics.median(res[(j, mode, k)]) / p:.2f}x)" for k, _ in files))
print("runs:", {f"{j} {m} {k}": [round(x, 3) for x in v] for (j, m, k), v in res.items()})
PY

"""Benchmark: steptrace against Python's json.load and HolisticTraceAnalysis on the same files.

    python3 benches/bench.py [--sizes 250] [--runs 3] [--hta] [--big 2000] [--snapshot 1000]
                             [--work /tmp/steptrace-bench]

Makes traces of the given sizes (MB) from sample_traces/resnet18 with benches/gen_trace.py,
builds steptrace in release mode, and prints one table: wall time (median of --runs) and peak
RSS of `steptrace analyze` (1 and 2 threads, plain and gzip), `json.load`, and, with --hta,
HolisticTraceAnalysis's TraceAnalysis load (installed from PyPI into a venv under --work).
--big N adds one `steptrace analyze` of an N MB trace (time and peak RSS against the file
size); --snapshot N adds the ingest of an N MB snapshot pickle made by
benches/gen_snapshot.py (timed inside the process by the `stages` example).
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd, env=None):
    """(wall seconds, peak RSS MB) of a command, via /usr/bin/time."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    rss_kb = int(p.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024


def median_of(runs, cmd, env=None):
    res = [timed(cmd, env) for _ in range(runs)]
    return statistics.median(r[0] for r in res), max(r[1] for r in res)


def make_trace(work, mb):
    path = os.path.join(work, f"trace_{mb}mb.json")
    if os.path.exists(path):
        return path
    src = os.path.join(ROOT, "sample_traces/resnet18/trace.json.gz")
    # The size of one copy as gen_trace.py writes it (json.dumps spacing, not the profiler's).
    one = len(json.dumps(json.load(gzip.open(src))).encode())
    copies = max(1, -(-int(mb * 1e6) // one))
    subprocess.run([sys.executable, os.path.join(ROOT, "benches/gen_trace.py"), src, path, "--copies", str(copies)], check=True)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="250")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hta", action="store_true")
    ap.add_argument("--work", default="/tmp/steptrace-bench")
    ap.add_argument("--big", type=int, default=0)
    ap.add_argument("--snapshot", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "--example", "stages"], cwd=ROOT, check=True)
    st = os.path.join(ROOT, "target/release/steptrace")
    hta_py = None
    if a.hta:
        venv = os.environ.get("HTA_VENV") or os.path.join(a.work, "venv")
        if not os.path.exists(venv):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            subprocess.run([os.path.join(venv, "bin/pip"), "install", "-q", "HolisticTraceAnalysis"], check=True)
        hta_py = os.path.join(venv, "bin/python")
    rows = []
    for mb in [int(x) for x in a.sizes.split(",")]:
        path = make_trace(a.work, mb)
        size = os.path.getsize(path) / 1e6
        gz = path + ".gz"
        if not os.path.exists(gz):
            with open(path, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
                shutil.copyfileobj(fi, fo)
        out = os.path.join(a.work, "out")
        base = [st, "analyze", "--out", out, "--no-plots", "--no-annotated-trace", "-q"]
        r = {}
        # Interleaved, so that the 1- and 2-thread runs (whose ratio is a target) meet the
        # machine in the same state: on a shared VM its speed drifts within minutes.
        cmds = {
            "steptrace -j1": base + ["-j", "1", path],
            "steptrace -j2": base + ["-j", "2", path],
            "steptrace -j2 .gz": base + ["-j", "2", gz],
        }
        res = {k: [] for k in cmds}
        for _ in range(a.runs):
            for k, cmd in cmds.items():
                res[k].append(timed(cmd))
        for k, rs in res.items():
            r[k] = (statistics.median(x[0] for x in rs), max(x[1] for x in rs))
        r["gzip -dc (decompression alone)"] = median_of(a.runs, ["sh", "-c", f"gzip -dc {gz} > /dev/null"])
        r["python json.load"] = median_of(a.runs, [sys.executable, "-c", f"import json; json.load(open('{path}'))"])
        if hta_py:
            hdir = os.path.join(a.work, f"hta_{mb}")
            os.makedirs(hdir, exist_ok=True)
            link = os.path.join(hdir, "rank-0.json")
            if not os.path.exists(link):
                os.symlink(path, link)
            code = f"from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir='{hdir}')"
            r["HolisticTraceAnalysis load"] = median_of(1, [hta_py, "-c", code])
        ref = r["steptrace -j2"][0]
        for k, (w, rss) in r.items():
            rows.append((f"{size:.0f} MB", k, w, rss, w / ref, rss / size))
    if a.big:
        path = make_trace(a.work, a.big)
        size = os.path.getsize(path) / 1e6
        out = os.path.join(a.work, "out_big")
        # Into the page cache first, as the smaller files are by the runs before the median.
        subprocess.run(["sh", "-c", f"cat {path} > /dev/null"], check=True)
        w, rss = median_of(1, [st, "analyze", "--out", out, "--no-plots", "--no-annotated-trace", "-q", "-j", "2", path])
        rows.append((f"{size:.0f} MB", "steptrace -j2 (large trace)", w, rss, float("nan"), rss / size))
    if a.snapshot:
        snap = os.path.join(a.work, f"snapshot_{a.snapshot}mb.pickle")
        if not os.path.exists(snap):
            src = os.path.join(ROOT, "sample_traces/resnet18/snapshot.pickle.gz")
            subprocess.run([sys.executable, os.path.join(ROOT, "benches/gen_snapshot.py"), src, snap, "--mb", str(a.snapshot)], check=True)
        size = os.path.getsize(snap) / 1e6
        subprocess.run(["sh", "-c", f"cat {snap} > /dev/null"], check=True)
        stages = os.path.join(ROOT, "target/release/examples/stages")
        loads = []
        for _ in range(a.runs):
            p = subprocess.run(["/usr/bin/time", "-f", "%M", stages, snap], capture_output=True, text=True, check=True)
            load = float(p.stdout.split("load (read+unpickle+extract) ")[1].split("s")[0])
            loads.append((load, int(p.stderr.strip().splitlines()[-1]) / 1024))
        w = statistics.median(x[0] for x in loads)
        rss = max(x[1] for x in loads)
        rows.append((f"{size:.0f} MB", "snapshot ingest (in-process)", w, rss, float("nan"), rss / size))
    print(f"{'input':>8}  {'what':<32} {'wall s':>8} {'peak RSS MB':>12} {'x steptrace -j2':>16} {'RSS/size':>9}")
    for t, k, w, rss, ratio, rr in rows:
        print(f"{t:>8}  {k:<32} {w:>8.3f} {rss:>12.0f} {ratio:>16.2f} {rr:>9.2f}")


if __name__ == "__main__":
    main()

"""Benchmark: steptrace against Python's json.load and HolisticTraceAnalysis on the same files.

    python3 benches/bench.py [--sizes 250] [--runs 3] [--hta] [--big 2000] [--snapshot 1000[,10000]] [--snapshot-reuse]
                             [--hta-runs 3] [--perfetto trace_processor_shell]
                             [--work /tmp/steptrace-bench]

Makes traces of the given sizes (MB) from sample_traces/resnet18 with benches/gen_trace.py,
builds steptrace in release mode, and prints one table: wall time (median of --runs) and peak
RSS of `steptrace analyze` as users type it (every output: plots, report, Parquet, annotated
trace) at 1 and 2 threads, plain and `.pt.trace.json.gz`, the same with the heap on the
allocator's default pages (_RJEM_MALLOC_CONF=thp:default), the same with plots and the
annotated trace off, `json.load`, and, with --hta, HolisticTraceAnalysis's TraceAnalysis load (installed
from PyPI into a venv under --work; median of --hta-runs, as its time moves as much as ours).
--big N adds one `steptrace analyze` of an N MB trace (time and peak RSS against the file
size); --snapshot N adds the ingest of an N MB snapshot pickle made by
benches/gen_snapshot.py (timed inside the process by the `stages` example). --perfetto PATH
loads both annotated traces in Perfetto's trace processor (benches/perfetto_check.py; build
one with benches/build_trace_processor.sh) and checks them against the input.
"""
import argparse
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
import perfetto_check  # noqa: E402 (beside this script)


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


def write_members(src, dst):
    """`src` gzipped by capture's own writer (formats/examples/gzip_members.rs)."""
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "steptrace-formats", "--example", "gzip_members"], cwd=ROOT, check=True)
    subprocess.run([os.path.join(ROOT, "target/release/examples/gzip_members"), src, dst], check=True)


def make_trace(work, mb):
    path = os.path.join(work, f"trace_{mb}mb.json")
    if os.path.exists(path):
        return path
    src = os.path.join(ROOT, "sample_traces/resnet18/trace.json.gz")
    # The size of one copy: gen_trace.py keeps the sample's own (Kineto's) layout.
    one = len(gzip.open(src).read())
    copies = max(1, -(-int(mb * 1e6) // one))
    subprocess.run([sys.executable, os.path.join(ROOT, "benches/gen_trace.py"), src, path, "--copies", str(copies)], check=True)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="250")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hta", action="store_true")
    ap.add_argument("--hta-runs", type=int, default=3, help="HolisticTraceAnalysis loads (median)")
    ap.add_argument("--work", default="/tmp/steptrace-bench")
    ap.add_argument("--big", type=int, default=0)
    # --snapshot N[,M...]: snapshots of N MB (each size); --snapshot-reuse: generated with
    # gen_snapshot.py --reuse-addresses (a history that frees and reuses its blocks, as a
    # program's does) instead of shifted addresses.
    ap.add_argument("--snapshot", default="")
    ap.add_argument("--snapshot-reuse", action="store_true")
    # --merge-ranks N: `steptrace merge` of N ranks' Parquet results (examples/rank_results.rs,
    # copies of the bundled sample's analysis under N rank numbers).
    ap.add_argument("--merge-ranks", type=int, default=0)
    # With --snapshot: also Python's pickle.load of the same file (what every other viewer
    # does first) and torch's `_memory_viz trace_plot` (the file torch/cuda/_memory_viz.py of
    # PyTorch, pure Python, given by path: it needs no torch to run), each once.
    ap.add_argument("--snapshot-baselines", action="store_true")
    ap.add_argument("--memory-viz", help="path of torch/cuda/_memory_viz.py")
    # The in-process ingest row needs the `stages` example, a build of its own (polars again).
    ap.add_argument("--no-ingest-row", action="store_true")
    ap.add_argument("--perfetto", help="a trace_processor_shell binary")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    snap_sizes = [int(x) for x in a.snapshot.split(",") if x]
    if snap_sizes and not a.no_ingest_row:
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
    checks = []
    for mb in [int(x) for x in a.sizes.split(",") if x]:
        path = make_trace(a.work, mb)
        size = os.path.getsize(path) / 1e6
        # The name torch.profiler's tensorboard_trace_handler gives a compressed trace.
        gz = path[: -len(".json")] + ".pt.trace.json.gz"
        if not os.path.exists(gz):
            with open(path, "rb") as fi, gzip.open(gz, "wb", compresslevel=6) as fo:
                shutil.copyfileobj(fi, fo)
        # The form `steptrace capture` writes (formats/src/gzip_members.rs), by its own writer:
        # members of gzip_members::PIECE bytes of input (2 MiB), each saying its length in an
        # extra field, zlib level 6.
        cgz = path[: -len(".json")] + ".capture.json.gz"
        # Written every run (a second or two): a file kept under --work from an older build
        # would time that build's member size, not capture's now.
        write_members(path, cgz)
        out = os.path.join(a.work, "out")
        out_gz = os.path.join(a.work, "out_gz")
        out_cgz = os.path.join(a.work, "out_cgz")
        lean = ["--no-plots", "--no-annotated-trace"]
        r = {}
        # Interleaved, so that every row meets the machine in the same state: on a shared VM
        # its speed drifts within minutes. The first rows are the command users type.
        cmds = {
            "steptrace analyze (default) -j2": [st, "analyze", "-q", "-j", "2", "--out", out, path],
            # A first analysis: nothing of an earlier run in the output directory to reuse or
            # remove (the directory is deleted before each run, outside the timing).
            "steptrace analyze (default) -j2, fresh --out": [st, "analyze", "-q", "-j", "2", "--out", out + "_fresh", path],
            # The heap on the allocator's default pages: what jemalloc's transparent huge
            # pages (src/process.rs) save, beside the row that has them.
            "  heap on default pages (thp:default) -j2": [st, "analyze", "-q", "-j", "2", "--out", out + "_nothp", path],
            "steptrace analyze (default) -j1": [st, "analyze", "-q", "-j", "1", "--out", out, path],
            "steptrace analyze (default) .gz": [st, "analyze", "-q", "-j", "2", "--out", out_gz, gz],
            "  no plots/annotated trace -j2": [st, "analyze", "-q", "-j", "2", "--out", out + "_lean"] + lean + [path],
            "  no plots/annotated trace -j1": [st, "analyze", "-q", "-j", "1", "--out", out + "_lean"] + lean + [path],
            "  no plots/annotated trace .gz": [st, "analyze", "-q", "-j", "2", "--out", out_gz + "_lean"] + lean + [gz],
            "steptrace analyze (default) capture's .gz": [st, "analyze", "-q", "-j", "2", "--out", out_cgz, cgz],
            "  no plots/annotated trace capture's .gz": [st, "analyze", "-q", "-j", "2", "--out", out_cgz + "_lean"] + lean + [cgz],
        }
        nothp = dict(os.environ, _RJEM_MALLOC_CONF="thp:default")
        res = {k: [] for k in cmds}
        for _ in range(a.runs):
            for k, cmd in cmds.items():
                if k.endswith("fresh --out"):
                    shutil.rmtree(out + "_fresh", ignore_errors=True)
                res[k].append(timed(cmd, env=nothp if "thp:default" in k else None))
        for k, rs in res.items():
            r[k] = (statistics.median(x[0] for x in rs), max(x[1] for x in rs))
        # Each round's ratio to plain, its median beside the ratio of the medians the table
        # gives: on this shared machine a row's median can come from another minute than
        # plain's, while a round's rows run within seconds of each other.
        for k, base in (
            ("steptrace analyze (default) .gz", "steptrace analyze (default) -j2"),
            ("steptrace analyze (default) capture's .gz", "steptrace analyze (default) -j2"),
            ("  no plots/annotated trace .gz", "  no plots/annotated trace -j2"),
            ("  no plots/annotated trace capture's .gz", "  no plots/annotated trace -j2"),
        ):
            ratios = [x[0] / y[0] for x, y in zip(res[k], res[base])]
            checks.append(
                f"{k.strip()}: median of the rounds' ratios to plain {statistics.median(ratios):.2f}"
                f" (rounds: {' '.join(f'{x:.2f}' for x in ratios)}; seconds: {' '.join(f'{x[0]:.3f}' for x in res[k])},"
                f" plain {' '.join(f'{y[0]:.3f}' for y in res[base])})"
            )
        r["gzip -dc (decompression alone)"] = median_of(a.runs, ["sh", "-c", f"gzip -dc {gz} > /dev/null"])
        r["python json.load"] = median_of(a.runs, [sys.executable, "-c", f"import json; json.load(open('{path}'))"])
        # The annotated traces load in Python (gzip + json) with every original event, and
        # with --perfetto in Perfetto's trace processor (the input queried there once).
        n_in = len(perfetto_check.json_events(path))
        # The capture-form file loads in Python's gzip + json with every event.
        n_c = len(perfetto_check.json_events(cgz))
        checks.append(f"{os.path.basename(cgz)}: loads in Python (gzip + json), {n_c} events of {n_in}")
        assert n_c == n_in
        tp_in = perfetto_check.load(a.perfetto, path) if a.perfetto else None
        if a.perfetto:
            # The same trace, not an annotated one: the same slices, no new import errors.
            ok, lines, _ = perfetto_check.check_same(a.perfetto, tp_in, cgz)
            checks.append(f"{os.path.basename(cgz)} in Perfetto's trace processor: " + ("loads, every check passed" if ok else "FAILED"))
            checks.extend("  " + line for line in lines)
        for o, name, of in (
            (out, "annotated.pt.trace.json", "plain"),
            (out_gz, "annotated.pt.trace.json.gz", "one stream"),
            (out_cgz, "annotated.pt.trace.json.gz", "capture's members"),
        ):
            evs = perfetto_check.json_events(os.path.join(o, name))
            n_out = len(evs)
            label = f"{name} (of the {of} input)"
            checks.append(f"{label}: loads in Python, {n_out} events ({n_out - n_in} added to {n_in})")
            assert n_out > n_in, label
            if a.perfetto:
                ok, lines, _ = perfetto_check.check(a.perfetto, tp_in, os.path.join(o, name), evs)
                checks.append(f"{label} in Perfetto's trace processor: " + ("loads, every check passed" if ok else "FAILED"))
                checks.extend("  " + line for line in lines)
            del evs
        if hta_py:
            hdir = os.path.join(a.work, f"hta_{mb}")
            os.makedirs(hdir, exist_ok=True)
            link = os.path.join(hdir, "rank-0.json")
            if not os.path.exists(link):
                os.symlink(path, link)
            code = f"from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir='{hdir}')"
            r["HolisticTraceAnalysis load"] = median_of(a.hta_runs, [hta_py, "-c", code])
            # HTA reads the annotated trace too (its own parser, over the added tracks).
            adir = os.path.join(a.work, f"hta_annotated_{mb}")
            os.makedirs(adir, exist_ok=True)
            alink = os.path.join(adir, "rank-0.json.gz")
            if os.path.lexists(alink):
                os.remove(alink)
            os.symlink(os.path.join(out_gz, "annotated.pt.trace.json.gz"), alink)
            p = subprocess.run([hta_py, "-c", f"from hta.trace_analysis import TraceAnalysis; t = TraceAnalysis(trace_dir='{adir}'); print(len(t.t.get_trace(0)))"], capture_output=True, text=True)
            checks.append("annotated.pt.trace.json.gz in HolisticTraceAnalysis: " + (f"loads, {p.stdout.strip()} rows" if p.returncode == 0 else "FAILED: " + p.stderr.strip()[-300:]))
            # The form capture writes (gzip members), against the plain file's load.
            cdir = os.path.join(a.work, f"hta_capture_{mb}")
            os.makedirs(cdir, exist_ok=True)
            clink = os.path.join(cdir, "rank-0.json.gz")
            if not os.path.lexists(clink):
                os.symlink(cgz, clink)
            hta_rows = lambda d: subprocess.run([hta_py, "-c", f"from hta.trace_analysis import TraceAnalysis; print(len(TraceAnalysis(trace_dir='{d}').t.get_trace(0)))"], capture_output=True, text=True)
            pc, pp = hta_rows(cdir), hta_rows(hdir)
            same = pc.returncode == 0 and pc.stdout == pp.stdout
            checks.append(f"{os.path.basename(cgz)} in HolisticTraceAnalysis: " + (f"loads, {pc.stdout.strip()} rows, as the plain file" if same else "FAILED: " + (pc.stdout + pc.stderr).strip()[-300:]))
        ref = r["steptrace analyze (default) -j2"][0]
        for k, (w, rss) in r.items():
            rows.append((f"{size:.0f} MB", k, w, rss, w / ref, rss / size))
    # A trace exactly as torch.profiler wrote it (nanoGPT's train.py on the H100, committed
    # under sample_traces/corpus), not repeated or re-laid out: the generated file above is the
    # bundled ResNet-18 capture repeated, so this row checks that its ratio holds on a program
    # this project did not write.
    real_gz = os.path.join(ROOT, "sample_traces/corpus/nanogpt_train_fp16_accum/trace.json.gz")
    real = os.path.join(a.work, "nanogpt_train_trace.json")
    if not os.path.exists(real):
        with gzip.open(real_gz) as fi, open(real, "wb") as fo:
            shutil.copyfileobj(fi, fo)
    size = os.path.getsize(real) / 1e6
    rout = os.path.join(a.work, "out_real")
    rcmds = {
        "nanoGPT as torch wrote it: default": [st, "analyze", "-q", "-j", "2", "--out", rout, real],
        "nanoGPT: python json.load": [sys.executable, "-c", f"import json; json.load(open('{real}'))"],
    }
    rres = {k: [] for k in rcmds}
    for _ in range(a.runs):
        for k, cmd in rcmds.items():
            rres[k].append(timed(cmd))
    rr = {k: (statistics.median(x[0] for x in v), max(x[1] for x in v)) for k, v in rres.items()}
    ref = rr["nanoGPT as torch wrote it: default"][0]
    for k, (w, rss) in rr.items():
        rows.append((f"{size:.0f} MB", k, w, rss, w / ref, rss / size))
    if a.big:
        path = make_trace(a.work, a.big)
        size = os.path.getsize(path) / 1e6
        out = os.path.join(a.work, "out_big")
        # Into the page cache first, as the smaller files are by the runs before the median.
        subprocess.run(["sh", "-c", f"cat {path} > /dev/null"], check=True)
        w, rss = median_of(1, [st, "analyze", "--out", out, "-q", "-j", "2", path])
        rows.append((f"{size:.0f} MB", "steptrace analyze (default) -j2", w, rss, float("nan"), rss / size))
    if a.merge_ranks:
        ranks_dir = os.path.join(a.work, f"ranks_{a.merge_ranks}")
        if not os.path.exists(ranks_dir):
            subprocess.run(["cargo", "build", "--release", "-q", "--example", "rank_results"], cwd=ROOT, check=True)
            subprocess.run([os.path.join(ROOT, "target/release/examples/rank_results"), ranks_dir, str(a.merge_ranks)], cwd=ROOT, check=True)
        size = sum(os.path.getsize(os.path.join(ranks_dir, f)) for f in os.listdir(ranks_dir)) / 1e6
        out = os.path.join(a.work, "out_merge")
        w, rss = median_of(a.runs, [st, "merge", ranks_dir, "--out", out])
        rows.append((f"{size:.0f} MB", f"steptrace merge, {a.merge_ranks} ranks", w, rss, float("nan"), rss / size))
    for mb in snap_sizes:
        kind = "reuse" if a.snapshot_reuse else "shifted"
        snap = os.path.join(a.work, f"snapshot_{mb}mb_{kind}.pickle")
        if not os.path.exists(snap):
            src = os.path.join(ROOT, "sample_traces/resnet18/snapshot.pickle.gz")
            gen = [sys.executable, os.path.join(ROOT, "benches/gen_snapshot.py"), src, snap, "--mb", str(mb)]
            subprocess.run(gen + (["--reuse-addresses"] if a.snapshot_reuse else []), check=True)
        size = os.path.getsize(snap) / 1e6
        subprocess.run(["sh", "-c", f"cat {snap} > /dev/null"], check=True)
        stages = os.path.join(ROOT, "target/release/examples/stages")
        loads = []
        for _ in range(0 if a.no_ingest_row else a.runs):
            p = subprocess.run(["/usr/bin/time", "-f", "%M", stages, snap], capture_output=True, text=True, check=True)
            load = float(re.search(r"([0-9.]+)s;", p.stdout).group(1))
            loads.append((load, int(p.stderr.strip().splitlines()[-1]) / 1024))
        if loads:
            w = statistics.median(x[0] for x in loads)
            rss = max(x[1] for x in loads)
            rows.append((f"{size:.0f} MB", f"snapshot load + replay (in-process, {kind})", w, rss, float("nan"), rss / size))
        out = os.path.join(a.work, "out_snapshot")
        w, rss = median_of(a.runs, [st, "analyze", "--out", out, "-q", snap])
        rows.append((f"{size:.0f} MB", f"steptrace analyze SNAPSHOT ({kind})", w, rss, float("nan"), rss / size))
        if a.snapshot_baselines:
            # pickle.load holds about 5x the file (5.2 GB for 1 GB): not run where that would
            # not fit in the memory available.
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1e6
            if 6 * size < avail:
                w, rss = median_of(1, [sys.executable, "-c", f"import pickle; pickle.load(open({snap!r}, 'rb'))"])
                rows.append((f"{size:.0f} MB", "python pickle.load", w, rss, float("nan"), rss / size))
            else:
                checks.append(f"pickle.load of {snap} not run: about 6x its {size:.0f} MB would not fit in {avail:.0f} MB available")
            # trace_plot held 11-13x the file (3.2 GB for 250 MB, 11.3 GB for 1 GB on the GPU
            # machine): not run where that would not fit, as pickle.load above.
            if a.memory_viz and 13 * size < avail:
                html = os.path.join(a.work, "trace_plot.html")
                w, rss = median_of(1, [sys.executable, a.memory_viz, "trace_plot", snap, "-o", html])
                rows.append((f"{size:.0f} MB", "torch _memory_viz trace_plot", w, rss, float("nan"), rss / size))
                # The page it wrote (1.5 GB for 1 GB): its size, then gone.
                checks.append(f"trace_plot of {snap} wrote {os.path.getsize(html) / 1e6:.0f} MB of HTML")
                os.remove(html)
            elif a.memory_viz:
                checks.append(f"trace_plot of {snap} not run: about 13x its {size:.0f} MB would not fit in {avail:.0f} MB available")
    print(f"{'input':>8}  {'what':<44} {'wall s':>8} {'peak RSS MB':>12} {'x default -j2':>16} {'RSS/size':>9}")
    for t, k, w, rss, ratio, rr in rows:
        print(f"{t:>8}  {k:<44} {w:>8.3f} {rss:>12.0f} {ratio:>16.2f} {rr:>9.2f}")
    for c in checks:
        print(c)


if __name__ == "__main__":
    main()

"""Benchmark: `steptrace.analyze` from Python against the `steptrace` command, on the same trace
(issue 78: within 10%).

    python3 benches/python_bench.py --env VENV [--mb 250] [--runs 7] [--work /tmp/steptrace-bench]

VENV is a virtual environment with the wheel installed (`bash python/test_wheel.sh release`
leaves one in $CARGO_TARGET_DIR/python/env); its `steptrace` command is the wheel's, built from
the same tree. The trace is benches/gen_trace.py's (sample_traces/resnet18 repeated to MB). Each
run is a fresh process, timed by its wall clock, the three alternating:

- `cli`: `steptrace analyze TRACE --out DIR -q`, every output, as users type it;
- `python_analyze`: `python -c "steptrace.analyze(TRACE)"`: the analysis alone, no file;
- `python_write`: `python -c "steptrace.analyze(TRACE).write(DIR)"`: the command's outputs, the
  interpreter's start and the import included;
- `python_frames`: `steptrace.analyze(TRACE)` and every table as a DataFrame, no files: what a
  notebook does (polars' import included).

Prints one JSON object per row: the median and each run, and the ratio to `cli`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_trace(work, mb):
    path = os.path.join(work, f"trace_{mb}mb_py.json")
    if not os.path.exists(path):
        # 37 copies make bench.py's 250 MB trace (255 MB: the sample's text is 7.06 MB, one
        # metadata block kept).
        copies = max(1, round(mb / 250 * 37))
        subprocess.run(
            [sys.executable, os.path.join(ROOT, "benches/gen_trace.py"),
             os.path.join(ROOT, "sample_traces/resnet18/trace.json.gz"), path, "--copies", str(copies)],
            check=True,
        )
    return path


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--mb", type=int, default=250)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--work", default="/tmp/steptrace-bench")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    trace = make_trace(a.work, a.mb)
    py = os.path.join(a.env, "bin", "python")
    cli = os.path.join(a.env, "bin", "steptrace")
    out = tempfile.mkdtemp(prefix="pybench-", dir=a.work)
    rows = {
        "cli": [cli, "analyze", trace, "--out", os.path.join(out, "cli"), "-q"],
        "python_analyze": [py, "-c", f"import steptrace; steptrace.analyze({trace!r})"],
        "python_write": [py, "-c", f"import steptrace; steptrace.analyze({trace!r}).write({os.path.join(out, 'py')!r})"],
        "python_frames": [py, "-c", f"import steptrace; a = steptrace.analyze({trace!r}); [a.table(n) for n in steptrace.TABLES]"],
    }
    times = {k: [] for k in rows}
    for _ in range(a.runs):
        for k, cmd in rows.items():
            times[k].append(timed(cmd))
    base = statistics.median(times["cli"])
    print(json.dumps({"trace_mb": round(os.path.getsize(trace) / 1e6, 1), "cpus": os.cpu_count(), "runs": a.runs}))
    for k, v in times.items():
        m = statistics.median(v)
        print(json.dumps({"row": k, "median_s": round(m, 3), "vs_cli": round(m / base, 3), "runs_s": [round(x, 3) for x in v]}))


if __name__ == "__main__":
    main()

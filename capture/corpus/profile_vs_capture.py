"""Sets `steptrace analyze`'s figures for a run recorded in-process by `@steptrace.profile`
beside those for the same program under `steptrace capture` (issue 78), with each program's
own figures as the truth both answer to: its printed step times (median of the steps after
the window) and `torch.cuda.max_memory_allocated()`.

    python3 profile_vs_capture.py DIR            # DIR as profile_proof.sh leaves it

DIR holds `<name>.steptrace/` (analyze's output) and `<name>.log` (the program's output) for
the pairs (inproc, launched) and (inproc_ddp, launched_ddp); a multi-rank analysis has one
folder per rank. Prints one JSON object per figure and rank.
"""

import json
import os
import statistics
import sys

FIGURES = [
    "iterations",
    "nodes_per_iteration",
    "flops_per_iteration",
    "matmul_flops_per_iteration",
    "bytes_per_iteration",
    "peak_allocated_bytes",
    "gpu_time_s",
    "step_time_s",
    "step_time_source",
]


def summary(d, rank):
    sub = os.path.join(d, "rank%d" % rank)
    path = os.path.join(sub if os.path.isdir(sub) else d, "summary.json")
    with open(path) as f:
        return json.load(f)


def program_figures(log):
    """The program's own step times (ms) and max_memory_allocated lines, by line order."""
    steps, peaks = [], []
    try:
        with open(log) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "step" and parts[1].isdigit():
                    steps.append(float(parts[2]))
                elif len(parts) == 2 and parts[0] == "max_memory_allocated":
                    peaks.append(int(parts[1]))
    except OSError:
        pass
    return steps, peaks


def rel(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
        return round((a - b) / b * 100, 3)
    return None if a == b else "differs"


def main(d):
    for a, b, ranks in (("inproc", "launched", [0]), ("inproc_ddp", "launched_ddp", [0, 1])):
        da, db = os.path.join(d, a + ".steptrace"), os.path.join(d, b + ".steptrace")
        if not (os.path.isdir(da) and os.path.isdir(db)):
            continue
        for r in ranks:
            sa, sb = summary(da, r), summary(db, r)
            for k in FIGURES:
                va, vb = sa.get(k), sb.get(k)
                print(json.dumps({"pair": a, "rank": r, "figure": k, a: va, b: vb, "diff_pct": rel(va, vb)}))
            for k in sorted(set(sa.get("peak_breakdown_bytes") or {}) | set(sb.get("peak_breakdown_bytes") or {})):
                va = (sa.get("peak_breakdown_bytes") or {}).get(k)
                vb = (sb.get("peak_breakdown_bytes") or {}).get(k)
                print(json.dumps({"pair": a, "rank": r, "figure": "peak_breakdown_bytes." + k, a: va, b: vb,
                                  "diff_pct": rel(va, vb)}))
            print(json.dumps({"pair": a, "rank": r, "figure": "warnings", a: sa.get("warnings"), b: sb.get("warnings")}))
        for name in (a, b):
            steps, peaks = program_figures(os.path.join(d, name + ".log"))
            # The last 20 steps ran after the window with nothing recorded (60 steps a run).
            tail = steps[-20:]
            print(json.dumps({"run": name, "program_step_ms_median_last20": statistics.median(tail) if tail else None,
                              "program_max_memory_allocated": peaks}))


if __name__ == "__main__":
    main(sys.argv[1])

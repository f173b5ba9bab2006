"""The program's own step time from its own progress lines, apart from steptrace: runs COMMAND
with its standard output unbuffered (coreutils' libstdbuf, as `stdbuf -o0` does; Python
programs get PYTHONUNBUFFERED), passes that output through unchanged, and stamps each progress
line with the host clock as it arrives. A program that prints "Train Epoch: 2 [640/60000 ...]"
(pytorch/examples mnist, Python and C++) or "[2/30][10/938] ..." (dcgan, Python and C++) every
few steps says how many steps it has done; the time between two such lines over the steps
between them is the program's own step time, with no hook in the program at all.

    python3 progress_timer.py OUT.json [--units-per-step N] -- COMMAND [ARGS...]

OUT.json: every progress line's epoch-ns stamp, epoch, count and the step time it prints where
it prints one, and `step_s`: the mean of the per-step times between consecutive lines of the
same epoch (the count is in samples for mnist: --units-per-step is then its batch size). Works unchanged under `steptrace capture`
(the launcher chains LD_PRELOAD), so the same run's own progress can be set beside what capture
reports for the same steps.
"""

import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

PATTERNS = [
    # pytorch/examples mnist (Python and C++): "Train Epoch: 1 [640/60000 (1%)]", samples.
    re.compile(rb"Train Epoch: (\d+) \[\s*(\d+)/\s*\d+"),
    # dcgan (Python and C++): "[1/30][10/938]", batches.
    re.compile(rb"\[\s*(\d+)/\s*\d+\]\s*\[\s*(\d+)/\s*\d+\]"),
    # word_language_model: "| epoch   1 |   200/ 2983 batches | ... | ms/batch  7.21 |", with
    # the program's own figure (a mean over its log interval).
    re.compile(rb"\| epoch\s+(\d+) \|\s*(\d+)/\s*\d+ batches .*ms/batch\s+([0-9.]+)"),
    # nanoGPT train.py: "iter 12: loss 4.1, time 28.32ms", its own time of that iteration.
    re.compile(rb"()iter (\d+): loss [0-9.]+, time ([0-9.]+)ms"),
    # time_sequence_prediction: "STEP:  3" at the start of each LBFGS step, steps.
    re.compile(rb"^()STEP:\s+(\d+)\s*$"),
]
# pytorch/examples' DDP tutorial (multigpu_torchrun.py), rank 0's line at the start of each
# epoch: "[GPU0] Epoch 3 | Batchsize: 32 | Steps: 32". Recorded as one run of steps: epoch E
# begins after E x Steps steps.
EPOCH_START = re.compile(rb"\[GPU0\] Epoch (\d+) \| Batchsize: \d+ \| Steps: (\d+)")


def stdbuf_lib():
    for pat in ("/usr/lib/*/coreutils/libstdbuf.so", "/usr/libexec/coreutils/libstdbuf.so",
                "/usr/lib/coreutils/libstdbuf.so"):
        hits = glob.glob(pat)
        if hits:
            return hits[0]
    return None


def per_step(records, units_per_step, since_ns=None):
    """Per-step times (s) between consecutive progress lines of the same epoch."""
    out = []
    for a, b in zip(records, records[1:]):
        (t0, e0, n0), (t1, e1, n1) = a[:3], b[:3]
        if e0 != e1 or n1 <= n0 or (since_ns is not None and t0 < since_ns):
            continue
        out.append((t1 - t0) * 1e-9 * units_per_step / (n1 - n0))
    return out


def steady_mean(values):
    """The mean with values over 5x the median left out (epoch ends, evaluation), as capture
    computes the steps after its window."""
    if not values:
        return None
    m = statistics.median(values)
    kept = [v for v in values if v <= 5 * m]
    return sum(kept) / len(kept)


def printed_times(records, since_ns=None):
    """The program's own printed step times (s) of the intervals that lie wholly after
    `since_ns`. A printed time covers the steps since the line before it (word_language_model's
    ms/batch covers 200 batches; its first line after the window also covers the window), so a
    line counts only when the printed line before it came after `since_ns` as well."""
    out, prev = [], None
    for r in records:
        if r[3] is None:
            continue
        if since_ns is None or (prev is not None and prev >= since_ns):
            out.append(r[3] * 1e-3)
        prev = r[0]
    return out


def main():
    args = sys.argv[1:]
    out_path = args.pop(0)
    units = 1
    if args and args[0] == "--units-per-step":
        units = int(args[1])
        args = args[2:]
    if args and args[0] == "--":
        args = args[1:]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    lib = stdbuf_lib()
    if lib:
        env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD", ""), lib) if x)
        env["_STDBUF_O"] = "0"
    p = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    records, pending = [], b""
    fd = p.stdout.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        t = time.time_ns()
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        parts = re.split(rb"[\r\n]", pending + chunk)
        pending = parts.pop()
        for line in parts:
            m = EPOCH_START.search(line)
            if m:
                records.append((t, 0, int(m.group(1)) * int(m.group(2)), None))
                continue
            for pat in PATTERNS:
                m = pat.search(line)
                if m:
                    g = m.groups()
                    printed = float(g[2]) if len(g) > 2 else None
                    records.append((t, int(g[0] or 0), int(g[1]), printed))
                    break
    rc = p.wait()
    steps = per_step(records, units)
    own = printed_times(records)
    with open(out_path, "w") as f:
        json.dump({"command": args, "stdbuf": lib, "units_per_step": units, "records": records,
                   "step_s": steady_mean(steps), "intervals": len(steps),
                   "printed_step_s": steady_mean(own)}, f)
    sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()

"""Each CUDA stream's idle time by HolisticTraceAnalysis's three causes, recounted straight from
a Kineto trace at its full precision: the reference where HTA's own figures differ by its
rounding (it floors every timestamp and duration to whole µs, which on CUDA graphs' µs-apart
kernels moves seconds of gaps) or where HTA does not run.

    python3 benches/idle_recount.py trace.json[.gz] [--floor-us] > idle_recount.json

A gap is the next activity's start minus the previous one's end on the same stream (activities:
kernels, memcpys, memsets, in start order); host wait where the launching runtime call (same
correlation id, the first call with it) started after the previous end, kernel wait where not
and the gap is under 30 µs, other for the rest. Gaps of 0 or less are left out (HTA's floored
times make some negative, which it sums; with --floor-us they are kept, as HTA does)."""

import collections
import gzip
import json
import math
import sys


def main():
    path = sys.argv[1]
    floor = "--floor-us" in sys.argv[2:]
    f = math.floor if floor else (lambda x: x)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    launch = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = e.get("args", {}).get("correlation")
            if c is not None and c not in launch:
                launch[c] = f(e["ts"])
    streams = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = e.get("args", {})
            streams[a.get("stream")].append((f(e["ts"]), f(e["dur"]), launch.get(a.get("correlation"))))
    out = {"floor_us": floor, "streams": {}}
    for s, acts in sorted(streams.items()):
        acts.sort(key=lambda x: x[0])
        sums = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
        for (pts, pdur, _), (ts, _, ran) in zip(acts, acts[1:]):
            prev_end = pts + pdur
            gap = ts - prev_end
            if not floor and gap <= 0:
                continue
            if ran is not None and ran > prev_end:
                sums["host_wait"] += gap
            elif gap < 30:
                sums["kernel_wait"] += gap
            else:
                sums["other"] += gap
        out["streams"][str(s)] = {k: round(v, 3) for k, v in sums.items()}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

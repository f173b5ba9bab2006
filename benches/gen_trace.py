"""Make a large, structurally real Kineto trace by repeating a sample's events.

    python3 benches/gen_trace.py sample_traces/resnet18/trace.json.gz OUT.json --copies 20

Each copy is shifted in time by the span of the original plus a gap, and every id that links
events (correlation, External id, flow id, Record function id, ProfilerStep number) is offset so
links stay unique. The result parses and analyses like a longer capture of the same program.
"""
import argparse
import gzip
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=10)
    a = ap.parse_args()
    op = gzip.open if a.src.endswith(".gz") else open
    with op(a.src, "rt") as f:
        d = json.load(f)
    ev = d["traceEvents"]
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000.0
    big = max([e.get("id", 0) for e in ev if isinstance(e.get("id"), int)] + [0]) + 1
    corr = max([e.get("args", {}).get("correlation", 0) for e in ev] + [0]) + 1
    ext = max([e.get("args", {}).get("External id", 0) for e in ev] + [0]) + 1
    rf = max([e.get("args", {}).get("Record function id", 0) for e in ev] + [0]) + 1
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    nsteps = len(steps) or 1
    # Streamed: a multi-GB trace never exists in memory as Python objects.
    rest = {k: v for k, v in d.items() if k != "traceEvents"}
    head = json.dumps(rest)[:-1] + (", " if rest else "") + '"traceEvents": ['
    f = open(a.out, "w")
    f.write(head)
    first = True

    def out_append(e):
        nonlocal first
        f.write(("" if first else ", ") + json.dumps(e))
        first = False

    for k in range(a.copies):
        for e in ev:
            if k == 0:
                out_append(e)
                continue
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                e["ts"] = e["ts"] + k * span
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + k * big
            if "args" in e:
                args = dict(e["args"])
                for key, off in (("correlation", corr), ("External id", ext), ("Record function id", rf)):
                    if isinstance(args.get(key), int):
                        args[key] = args[key] + k * off
                e["args"] = args
            name = e.get("name", "")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                e["name"] = "ProfilerStep#%d" % (int(name.split("#")[1]) + k * nsteps)
            out_append(e)
    f.write("]}")
    f.close()


if __name__ == "__main__":
    main()

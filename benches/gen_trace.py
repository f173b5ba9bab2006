"""Make a large, structurally real Kineto trace by repeating a sample's events.

    python3 benches/gen_trace.py sample_traces/resnet18/trace.json.gz OUT.json --copies 20

Each copy is shifted in time by the span of the original plus a gap, and every id that links
events (correlation, External id, flow id, Record function id, ProfilerStep number) is offset so
links stay unique. The result parses and analyses like a longer capture of the same program.

The text keeps the layout torch.profiler and libtorch write (Kineto's ChromeTraceLogger: one
member group per line, two-space indents, `"key": value` with a space), because that is what
users have and what a parser's speed should be measured on: the copies are made by editing
the sample's own event texts, not by `json.dump`. Metadata (`"ph": "M"`) events are kept once.
"""
import argparse
import gzip
import json
import re

SEP = "\n  },\n  {"
LINKS = re.compile(
    r'"(ts|id|correlation|External id|Record function id)": (-?\d+(?:\.\d+)?)|"ProfilerStep#(\d+)"'
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=10)
    a = ap.parse_args()
    op = gzip.open if a.src.endswith(".gz") else open
    with op(a.src, "rt") as f:
        text = f.read()
    d = json.loads(text)
    ev = d["traceEvents"]
    # The events' own texts: Kineto separates them with exactly SEP.
    start = text.index('"traceEvents": [') + len('"traceEvents": [')
    close = text.rindex("\n  }\n  ]")
    body = text[start:close + len("\n  }")]
    assert body.startswith("\n  {"), "not Kineto's layout"
    texts = body[len("\n  {"):-len("\n  }")].split(SEP)
    if len(texts) != len(ev):
        raise SystemExit(f"{a.src}: {len(texts)} event texts for {len(ev)} events: not Kineto's layout")
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000.0
    off = {
        "id": max([e.get("id", 0) for e in ev if isinstance(e.get("id"), int)] + [0]) + 1,
        "correlation": max([e.get("args", {}).get("correlation", 0) for e in ev] + [0]) + 1,
        "External id": max([e.get("args", {}).get("External id", 0) for e in ev] + [0]) + 1,
        "Record function id": max([e.get("args", {}).get("Record function id", 0) for e in ev] + [0]) + 1,
    }
    nsteps = sum(1 for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")) or 1
    meta = [e.get("ph") == "M" for e in ev]
    with open(a.out, "w") as f:
        f.write(text[:start])
        first = True
        for k in range(a.copies):

            def shift(m):
                if m.group(3) is not None:
                    return '"ProfilerStep#%d"' % (int(m.group(3)) + k * nsteps)
                key, val = m.group(1), m.group(2)
                if key == "ts":
                    return '"ts": %.3f' % (float(val) + k * span)
                if "." in val:
                    return m.group(0)
                return '"%s": %d' % (key, int(val) + k * off[key])

            for t, is_meta in zip(texts, meta):
                if k > 0 and is_meta:
                    continue
                f.write(("\n  {" if first else SEP) + (t if k == 0 else LINKS.sub(shift, t)))
                first = False
        f.write(text[close:])


if __name__ == "__main__":
    main()

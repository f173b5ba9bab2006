# References for steptrace's snapshot-alone analysis, made on the GPU machine with the torch
# users have (torch.cuda._memory_viz), for every memory snapshot given:
#   - `segsum`: torch's own `stats` printout, and its totals recomputed with torch's
#     `_block_extra` (reserved, allocated as requested, free inside blocks, free between them);
#   - `end`: torch's `memory` flame-graph lines (`_memory_viz.memory`, its
#     `format_flamegraph` replaced by the identity), bytes summed per line: the state at the
#     snapshot's end, stacks formatted and filtered by torch;
#   - `peak`: per device, the most memory allocated at once during the recorded history,
#     replayed as memory_viz's Active Memory Timeline does (state at the end from `segments`,
#     walked back through `device_traces`), and the flame-graph lines of what is alive at that
#     moment, formatted by torch's `_frames_fmt` the way `memory` formats them.
# The replay is a second implementation, written apart from steptrace's Rust one; the stack
# formatting and the totals are torch's.
#
#   python3 capture/corpus/memviz_reference.py OUT.json.gz SNAPSHOT.pickle[.gz]...
import gzip, json, pickle, sys
from collections import Counter

from torch.cuda import _memory_viz as mv


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = pickle.load(f)
    if isinstance(data, list):
        data = {"segments": data, "device_traces": []}
    return data


def line(stream, frames):
    frag = ";".join(mv._frames_fmt(frames, reverse=True)) if frames else "<non-python>"
    return f"stream_{stream};active_allocated;{frag}"


def peak_of(data, device):
    trace = data["device_traces"][device] if device < len(data["device_traces"]) else []
    # Alive at the end: active blocks of this device's segments, by address.
    alive = {}
    for seg in data["segments"]:
        if seg.get("device", 0) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                alive[addr] = (b["size"], seg["stream"], b.get("frames", []))
            addr += b["size"]
    # Walk back to the state before the first event.
    start = dict(alive)
    for e in reversed(trace):
        a = e["action"]
        if a == "alloc":
            start.pop(e["addr"], None)
        elif a == "free_completed":
            start[e["addr"]] = (e["size"], e.get("stream", 0), e.get("frames", []))
    # Forward, noting the peak (the first moment it is reached).
    cur = dict(start)
    total = sum(s for s, _, _ in cur.values())
    best, best_at, best_set = total, -1, dict(cur)
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            cur[e["addr"]] = (e["size"], e.get("stream", 0), e.get("frames", []))
            total += e["size"]
        elif a == "free_completed":
            if e["addr"] in cur:
                total -= cur.pop(e["addr"])[0]
        if total > best:
            best, best_at = total, i
            best_set = None
    if best_set is None:
        cur = dict(start)
        for e in trace[: best_at + 1]:
            if e["action"] == "alloc":
                cur[e["addr"]] = (e["size"], e.get("stream", 0), e.get("frames", []))
            elif e["action"] == "free_completed":
                cur.pop(e["addr"], None)
        best_set = cur
    stacks = Counter()
    for size, stream, frames in best_set.values():
        stacks[line(stream, frames)] += size
    return {
        "device": device,
        "entries": len(trace),
        "peak_allocated_bytes": best,
        "peak_entry": best_at,
        "peak_time_us": trace[best_at].get("time_us") if best_at >= 0 else None,
        "alive_at_peak": len(best_set),
        **top(stacks),
    }


def top(stacks, n=200):
    """The n heaviest flame-graph lines (ties by line), with the count and sum of them all."""
    kept = sorted(stacks.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return {"stacks": dict(kept), "stack_lines": len(stacks), "stack_bytes": sum(stacks.values())}


def segsum_totals(data):
    reserved = allocated = internal = external = 0
    for seg in data["segments"]:
        reserved += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                _, req = mv._block_extra(b)
                allocated += req
                internal += b["size"] - req
            else:
                external += b["size"]
    return {"segments": len(data["segments"]), "total_reserved": reserved,
            "total_allocated": allocated, "free_internal": internal, "free_external": external}


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    ref = {}
    for p in paths:
        data = load(p)
        lines = Counter()
        for l in mv.memory(data, format_flamegraph=lambda s: s).splitlines():
            stack, size = l.rsplit(" ", 1)
            lines[stack] += int(size)
        devices = sorted({s.get("device", 0) for s in data["segments"]}
                         | {i for i, t in enumerate(data.get("device_traces", [])) if t})
        ref[p] = {
            "segsum": segsum_totals(data),
            "segsum_text": mv.segsum(data),
            "end": top(lines),
            "peak": [peak_of(data, d) for d in devices],
        }
        print(p, [(d["device"], d["peak_allocated_bytes"]) for d in ref[p]["peak"]])
    with gzip.open(out, "wt") as f:
        json.dump(ref, f, indent=1, sort_keys=True)


main()

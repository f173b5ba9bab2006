"""A memory snapshot in the form torch's `_dump_snapshot` writes (`pickle.dump`, protocol 4).

    python3 benches/gen_snapshot_pickle.py sample_traces/resnet18/snapshot.pickle.gz OUT.pickle COPIES
    python3 benches/gen_snapshot_pickle.py ... COPIES --fresh-lists

With --fresh-lists each copy makes its frame lists anew (one list for each list of the sample,
shared where the sample shares it), as a long run's history does: without it every copy after
the first names the first copy's lists by memo GET, and a new frame list (most of a real
snapshot's bytes: nanoGPT's 1.6 GB file of 2026-11-29 has 37 frame GETs per entry) is met in
the first copy alone.

The sample's history is repeated COPIES times, each entry a new dict (so the pickler memoizes
every entry, as it does torch's) shifted in time, with a new `compile_context` string (torch
makes each entry's afresh; the empty `user_metadata` is one object in CPython, as in torch);
frame lists are shared as loaded. Unlike `gen_snapshot.py` (a protocol-2 writer of its own that
reuses memo indices in every copy), the memo here grows with the file, as in a real snapshot.
Everything is built in memory first: 1,000 copies (459 MB) took 21 s and 3.0 GB peak RSS on the
2-core machine (2026-11-28).
"""
import gzip
import pickle
import sys


def main():
    src, out, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fresh = "--fresh-lists" in sys.argv[4:]
    op = gzip.open if src.endswith(".gz") else open
    with op(src, "rb") as f:
        snap = pickle.load(f)
    history = [e for dev in snap["device_traces"] for e in dev]
    entries = []
    for c in range(copies):
        lists = {}
        for e in history:
            d = dict(e)
            if fresh and isinstance(d.get("frames"), list):
                f = d["frames"]
                d["frames"] = lists.setdefault(id(f), list(f))
            if "time_us" in d:
                d["time_us"] = e["time_us"] + c * 10**7
            if "compile_context" in d:
                # A new str object each time: "".join makes one; a literal would be shared.
                d["compile_context"] = "".join(["N", "/", "A"])
            entries.append(d)
    snap["device_traces"] = [entries]
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    print(f"{out}: {copies} copies of {len(history)} entries")


if __name__ == "__main__":
    main()

"""Make a large, structurally real CUDA memory snapshot pickle by repeating a sample's history.

    python3 benches/gen_snapshot.py sample_traces/resnet18/snapshot.pickle.gz OUT.pickle --mb 1000
    python3 benches/gen_snapshot.py ... --reuse-addresses   # each copy at the same addresses

The sample's `segments`, `allocator_settings` and `external_annotations` are kept; its
`device_traces` history is written again and again, each copy shifted in time by the span of
the original plus a gap and in address by 4 GiB per copy, so every allocation stays unique.
Objects the sample shares (stack frames, strings) are shared within each copy through the
pickle memo, as torch's own pickles share them.

The pickle is written by a small protocol-2 writer here (the standard pickler would need the
whole multi-GB object graph in memory): one copy is serialised once as a template with fixed-
width integers for `time_us` and `addr`, and each further copy is that template with those
integers patched.
"""
import argparse
import gzip
import pickle
import struct


class Writer:
    """Protocol-2 opcodes for plain data, with a memo by object identity."""

    def __init__(self):
        self.out = bytearray()
        self.memo = {}
        self.patch = []  # (offset, field) of 8-byte integers to rewrite per copy

    def put(self, obj):
        i = len(self.memo)
        self.memo[id(obj)] = (i, obj)  # keep obj alive so its id stays unique
        self.out += b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)

    def get(self, obj):
        i = self.memo[id(obj)][0]
        self.out += b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)

    def int8(self, v, field):
        self.out += b"\x8a\x08"
        self.patch.append((len(self.out), field))
        self.out += struct.pack("<q", v)

    def emit(self, o, field=None):
        if field in ("time_us", "addr") and isinstance(o, int):
            return self.int8(o, field)
        if o is None:
            self.out += b"N"
        elif o is True:
            self.out += b"\x88"
        elif o is False:
            self.out += b"\x89"
        elif isinstance(o, int):
            if 0 <= o < 256:
                self.out += b"K" + bytes([o])
            elif -(2**31) <= o < 2**31:
                self.out += b"J" + struct.pack("<i", o)
            else:
                n = (o.bit_length() + 8) // 8
                self.out += b"\x8a" + bytes([n]) + o.to_bytes(n, "little", signed=True)
        elif isinstance(o, float):
            self.out += b"G" + struct.pack(">d", o)
        elif isinstance(o, (str, list, dict)) and id(o) in self.memo:
            self.get(o)
        elif isinstance(o, str):
            b = o.encode("utf-8", "surrogatepass")
            self.out += b"X" + struct.pack("<I", len(b)) + b
            self.put(o)
        elif isinstance(o, list):
            self.out += b"]"
            self.put(o)
            if o:
                self.out += b"("
                for x in o:
                    self.emit(x)
                self.out += b"e"
        elif isinstance(o, tuple):
            self.out += b"("
            for x in o:
                self.emit(x)
            self.out += b"t"
        elif isinstance(o, dict):
            self.out += b"}"
            self.put(o)
            if o:
                self.out += b"("
                for k, v in o.items():
                    self.emit(k)
                    self.emit(v, k if isinstance(k, str) else None)
                self.out += b"u"
        else:
            raise TypeError(f"not plain data: {type(o)}")


def section(obj):
    w = Writer()
    w.emit(obj)
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=1000)
    # Each copy at the sample's own addresses: a history that reuses its blocks as a training
    # loop does, its memory bounded (with shifted addresses, what each copy leaves alive adds
    # up: a view of it is one tall ramp).
    ap.add_argument("--reuse-addresses", action="store_true")
    a = ap.parse_args()
    op = gzip.open if a.src.endswith(".gz") else open
    with op(a.src, "rb") as f:
        snap = pickle.load(f)
    history = [e for dev in snap["device_traces"] for e in dev]
    times = [e["time_us"] for e in history if "time_us" in e]
    span = (max(times) - min(times) + 1000) if times else 1000
    # One copy of the history as the body of an APPENDS.
    w = Writer()
    for e in history:
        w.emit(e)
    template = bytes(w.out)
    copies = max(1, int(a.mb * 1e6 / max(1, len(template))))
    head = bytearray(b"\x80\x02}(")
    for k in ("segments",):
        head += section(k).out + section(snap[k]).out
    with open(a.out, "wb") as f:
        f.write(head)
        f.write(section("device_traces").out)
        f.write(b"](](")  # device_traces = [ [ ...entries... ] ]
        body = bytearray(template)
        for c in range(copies):
            for off, field in w.patch:
                (v,) = struct.unpack_from("<q", template, off)
                if field == "time_us":
                    v += c * span
                elif not a.reuse_addresses:
                    v += c * (1 << 32)
                struct.pack_into("<q", body, off, v)
            f.write(body)
            f.write(b"e(" if c + 1 < copies else b"e")
        f.write(b"e")  # close the outer list
        for k in ("allocator_settings", "external_annotations"):
            if k in snap:
                f.write(section(k).out + section(snap[k]).out)
        f.write(b"u.")
    print(f"{a.out}: {copies} copies of {len(history)} entries")


if __name__ == "__main__":
    main()

# Makes a captured run directory small enough to commit, without changing what steptrace
# reads from it: every Kineto trace keeps each event steptrace parses, byte for byte, and
# loses the two kinds it skips unread (src/ingest/kineto: `skippable`): Python function
# ranges other than `nn.Module` ones (most of a `with_stack` trace) and `ac2g` flow events.
# GPU activity, CPU ops, annotations and memory events are untouched, so HolisticTraceAnalysis's
# breakdowns and steptrace's analysis are the same on the trimmed trace. With --drop KIND
# (e.g. exec_trace), the files of that kind are removed and the manifest stops listing them.
# The manifest records what was done under `notes`.
#
#   python3 capture/corpus/trim_run.py RUN_DIR [--drop exec_trace] [--drop memory_timeline_torch]
import gzip, json, os, sys


def trim_trace(path):
    with gzip.open(path, "rt") as f:
        text = f.read()
    dec = json.JSONDecoder()
    start = text.index("[", text.index('"traceEvents"')) + 1
    out, kept, dropped, i = [text[:start]], 0, 0, start
    first = True
    while True:
        # Skip the separator (whitespace and one comma) before the next event.
        j = i
        while text[j] in " \t\r\n,":
            j += 1
        if text[j] == "]":
            break
        ev, end = dec.raw_decode(text, j)
        cat, name = ev.get("cat"), str(ev.get("name", ""))
        if cat == "ac2g" or (cat == "python_function" and not name.startswith("nn.Module: ")):
            dropped += 1
        else:
            out.append(("\n  " if first else ",\n  ") + text[j:end])
            first = False
            kept += 1
        i = end
    out.append("\n" + text[j:])
    json.loads("".join(out))  # still one JSON document
    with gzip.open(path, "wt", compresslevel=9) as f:
        f.write("".join(out))
    return kept, dropped


def main():
    run, drop = sys.argv[1], []
    args = sys.argv[2:]
    while args:
        if args[0] == "--drop":
            drop.append(args[1])
            args = args[2:]
        else:
            sys.exit(f"unknown argument {args[0]}")
    mpath = os.path.join(run, "manifest.json")
    m = json.load(open(mpath))
    tables = [m] + list(m.get("ranks") or [])
    traces = sorted({t["files"]["trace"] for t in tables if t.get("files", {}).get("trace")})
    note = []
    for t in traces:
        kept, dropped = trim_trace(os.path.join(run, t))
        note.append(f"{t}: {dropped} Python-function and flow events steptrace skips removed, {kept} kept")
    for kind in drop:
        for t in tables:
            f = t.get("files", {}).pop(kind, None)
            if f and os.path.exists(os.path.join(run, f)):
                os.remove(os.path.join(run, f))
        note.append(f"{kind} files removed to keep the sample small")
    m.setdefault("notes", []).append("trimmed by capture/corpus/trim_run.py: " + "; ".join(note))
    json.dump(m, open(mpath, "w"), indent=2)
    print("\n".join(note))


main()

"""Loads an annotated trace in Perfetto's trace processor and checks it against its input.

    python3 benches/perfetto_check.py TRACE_PROCESSOR INPUT ANNOTATED [--json OUT.json]

TRACE_PROCESSOR is a `trace_processor_shell` binary (benches/build_trace_processor.sh builds
one from a Perfetto checkout without a network). Both files are loaded by it and queried; the
checks (issue 19), each against counts read from the files with Python's `json`, not from
steptrace:
- every slice category of the input has as many slices in the annotated trace (the original
  events are copied unchanged, so Perfetto must import them the same way);
- the added node track has one slice per `steptrace_node` event, and the added activation
  lifetimes one async slice per `b`/`e` pair;
- the memory-by-category counter has one value per `C` event on each category's track;
- the annotated trace raises no import error or data loss in Perfetto's `stats` that the input
  does not raise as often.
Prints one line per check and exits 1 if any fails. Used by benches/bench.py --perfetto.

With --same, the second file is the same trace in another form (capture's multi-member
gzip of it, say), not an annotated one: only the first and the last check apply.
"""
import argparse
import csv
import functools
import gzip
import io
import json
import subprocess
import sys

# Stats of the import's errors and losses, the slice categories, the added counter's tracks and
# the added tracks' process.
QUERIES = {
    "stats": "select name, idx, value from stats where value > 0 and severity in ('error', 'data_loss') order by name, idx",
    "slices": "select ifnull(category, '') as cat, count(*) as n from slice group by 1 order by 1",
    "counters": "select t.name as track, count(*) as n from counter c join track t on c.track_id = t.id where t.name like 'memory by category%' group by 1 order by 1",
    "process": "select pid, ifnull(name, '') as name from process where pid = 999999",
}


def load(tp, trace):
    """Each query's rows (dicts) on one file, from one run of the tool (it loads the trace once
    and prints every statement's result set as CSV, a blank line between them); raises with the
    tool's message if it fails."""
    sql = ";\n".join(QUERIES.values()) + ";"
    p = subprocess.run([tp, "query", trace, sql], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"trace_processor_shell failed on {trace}: {p.stderr.strip()[-500:]}")
    sets = p.stdout.strip("\n").split("\n\n")
    if len(sets) != len(QUERIES):
        raise RuntimeError(f"trace_processor_shell printed {len(sets)} result sets for {len(QUERIES)} queries on {trace}")
    ints = ("n", "value", "pid")
    return {
        k: [{c: int(v) if c in ints else v for c, v in row.items()} for row in csv.DictReader(io.StringIO(text))]
        for k, text in zip(QUERIES, sets)
    }


@functools.cache
def version(tp):
    """The tool's version line, asked once per binary."""
    return subprocess.run([tp, "--version"], capture_output=True, text=True).stdout.strip()


def json_events(path):
    """A trace's events, read the way a Python user would (gzip by name, then json)."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)["traceEvents"]


class Said:
    """The checks' lines as they are said, and whether every one passed."""

    def __init__(self):
        self.ok = True
        self.lines = []

    def __call__(self, passed, text):
        self.ok &= passed
        self.lines.append(("ok   " if passed else "FAIL ") + text)


def check_same(tp, a_in, other):
    """(all passed, lines, record) for a file holding the same trace as the input in another
    form (capture's gzip members): every slice category with as many slices, and the same
    import errors and losses as the input."""
    a_out = load(tp, other)
    say = Said()
    s_in = {r["cat"]: r["n"] for r in a_in["slices"]}
    s_out = {r["cat"]: r["n"] for r in a_out["slices"]}
    say(s_in == s_out, f"slices by category: {sum(s_out.values())} in {len(s_out)} categories, the input's {sum(s_in.values())} in {len(s_in)}" + ("" if s_in == s_out else f"; differing: {sorted(set(s_in.items()) ^ set(s_out.items()))}"))
    st_in = {(r["name"], r["idx"]): r["value"] for r in a_in["stats"]}
    st_out = {(r["name"], r["idx"]): r["value"] for r in a_out["stats"]}
    say(st_in == st_out, f"import errors and losses: {st_out or 'none'}, the input's {st_in or 'none'}")
    return say.ok, say.lines, {"trace_processor": version(tp), "input": a_in, "other": a_out, "checks": say.lines}


def check(tp, a_in, annotated, evs):
    """(all passed, lines, record): the checks named in the module's doc, given the input's
    query results (`load`, taken once for several annotated traces of one input) and the
    annotated trace's events (`json_events`, which a caller may already hold)."""
    a_out = load(tp, annotated)
    say = Said()

    s_in = {r["cat"]: r["n"] for r in a_in["slices"]}
    s_out = {r["cat"]: r["n"] for r in a_out["slices"]}
    for cat, n in sorted(s_in.items()):
        say(s_out.get(cat) == n, f"slices of category {cat!r}: {s_out.get(cat)} in the annotated trace, {n} in the input")
    nodes = sum(1 for e in evs if e.get("cat") == "steptrace_node" and e.get("ph") == "X")
    say(nodes > 0 and s_out.get("steptrace_node") == nodes, f"node slices: {s_out.get('steptrace_node')}, {nodes} events in the file")
    acts = sum(1 for e in evs if e.get("cat") == "activation" and e.get("ph") == "b")
    say(s_out.get("activation", 0) == acts, f"activation slices: {s_out.get('activation', 0)}, {acts} b/e pairs in the file")
    mem = [e for e in evs if e.get("ph") == "C" and e.get("name") == "memory by category"]
    keys = sorted({k for e in mem for k in e.get("args", {})})
    tracks = {r["track"]: r["n"] for r in a_out["counters"]}
    say(
        len(tracks) == len(keys) and all(n == len(mem) for n in tracks.values()),
        f"memory by category: {len(tracks)} counter tracks of {sorted(set(tracks.values()))} values, {len(keys)} categories x {len(mem)} events in the file",
    )
    say(len(a_out["process"]) == 1, f"the added process: {a_out['process']}")
    st_in = {(r["name"], r["idx"]): r["value"] for r in a_in["stats"]}
    st_out = {(r["name"], r["idx"]): r["value"] for r in a_out["stats"]}
    new = {k: v for k, v in st_out.items() if v > st_in.get(k, 0)}
    say(not new, f"import errors or losses the input does not have (or has fewer of): {new or 'none'} (the input's own: {st_in or 'none'})")
    return say.ok, say.lines, {"trace_processor": version(tp), "input": a_in, "annotated": a_out, "checks": say.lines}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace_processor")
    ap.add_argument("input")
    ap.add_argument("annotated")
    ap.add_argument("--json", help="write the query results of both files here")
    ap.add_argument("--same", action="store_true", help="the second file is the input in another form, not annotated")
    a = ap.parse_args()
    a_in = load(a.trace_processor, a.input)
    if a.same:
        ok, lines, res = check_same(a.trace_processor, a_in, a.annotated)
    else:
        ok, lines, res = check(a.trace_processor, a_in, a.annotated, json_events(a.annotated))
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

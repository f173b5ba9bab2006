#!/usr/bin/env python3
"""The architecture review's counts (issue 77), re-runnable by anyone on the tree as it is:

- functions longer than 120 lines (from `fn` to its closing brace, tests left out);
- mod.rs files over 280 lines;
- pairs of files that import each other (`use` of `super::x`/`crate::a::b` resolved to files);
- struct fields holding a closed set as a string (`&'static str` fields).

    python3 benches/review_counts.py [--list]     # counts; --list names each one

Reads the Rust sources under src/, capture/src/ and formats/src/; a line-based reading (braces
counted outside strings and comments), which is what the review's counts were made with.
"""

import argparse
import os
import re
import sys

ROOTS = ["src", "capture/src", "formats/src"]
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
USE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+(crate|super)::([\w:]+)")
STATIC_STR_FIELD = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?\w+\s*:\s*&'static\s+str\s*,")


def rust_files():
    for root in ROOTS:
        for dirpath, _, names in os.walk(root):
            for n in sorted(names):
                if n.endswith(".rs"):
                    yield os.path.join(dirpath, n)


def code_only(line):
    """The line without string literals and a trailing // comment (enough to count braces)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def long_functions(path, lines, limit):
    out = []
    in_tests = False
    i = 0
    while i < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
            in_tests = True  # a tests module runs to the end of the file here
        m = FN.match(lines[i])
        if m and not in_tests:
            depth, started, j = 0, False, i
            while j < len(lines):
                c = code_only(lines[j])
                if not started and ";" in c and "{" not in c:
                    break  # a declaration without a body (trait method)
                depth += c.count("{") - c.count("}")
                if "{" in c:
                    started = True
                if started and depth <= 0:
                    break
                j += 1
            n = j - i + 1
            if started and n > limit:
                out.append((path, i + 1, m.group(6), n))
            i = j + 1 if started else i + 1
            continue
        i += 1
    return out


def is_parameter(lines, i):
    """Whether line i is a function's parameter rather than a struct's field: going up, a
    `fn` line comes before any line that opens a block."""
    for j in range(i - 1, -1, -1):
        if FN.match(lines[j]):
            return True
        if code_only(lines[j]).rstrip().endswith("{"):
            return False
    return False


def module_file(path):
    """The module path of a file: src/report/plot/mod.rs -> (crate, [report, plot])."""
    for root in ROOTS:
        if path.startswith(root + "/"):
            rel = path[len(root) + 1:-3].split("/")
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            return root, rel
    return None, []


def imports(path, lines, by_module):
    root, me = module_file(path)
    here = me if path.endswith("mod.rs") else me[:-1]
    found = set()
    for line in lines:
        m = USE.match(line)
        if not m:
            continue
        base = [] if m.group(3) == "crate" else list(here)
        parts = [p for p in m.group(4).split("::") if p]
        while parts and parts[0] == "super":
            parts.pop(0)
            base = base[:-1]
        full = base + parts
        # The longest prefix that names a file of the same crate.
        for k in range(len(full), 0, -1):
            target = by_module.get((root, tuple(full[:k])))
            if target and target != path:
                found.add(target)
                break
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--limit", type=int, default=120)
    args = ap.parse_args()
    files = {p: open(p, encoding="utf-8").read().split("\n") for p in rust_files()}
    by_module = {}
    for p in files:
        root, mod = module_file(p)
        by_module[(root, tuple(mod))] = p
    # Test files (tests.rs, *_tests.rs) are tests: their fixtures may run long.
    long_fns = [f for p, lines in files.items() if not re.search(r"(^|_|/)tests\.rs$", p)
                for f in long_functions(p, lines, args.limit)]
    big_mods = [(p, len(l)) for p, l in files.items() if p.endswith("mod.rs") and len(l) > 280]
    mods = [p for p in files if p.endswith("mod.rs")]
    deps = {p: imports(p, l, by_module) for p, l in files.items()}
    mutual = sorted({tuple(sorted((a, b))) for a in deps for b in deps[a] if a in deps.get(b, ())})
    fields = [(p, i + 1, l.strip()) for p, lines in files.items() for i, l in enumerate(lines)
              if STATIC_STR_FIELD.match(l) and not is_parameter(lines, i)]
    print(f"functions over {args.limit} lines: {len(long_fns)}")
    if args.list:
        for p, ln, name, n in sorted(long_fns, key=lambda f: -f[3]):
            print(f"  {n:4d}  {name}  {p}:{ln}")
    print(f"mod.rs files over 280 lines: {len(big_mods)} of {len(mods)}")
    if args.list:
        for p, n in sorted(big_mods, key=lambda f: -f[1]):
            print(f"  {n:4d}  {p}")
    print(f"pairs of files importing each other: {len(mutual)}")
    if args.list:
        for a, b in mutual:
            print(f"  {a} <-> {b}")
    print(f"&'static str fields: {len(fields)}")
    if args.list:
        for p, ln, text in fields:
            print(f"  {p}:{ln}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

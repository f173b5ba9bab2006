"""steptrace from Python: one PyTorch training step rebuilt from profiler output.

    import steptrace
    a = steptrace.analyze("sample_traces/resnet18")      # a run directory or a trace
    a.summary["step_time_s"]                             # summary.json, as a dict
    a.node_stats                                         # a polars DataFrame
    a.node_stats.to_pandas()                             # pandas, through polars
    a.write("out/")                                      # every file `steptrace analyze` writes

    @steptrace.profile(output_dir="runs/a")              # record a training run in-process,
    def train(): ...                                     # steps marked by steptrace.step()

The analysis is the same library as the `steptrace` command's, run with the GIL released. A
bad input raises a `steptrace.Error` subclass carrying the command's one-line message.
"""

import io
import json
import os
import shutil
import tempfile

from . import _native
from ._native import AnalysisError, Error, InputError, OutputError, PlanError
from ._profile import profile, step

__version__ = _native.__version__
__all__ = [
    "analyze",
    "compare",
    "plan",
    "Analysis",
    "SnapshotAnalysis",
    "Ranks",
    "Plan",
    "Comparison",
    "profile",
    "step",
    "Error",
    "InputError",
    "AnalysisError",
    "OutputError",
    "PlanError",
    "TABLES",
    "SNAPSHOT_TABLES",
]

#: The tables an `Analysis` gives as DataFrames (each the CLI's `<name>.parquet`).
TABLES = tuple(_native.Analysis.table_names())
#: The tables a `SnapshotAnalysis` gives as DataFrames.
SNAPSHOT_TABLES = tuple(_native.SnapshotAnalysis.table_names())


def _frame(parquet_bytes):
    import polars as pl

    return pl.read_parquet(io.BytesIO(parquet_bytes))


class _Results:
    """What both kinds of analysis share: summary.json, tables, warnings, console, files."""

    _tables_of = ()

    def __init__(self, native):
        self._native = native
        self._summary = None
        self._tables = {}

    @property
    def summary(self):
        """summary.json, as a dict."""
        if self._summary is None:
            self._summary = json.loads(self._native.summary_json())
        return self._summary

    @property
    def warnings(self):
        """The warnings `steptrace analyze` prints, one line each."""
        return list(self._native.warnings())

    def console(self, top=10):
        """The console summary `steptrace analyze` prints."""
        return self._native.console(top)

    def table(self, name):
        """A table by name as a polars DataFrame (the CLI's `<name>.parquet`)."""
        if name not in self._tables:
            self._tables[name] = _frame(self._native.table_parquet(name))
        return self._tables[name]

    def __getattr__(self, name):
        if name in type(self)._tables_of:
            return self.table(name)
        raise AttributeError(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(type(self)._tables_of))

    def write(self, out):
        """Writes every file `steptrace analyze --out OUT` writes; returns the folder."""
        return self._native.write(os.fspath(out))


class Analysis(_Results):
    """One analysed run. `summary` is summary.json's contract as a dict; each table in
    `TABLES` is an attribute holding a polars DataFrame (read when first asked for)."""

    _tables_of = TABLES

    def plan(self, budget=None, *, policy="recompute", bandwidth_gbps=None, modules=None):
        """The checkpoint/swap plan `steptrace plan` makes for this run: `budget` as the
        command takes it (`"4GiB"`, `"80%"`, or a number of bytes), `policy` one of
        `"recompute"` (the command's default), `"swap"`, `"both"`, `modules` instances to evaluate (or
        `["every-block"]`) instead of a search. Raises `PlanError` where none can be made."""
        if isinstance(budget, (int, float)) and not isinstance(budget, bool):
            budget = str(int(budget))
        return Plan(
            self._native.plan(
                budget=budget,
                policy=policy,
                bandwidth_gbps=bandwidth_gbps,
                modules=None if modules is None else list(modules),
            )
        )

    def __repr__(self):
        s = self.summary
        return f"<steptrace.Analysis {s.get('name')!r}: {s.get('iterations')} iterations>"


class SnapshotAnalysis(_Results):
    """A memory snapshot analysed on its own (memory_viz's input): `summary` is its
    summary.json; `memory_timeline` and `top_sites` are DataFrames."""

    _tables_of = SNAPSHOT_TABLES

    def __repr__(self):
        s = self.summary
        return f"<steptrace.SnapshotAnalysis {s.get('snapshot')!r}: peak {s.get('peak_allocated_bytes')} B>"


class Ranks:
    """Every rank of a distributed run, analysed as `steptrace analyze` of the run directory
    does: `summary` is ranks.json as a dict (stragglers, the matched collectives' first 10,000
    and their count), `ranks` the cross-rank table as a DataFrame (a row per rank), `rank(n)`
    that rank's `Analysis`."""

    def __init__(self, path, threads):
        self._path = path
        self._threads = threads
        self._dir = tempfile.TemporaryDirectory(prefix="steptrace-ranks-")
        text, self._console, self._table = _native.analyze_ranks(path, self._dir.name, threads=threads)
        self.summary = json.loads(text)
        self._frame = None

    @property
    def ranks(self):
        """The cross-rank table (the command's ranks.parquet, a row per rank) as a DataFrame."""
        if self._frame is None:
            self._frame = _frame(self._table)
        return self._frame

    def rank(self, n):
        """Rank `n`'s own analysis."""
        return analyze(self._path, rank=n, threads=self._threads)

    def console(self):
        """The console summary the command prints: a line per rank and the straggler verdict."""
        return self._console

    def write(self, out):
        """Writes every file `steptrace analyze --out OUT` writes for the run; returns it."""
        shutil.copytree(self._dir.name, os.fspath(out), dirs_exist_ok=True)
        return out

    def __repr__(self):
        return f"<steptrace.Ranks {self._path!r}: {len(self.summary.get('ranks', []))} ranks>"


class Plan:
    """A plan as `steptrace plan` writes it: `json` is plan.json as a dict, `decisions` a
    DataFrame of its decisions in order."""

    def __init__(self, native):
        self._native = native
        self.json = json.loads(native.json())

    @property
    def decisions(self):
        import polars as pl

        return pl.DataFrame(self.json.get("decisions") or [])

    def table(self):
        """The table `steptrace plan` prints."""
        return self._native.table()

    def policy_code(self):
        """The plan as Python for the program (`steptrace plan --print-policy`)."""
        return self._native.policy_code()

    def write(self, out, plots=True):
        """Writes the files `steptrace plan --out OUT` writes; returns the folder."""
        return self._native.write(os.fspath(out), plots)


class Comparison:
    """Runs side by side (`steptrace compare`): `runs` is a list of (label, summary dict);
    `table()` is what the command prints, `frame` its compare.csv and `ops` its
    compare_ops.csv (the op-level diff) as DataFrames."""

    def __init__(self, paths, labels, threads):
        self._args = ([os.fspath(p) for p in paths], list(labels or []), threads)
        text, each = _native.compare(self._args[0], labels=self._args[1], threads=threads)
        self._text = text
        self.runs = [(label, json.loads(s)) for label, s in each]
        self._frame = None
        self._ops = None

    def table(self):
        return self._text

    def _read(self):
        import polars as pl

        with tempfile.TemporaryDirectory() as d:
            self.write(d)
            self._frame = pl.read_csv(os.path.join(d, "compare.csv"))
            # Names and labels stay text: a kernel or a label may look like a number.
            self._ops = pl.read_csv(
                os.path.join(d, "compare_ops.csv"),
                schema_overrides={"kind": pl.Utf8, "name": pl.Utf8, "status": pl.Utf8},
            )

    @property
    def frame(self):
        """compare.csv as a DataFrame (a few rows, read back from the command's file)."""
        if self._frame is None:
            self._read()
        return self._frame

    @property
    def ops(self):
        """compare_ops.csv as a DataFrame: per op and GPU activity name, each run's count and
        time, the change from the first run to the last, and its status."""
        if self._ops is None:
            self._read()
        return self._ops

    def write(self, out):
        """Writes the files `steptrace compare --out OUT` writes; returns the folder."""
        paths, labels, threads = self._args
        _native.compare(paths, labels=labels, out=os.fspath(out), threads=threads)
        return out


def analyze(path, *, snapshot=None, exec_trace=None, rank=None, threads=None):
    """Analyses a trace (`.json`, `.json.gz`), a run directory, or a memory snapshot on its
    own (`.pickle[.gz]`, giving a `SnapshotAnalysis`) as `steptrace analyze` does; a run of two
    ranks or more, without `rank`, gives `Ranks`.

    snapshot, exec_trace: files beside the trace (a run directory names its own);
    rank: which rank of a multi-rank run directory; threads: threads to use (default: all).
    """
    path = os.fspath(path)
    if snapshot is None and exec_trace is None and _native.is_snapshot_file(path):
        return SnapshotAnalysis(_native.analyze_snapshot(path, threads=threads))
    if rank is None and snapshot is None and exec_trace is None and _native.is_distributed_run(path):
        return Ranks(path, threads)
    return Analysis(
        _native.analyze(
            path,
            snapshot=None if snapshot is None else os.fspath(snapshot),
            exec_trace=None if exec_trace is None else os.fspath(exec_trace),
            rank=rank,
            threads=threads,
        )
    )


def plan(path, budget=None, *, policy="recompute", bandwidth_gbps=None, modules=None, rank=None, threads=None):
    """`analyze(path).plan(...)`: the plan `steptrace plan` makes for a run."""
    return analyze(path, rank=rank, threads=threads).plan(
        budget, policy=policy, bandwidth_gbps=bandwidth_gbps, modules=modules
    )


def compare(runs, *, labels=None, threads=None):
    """Runs side by side as `steptrace compare` sets them: traces, run directories, or
    folders `analyze` wrote (read back, not analysed again)."""
    runs = list(runs)
    if len(runs) < 2:
        raise ValueError("compare needs two runs or more")
    return Comparison(runs, labels, threads)

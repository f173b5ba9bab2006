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

from . import _native
from ._native import AnalysisError, Error, InputError, OutputError
from ._profile import profile, step

__version__ = _native.__version__
__all__ = [
    "analyze",
    "Analysis",
    "profile",
    "step",
    "Error",
    "InputError",
    "AnalysisError",
    "OutputError",
    "TABLES",
]

#: The tables an `Analysis` gives as DataFrames (each the CLI's `<name>.parquet`).
TABLES = tuple(_native.Analysis.table_names())


class Analysis:
    """One analysed run. `summary` is summary.json's contract as a dict; each table in
    `TABLES` is an attribute holding a polars DataFrame (read when first asked for)."""

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
        """A table by name (one of `TABLES`) as a polars DataFrame."""
        if name not in self._tables:
            import polars as pl

            self._tables[name] = pl.read_parquet(io.BytesIO(self._native.table_parquet(name)))
        return self._tables[name]

    def __getattr__(self, name):
        if name in TABLES:
            return self.table(name)
        raise AttributeError(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(TABLES))

    def write(self, out):
        """Writes every file `steptrace analyze --out OUT` writes; returns the folder."""
        return self._native.write(str(out))

    def __repr__(self):
        s = self.summary
        return f"<steptrace.Analysis {s.get('name')!r}: {s.get('iterations')} iterations>"


def analyze(path, *, snapshot=None, exec_trace=None, rank=None, threads=None):
    """Analyses a trace (`.json`, `.json.gz`) or a run directory as `steptrace analyze` does.

    snapshot, exec_trace: files beside the trace (a run directory names its own);
    rank: which rank of a multi-rank run directory; threads: threads to use (default: all).
    """
    return Analysis(
        _native.analyze(
            str(path),
            snapshot=None if snapshot is None else str(snapshot),
            exec_trace=None if exec_trace is None else str(exec_trace),
            rank=rank,
            threads=threads,
        )
    )

"""What the HolisticTraceAnalysis reference scripts (hta_breakdown.py, hta_idle.py,
hta_launches.py) share: HTA over a sample's traces, its version, and where the JSON goes."""

import contextlib
import os
import shutil
import sys
import tempfile


@contextlib.contextmanager
def hta_over(src, **kwargs):
    """HTA's TraceAnalysis over the trace files of `src`, copied into a temporary directory
    first (HTA would also try the snapshot and Execution Trace files beside them); `kwargs` go
    to TraceAnalysis."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(src)):
            if name.startswith("trace") and (name.endswith(".json") or name.endswith(".json.gz")):
                shutil.copy(os.path.join(src, name), tmp)
        yield TraceAnalysis(trace_dir=tmp, **kwargs)


def hta_version():
    try:
        from importlib.metadata import version

        return version("HolisticTraceAnalysis")
    except Exception:
        return None


def emit(text):
    """Writes `text` to the file named second on the command line, else to stdout."""
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)

"""HolisticTraceAnalysis's kernel launch statistics for the traces in a directory, event by
event, as JSON: the reference steptrace's `launches.csv` is checked against
(sample_traces/*/hta_launches.json, tests/integration/idle.rs).

    python3 benches/hta_launches.py DIR [OUT.json]   # needs `pip install HolisticTraceAnalysis "pandas<3"`

Per rank, one row per launched GPU activity, by correlation id: the launch call's duration,
the activity's duration and the launch delay (µs: HTA floors every time to whole µs), from
`get_cuda_kernel_launch_stats`, the last ProfilerStep kept (as in hta_idle.py)."""

import json
import os
import shutil
import sys
import tempfile


def main():
    src = sys.argv[1]
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(src)):
            if name.startswith("trace") and (name.endswith(".json") or name.endswith(".json.gz")):
                shutil.copy(os.path.join(src, name), tmp)
        ta = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=True)
        ranks = sorted(ta.t.traces.keys())
        stats = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        out = {"hta_version": _version(), "include_last_profiler_step": True, "ranks": {}}
        for r in ranks:
            df = stats[r].sort_values("correlation")
            out["ranks"][str(r)] = [
                [int(row.correlation), float(row.cpu_duration), float(row.gpu_duration), float(row.launch_delay)]
                for row in df.itertuples()
            ]
    text = json.dumps(out, separators=(",", ":")) + "\n"
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def _version():
    try:
        from importlib.metadata import version

        return version("HolisticTraceAnalysis")
    except Exception:
        return "unknown"


if __name__ == "__main__":
    main()

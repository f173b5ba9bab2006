"""HolisticTraceAnalysis's idle time breakdown and queue length summary for the traces in a
directory, as JSON on stdout: the reference steptrace's `idle_time.csv` and `streams.csv`'s
queue columns are checked against (sample_traces/*/hta_idle.json,
docs/analysis.md, tests/integration/idle.rs).

    python3 benches/hta_idle.py DIR [OUT.json]   # needs `pip install HolisticTraceAnalysis "pandas<3"`

Per rank and CUDA stream: host wait, kernel wait and other idle time (HTA's `idle_time` in its
trace's time unit, µs), with HTA's default `consecutive_kernel_delay` (30). As in
hta_breakdown.py, trace files only are copied into a temporary directory first."""

import json
import sys

from hta_common import emit, hta_over, hta_version


def main():
    # HTA leaves out the kernels launched in the last ProfilerStep unless told (it may be cut
    # short); steptrace's iterations are whole, so it is told to keep them.
    with hta_over(sys.argv[1], include_last_profiler_step=True) as ta:
        ranks = sorted(ta.t.traces.keys())
        out = {
            "hta_version": hta_version(),
            "consecutive_kernel_delay": 30,
            "include_last_profiler_step": True,
            "ranks": {},
        }
        for r in ranks:
            df, _ = ta.get_idle_time_breakdown(ranks=[r], visualize=False)
            streams = {}
            for _, row in df.iterrows():
                s = streams.setdefault(str(int(row["stream"])), {})
                # A stream with no idle time has no ratio (NaN, which JSON cannot hold).
                ratio = float(row["idle_time_ratio"])
                s[str(row["idle_category"])] = {
                    "idle_time_us": float(row["idle_time"]),
                    "idle_time_ratio": None if ratio != ratio else ratio,
                }
            # Queue length per stream (`get_queue_length_summary`: statistics over the change
            # points of launches minus starts).
            queue = {}
            ql = ta.get_queue_length_summary(ranks=[r])
            if ql is not None:
                for (_, stream), row in ql.iterrows():
                    queue[str(int(stream))] = {
                        "count": float(row[("queue_length", "count")]),
                        "mean": float(row[("queue_length", "mean")]),
                        "median": float(row[("queue_length", "50%")]),
                        "max": float(row[("queue_length", "max")]),
                    }
            out["ranks"][str(r)] = {"streams": streams, "queue": queue}
    emit(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

"""HolisticTraceAnalysis's kernel launch statistics for the traces in a directory, event by
event, as JSON: the reference steptrace's `launches.csv` is checked against
(sample_traces/*/hta_launches.json, tests/integration/idle.rs).

    python3 benches/hta_launches.py DIR [OUT.json]   # needs `pip install HolisticTraceAnalysis "pandas<3"`

Per rank, one row per launched GPU activity, by correlation id: the launch call's duration,
the activity's duration and the launch delay (µs: HTA floors every time to whole µs), from
`get_cuda_kernel_launch_stats`, the last ProfilerStep kept (as in hta_idle.py)."""

import json
import sys

from hta_common import emit, hta_over, hta_version


def main():
    with hta_over(sys.argv[1], include_last_profiler_step=True) as ta:
        ranks = sorted(ta.t.traces.keys())
        stats = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        out = {"hta_version": hta_version(), "include_last_profiler_step": True, "ranks": {}}
        for r in ranks:
            df = stats[r].sort_values("correlation")
            out["ranks"][str(r)] = [
                [int(row.correlation), float(row.cpu_duration), float(row.gpu_duration), float(row.launch_delay)]
                for row in df.itertuples()
            ]
    emit(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()

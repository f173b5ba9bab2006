"""HolisticTraceAnalysis's temporal breakdown and communication/computation overlap for the
traces in a directory, as JSON on stdout: the reference steptrace's `gpu_breakdown` is checked
against (sample_traces/*/hta_breakdown.json, docs/analysis.md).

    python3 benches/hta_breakdown.py DIR [OUT.json]   # needs `pip install HolisticTraceAnalysis`

HTA reads every trace file in DIR, each rank's from its `distributedInfo`. The traces are
copied into a temporary directory first, trace files only (HTA would also try the snapshot
and Execution Trace files beside them)."""

import json
import sys

from hta_common import emit, hta_over, hta_version


def main():
    with hta_over(sys.argv[1]) as ta:
        tb = ta.get_temporal_breakdown(visualize=False)
        out = {"hta_version": hta_version(), "ranks": {}}
        for _, row in tb.iterrows():
            out["ranks"][str(int(row["rank"]))] = {
                "idle_time_us": float(row["idle_time(us)"]),
                "compute_time_us": float(row["compute_time(us)"]),
                "non_compute_time_us": float(row["non_compute_time(us)"]),
                "kernel_time_us": float(row["kernel_time(us)"]),
                "idle_time_pctg": float(row["idle_time_pctg"]),
                "compute_time_pctg": float(row["compute_time_pctg"]),
                "non_compute_time_pctg": float(row["non_compute_time_pctg"]),
            }
        try:
            ov = ta.get_comm_comp_overlap(visualize=False)
            for _, row in ov.iterrows():
                v = float(row["comp_comm_overlap_pctg"])
                out["ranks"][str(int(row["rank"]))]["comp_comm_overlap_pctg"] = None if v != v else v
        except Exception as exc:  # no communication kernels: HTA divides by zero
            out["overlap_error"] = "%s: %s" % (type(exc).__name__, exc)
    emit(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

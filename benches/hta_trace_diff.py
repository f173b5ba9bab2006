"""HolisticTraceAnalysis's trace diff of two traces' GPU activities, as JSON: the reference
`steptrace compare`'s kernel rows (compare_ops.csv) are checked against
(sample_traces/gpt_bf16_ckpt/hta_trace_diff.json, tests/integration/idle.rs).

    python3 benches/hta_trace_diff.py CONTROL_DIR TEST_DIR [OUT.json]   # needs `pip install HolisticTraceAnalysis "pandas<3"`

`TraceDiff.compare_traces` over every iteration of each trace, GPU activities only: per
name, the count and total duration (µs: HTA floors every time to whole µs) in each."""

import json
import os
import shutil
import sys
import tempfile

from hta_common import hta_version


def labeled(src, label, tmp):
    from hta.common.trace import Trace
    from hta.trace_diff import LabeledTrace

    d = os.path.join(tmp, label)
    os.makedirs(d)
    shutil.copy(os.path.join(src, "trace.json.gz"), d)
    t = Trace(trace_dir=d)
    t.parse_traces()
    t.decode_symbol_ids(use_shorten_name=False)
    return LabeledTrace(label=label, t=t)


def main():
    import hta.trace_diff as td

    with tempfile.TemporaryDirectory() as tmp:
        a = labeled(sys.argv[1], "control", tmp)
        b = labeled(sys.argv[2], "test", tmp)
        df = td.TraceDiff.compare_traces(
            a, b, control_iteration=a.iterations(), test_iteration=b.iterations(), device_type=td.DeviceType.GPU
        )
    rows = {
        str(name): [int(r.control_counts), float(r.control_total_duration), int(r.test_counts), float(r.test_total_duration)]
        for name, r in df.sort_index().iterrows()
    }
    out = {"hta_version": hta_version(), "iterations": "all", "device_type": "GPU", "kernels": rows}
    text = json.dumps(out, separators=(",", ":"), sort_keys=True) + "\n"
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

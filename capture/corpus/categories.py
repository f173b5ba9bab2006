"""Peak breakdown of each analysed corpus run against torch's own classifier
(export_memory_timeline, recorded beside the capture), at torch's peak and at its first point.

    python3 capture/corpus/categories.py /tmp/corpus     # after capture/corpus/run.sh
"""
import csv, glob, gzip, json, sys

W = sys.argv[1] if len(sys.argv) > 1 else "/tmp/corpus"
TORCH = ["PARAMETER", "OPTIMIZER_STATE", "INPUT", "TEMPORARY", "ACTIVATION", "GRADIENT",
         "AUTOGRAD_DETAIL", "UNKNOWN"]
OURS = {"PARAMETER": "param", "OPTIMIZER_STATE": "opt_state", "INPUT": "input", "GRADIENT": "grad"}
MiB = 2**20
for summary in sorted(glob.glob(W + "/an/*/summary.json")):
    name = summary.split("/")[-2]
    s = json.load(open(summary))
    b, peak = s["peak_breakdown_bytes"], s["peak_allocated_bytes"] or 0
    row = {"program": name, "iterations": s["iterations"], "peak": peak,
           "other_pct": round(100 * b.get("other", 0) / max(peak, 1), 2),
           "ours_at_peak_mib": {k: round(v / MiB, 1) for k, v in b.items()},
           "warnings": [w.split(":")[0] for w in s["warnings"]]}
    rows = list(csv.DictReader(open(summary.replace("summary.json", "memory_timeline.csv"))))
    for tl in glob.glob(W + "/runs/" + name + "/memory_timeline_torch*.json*"):
        v = json.load(gzip.open(tl) if tl.endswith(".gz") else open(tl))
        times, sizes = v
        tot = [sum(x) for x in sizes]
        for label, i in (("torch_peak", max(range(len(tot)), key=lambda k: tot[k])), ("torch_first", 0)):
            at = times[i]
            mine = [r for r in rows if float(r["epoch_us"]) <= at] or rows[:1]
            row[label] = {t: [round(sizes[i][k + 1] / MiB, 1),
                              round(int(mine[-1][OURS[t]]) / MiB, 1) if t in OURS else None]
                          for k, t in enumerate(TORCH)}
    print(json.dumps(row))

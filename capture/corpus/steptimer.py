"""The program's own step time, measured apart from steptrace: runs a Python training script
unchanged (as `python script.py args`) with only a global optimizer step post hook that reads
the host clock, and writes the median interval between steps of the most often stepped
optimizer (a GAN steps two per iteration: D to D is one iteration), after the first five, as
JSON. No profiler, no memory history, no module hooks.

    python3 steptimer.py OUT.json script.py [args...]
"""

import json
import os
import runpy
import sys
import time

out_path = sys.argv[1]
sys.argv = sys.argv[2:]
stamps = []


def _install():
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda opt, a, k: stamps.append((id(opt), time.perf_counter_ns())))


def _report():
    counts = {}
    for o, _ in stamps:
        counts[o] = counts.get(o, 0) + 1
    lead = max(counts, key=lambda o: (counts[o], -[s[0] for s in stamps].index(o))) if counts else None
    mine = [t for o, t in stamps if o == lead]
    ivals = [(b - a) * 1e-9 for a, b in zip(mine, mine[1:])][5:]
    ivals_sorted = sorted(ivals)
    med = ivals_sorted[len(ivals_sorted) // 2] if ivals_sorted else None
    with open(out_path, "w") as f:
        json.dump({"optimizer_steps": len(stamps), "optimizers": len(counts), "median_step_s": med,
                   "intervals_s": ivals}, f)


import atexit

atexit.register(_report)
import torch  # noqa: E402  (the hook needs torch; the script imports it anyway)

_install()
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")

"""Ground truth recorded by the example programs themselves, independent of steptrace.

Only active when STEPTRACE_REF_OUT names a directory (the GPU test script sets it); the
examples are ordinary training programs otherwise. A "step" here runs from one optimizer.step()
return to the next, which is where capture's optimizer hook puts ProfilerStep boundaries, so
the peak measured here is the peak inside the matching ProfilerStep range.
"""
import json
import os
import time

import torch


class Reference:
    def __init__(self, name):
        self.dir = os.environ.get("STEPTRACE_REF_OUT")
        self.name = name
        self.data = {"model": name, "steps": {}, "torch": torch.__version__, "cuda": torch.version.cuda}
        self.step = 0
        self.t0 = None

    def start(self):
        if self.dir and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
            self.t0 = time.perf_counter()

    def after_optimizer(self):
        """Call right after optimizer.step(): closes step `self.step`, opens the next."""
        if self.dir and torch.cuda.is_available() and self.t0 is not None:
            now = time.perf_counter()
            self.data["steps"][str(self.step)] = {
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "wall_s": now - self.t0,
            }
            torch.cuda.reset_peak_memory_stats()
            self.t0 = now
        self.step += 1

    def finish(self, model, opt, flop_fn=None):
        if not self.dir:
            return
        ts = lambda it: sum(t.numel() * t.element_size() for t in it if isinstance(t, torch.Tensor) and t.is_cuda)
        self.data["param_bytes"] = ts(model.parameters())
        self.data["grad_bytes"] = ts(p.grad for p in model.parameters())
        self.data["opt_state_bytes"] = ts(v for st in opt.state.values() for v in st.values())
        if flop_fn is not None:
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as fc:
                flop_fn()
            self.data["flop_counter"] = {
                "total": fc.get_total_flops(),
                "per_op": {str(k): v for k, v in sorted(fc.get_flop_counts().get("Global", {}).items(), key=lambda kv: str(kv[0]))},
            }
        if torch.cuda.is_available():
            self.data["gpu"] = torch.cuda.get_device_name()
        rank = os.environ.get("RANK")
        name = "reference%s.json" % ("_rank" + rank if rank is not None else "")
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, name), "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)

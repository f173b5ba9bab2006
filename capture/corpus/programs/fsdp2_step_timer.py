"""pytorch/examples' distributed/FSDP2/example.py run unchanged, with the one addition users
make to time a loop they did not write: a global optimizer step hook (torch's
`register_optimizer_step_post_hook`) that waits for the GPU and prints the wall time between
consecutive optimizer steps, per rank, in nanoGPT's format. The reference for the step time
steptrace reports on that program (docs/capture.md, the FSDP2 rows). Run beside example.py:

    torchrun --standalone --nproc-per-node 2 fsdp2_step_timer.py [--mixed-precision]
"""

import os
import runpy
import sys
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

_last = [None, 0]


def _after_step(optimizer, args, kwargs):
    torch.cuda.synchronize()
    now = time.perf_counter()
    _last[1] += 1
    if _last[0] is not None:
        print(
            "rank %s iter %d: loss 0, time %.2fms"
            % (os.environ.get("RANK", "0"), _last[1], (now - _last[0]) * 1e3),
            flush=True,
        )
    _last[0] = now


register_optimizer_step_post_hook(_after_step)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.argv = [os.path.join(here, "example.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")

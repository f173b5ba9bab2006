"""What checkpointing every torchvision Bottleneck costs a ResNet-50 step, uninstrumented
(issue 43: the ImageNet sweep measured 42.9 ms added where the planner predicted 27.3 ms).
Steps of the variants interleaved round by round so that drift hits all alike; per step the
host's time to issue it (forward, loss, backward, SGD step) and the whole step after a
synchronize; medians.

    python3 capture/corpus/bottleneck_cost.py [--rounds 30] > bottleneck_cost.jsonl

Model as pytorch/examples imagenet/main.py trains it: torchvision resnet50, batch 64, 224x224,
fp32, SGD with momentum, CrossEntropyLoss. Variants: no checkpoint; every Bottleneck under
non-reentrant torch.utils.checkpoint (as `capture --plan` wraps it); the same without RNG-state
preservation and without the determinism check; each again with global module forward hooks
like the Python shim's (capture's timing phase runs with them). Also: tensors each Bottleneck
saves for backward, and ops it dispatches.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.checkpoint import checkpoint


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    crit = nn.CrossEntropyLoss().to(dev)
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    blocks = [m for m in model.modules() if isinstance(m, torchvision.models.resnet.Bottleneck)]
    mode = {"ckpt": False, "rng": True, "check": "default"}
    for b in blocks:
        orig = b.forward

        def fwd(*args, _orig=orig):
            if not mode["ckpt"]:
                return _orig(*args)
            return checkpoint(_orig, *args, use_reentrant=False,
                              preserve_rng_state=mode["rng"], determinism_check=mode["check"])

        b.forward = fwd

    hooks = []

    def hooks_on(on):
        while hooks:
            hooks.pop().remove()
        if on:
            stack = []
            hooks.append(nn.modules.module.register_module_forward_pre_hook(
                lambda m, args: stack.append(id(m))))
            hooks.append(nn.modules.module.register_module_forward_hook(
                lambda m, args, out: stack.pop() if stack else None))

    def step():
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return t1 - t0, time.perf_counter() - t0

    variants = {
        "plain": ({"ckpt": False, "rng": True, "check": "default"}, False),
        "ckpt": ({"ckpt": True, "rng": True, "check": "default"}, False),
        "ckpt_norng_nocheck": ({"ckpt": True, "rng": False, "check": "none"}, False),
        "plain_hooks": ({"ckpt": False, "rng": True, "check": "default"}, True),
        "ckpt_hooks": ({"ckpt": True, "rng": True, "check": "default"}, True),
    }
    for _ in range(5):
        for m, h in variants.values():
            mode.update(m)
            hooks_on(h)
            step()
    got = {k: ([], []) for k in variants}
    for _ in range(a.rounds):
        for k, (m, h) in variants.items():
            mode.update(m)
            hooks_on(h)
            step()  # the step after a switch settles what the last variant left queued
            host, whole = step()
            got[k][0].append(host)
            got[k][1].append(whole)
    hooks_on(False)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    for k, (host, whole) in got.items():
        print(json.dumps({"variant": k, "host_issue_ms": med(host) * 1e3, "step_ms": med(whole) * 1e3,
                          "steps": len(whole)}))
    # What one Bottleneck saves for backward and dispatches.
    mode.update(variants["plain"][0])
    counts = {"saved": 0}

    def pack(t):
        counts["saved"] += 1
        return t

    b = blocks[1]
    inp = torch.randn(64, 256, 56, 56, device=dev, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = b(inp)
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        b(inp)
    ops = sum(1 for e in p.events() if e.name.startswith("aten::") and e.cpu_parent is None)
    print(json.dumps({"bottleneck_saved_tensors": counts["saved"], "bottleneck_top_level_ops": ops,
                      "blocks": len(blocks)}))
    del out


if __name__ == "__main__":
    main()

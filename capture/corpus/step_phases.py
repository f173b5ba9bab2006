"""Where a checkpoint's or a swap's cost lands in a launch-bound step (issue 20): host and GPU
time per phase of this project's GPT example, for the plans the budget sweep applies, steps
interleaved (A B A B ...) so that drift hits all alike; and one Block's forward and backward
alone, host time to issue and wall time, as written, under checkpoint and under the swap
hooks (the capture shim's own, loaded from its file).

    python3 capture/corpus/step_phases.py [--steps 30] [--no-gc] > step_phases.jsonl

Per phase (forward, backward, optimizer): `host_ms` is the host clock from the phase's start
to the call's return, `gpu_ms` the stream's clock between CUDA events recorded at the same
points, `lag_ms` how far the GPU's end of the phase trails the host's (0: the GPU waited for
launches). Medians over the steps.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import shim_module  # noqa: E402


SHIM = shim_module.load()


def swap_hooks(params, args):
    """The capture shim's swap hooks (capture/shim_py/sitecustomize.py `_swap_hooks`)."""
    return SHIM._swap_hooks(torch, lambda: iter(params), args, {})


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-gc", action="store_true", help="Python's garbage collector off")
    a = ap.parse_args()
    if a.no_gc:
        import gc

        gc.disable()
    torch.manual_seed(0)
    vocab, seq, batch = 512, 512, 16
    model = GPT(vocab, d=512, heads=4, layers=8, seq=seq).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, seq)).cuda()
    y = torch.randint(0, vocab, (batch, seq)).cuda()
    plan = {}

    def block_call(i, blk, h):
        act = plan.get(i)
        if act == "recompute":
            return checkpoint(blk, h, use_reentrant=False)
        if act == "swap":
            with swap_hooks(list(blk.parameters()), [h]):
                return blk(h)
        return blk(h)

    def forward(idx):
        h = model.tok(idx) + model.pos(torch.arange(idx.shape[1], device=idx.device))
        for i, blk in enumerate(model.blocks):
            h = block_call(i, blk, h)
        return model.head(model.ln_f(h))

    def step(rec):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        hs = [time.perf_counter()]
        ev[0].record()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(x).view(-1, vocab), y.view(-1))
        ev[1].record()
        hs.append(time.perf_counter())
        loss.backward()
        ev[2].record()
        hs.append(time.perf_counter())
        opt.step()
        ev[3].record()
        hs.append(time.perf_counter())
        loss.item()
        end = time.perf_counter()
        if rec is not None:
            rec["step"].append(end - hs[0])
            for k, name in enumerate(("forward", "backward", "optimizer")):
                rec[name + "_host"].append(hs[k + 1] - hs[k])
                rec[name + "_gpu"].append(ev[k].elapsed_time(ev[k + 1]) * 1e-3)
            # The GPU's end of the step against the host's return from the optimizer.
            rec["lag"].append(end - hs[3])

    variants = {
        "none": {},
        "recompute_2": {0: "recompute", 6: "recompute"},
        "recompute_4": {0: "recompute", 2: "recompute", 4: "recompute", 6: "recompute"},
        "swap_2": {0: "swap", 6: "swap"},
        "swap_4": {0: "swap", 2: "swap", 4: "swap", 6: "swap"},
    }
    keys = ["step", "lag"] + [p + s for p in ("forward", "backward", "optimizer") for s in ("_host", "_gpu")]
    recs = {k: {n: [] for n in keys} for k in variants}
    for _ in range(5):
        for v in variants.values():
            plan = v
            step(None)
    for _ in range(a.steps):
        for k, v in variants.items():
            plan = v
            torch.cuda.synchronize()
            step(recs[k])
    for k, r in recs.items():
        print(json.dumps({"variant": k, **{n: round(med(r[n]) * 1e3, 3) for n in keys}}))

    # One Block's forward and backward alone.
    blk = model.blocks[3]
    h = torch.randn(batch, seq, 512, device="cuda", requires_grad=True)
    params = [p for p in blk.parameters() if p.requires_grad]

    def fwd_bwd(kind):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if kind == "recompute":
                out = checkpoint(blk, h, use_reentrant=False)
            elif kind == "swap":
                with swap_hooks(params, [h]):
                    out = blk(h)
            else:
                out = blk(h)
        t_fwd = time.perf_counter()
        torch.autograd.grad(out, [h] + params, torch.ones_like(out))
        return t_fwd

    res = {k: {"fwd_host": [], "fwd_bwd_host": [], "fwd_bwd_wall": []} for k in ("plain", "recompute", "swap")}
    for r in range(40):
        for kind in res:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            t_fwd = fwd_bwd(kind)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if r >= 5:
                res[kind]["fwd_host"].append(t_fwd - t0)
                res[kind]["fwd_bwd_host"].append(t1 - t0)
                res[kind]["fwd_bwd_wall"].append(t2 - t0)
    print(json.dumps({"block_alone_ms": {k: {n: round(med(v) * 1e3, 3) for n, v in r.items()} for k, r in res.items()}}))


if __name__ == "__main__":
    main()

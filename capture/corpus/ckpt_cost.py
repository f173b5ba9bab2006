"""What non-reentrant checkpointing costs a step, uninstrumented (issue 20): the planner's
recompute time is the module's forward again; this measures the real addition on the GPU
machine, variant by variant, steps interleaved (A B A B ...) so that drift hits all alike.

    python3 capture/corpus/ckpt_cost.py [--steps 40] > ckpt_cost.jsonl

Model: this project's capture/examples/train_gpt.py GPT (the sweep's size: batch 16, seq 512,
d 512, 8 layers, bf16 autocast, AdamW). Variants: no checkpoint; Block_0 and Block_6
checkpointed (the sweep's 90% plan) by default, without RNG-state preservation, without early
stop, outside autocast (fp32); and the forward of one block timed alone (with grad, no grad,
under checkpoint).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    torch.manual_seed(0)
    vocab, seq, batch = 512, 512, 16
    model = GPT(vocab, d=512, heads=4, layers=8, seq=seq).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, seq)).cuda()
    y = torch.randint(0, vocab, (batch, seq)).cuda()
    chosen = {0, 6}
    mode = {"ckpt": False, "rng": True, "early": True, "amp": True}

    def block_call(i, blk, h):
        if mode["ckpt"] and i in chosen:
            return checkpoint(blk, h, use_reentrant=False, preserve_rng_state=mode["rng"])
        return blk(h)

    def forward(idx):
        h = model.tok(idx) + model.pos(torch.arange(idx.shape[1], device=idx.device))
        for i, blk in enumerate(model.blocks):
            h = block_call(i, blk, h)
        return model.head(model.ln_f(h))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode["amp"]):
            loss = F.cross_entropy(forward(x).view(-1, vocab), y.view(-1))
        with set_checkpoint_early_stop(mode["early"]):
            loss.backward()
        opt.step()
        return loss.item()

    variants = {
        "none": dict(ckpt=False),
        "ckpt2": dict(ckpt=True),
        "ckpt2_no_rng": dict(ckpt=True, rng=False),
        "ckpt2_no_early_stop": dict(ckpt=True, early=False),
        "none_fp32": dict(ckpt=False, amp=False),
        "ckpt2_fp32": dict(ckpt=True, amp=False),
    }
    times = {k: [] for k in variants}
    for _ in range(10):  # warm-up, every variant
        for v in variants.values():
            mode.update(dict(ckpt=False, rng=True, early=True, amp=True), **v)
            step()
    for _ in range(a.steps):
        for k, v in variants.items():
            mode.update(dict(ckpt=False, rng=True, early=True, amp=True), **v)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            times[k].append(time.perf_counter() - t0)
    med = lambda v: sorted(v)[len(v) // 2]
    for k, v in times.items():
        print(json.dumps({"variant": k, "median_ms": round(med(v) * 1e3, 3), "steps": len(v)}))

    # One block's forward alone: CPU time to issue it, GPU synchronised around.
    blk = model.blocks[3]
    h = torch.randn(batch, seq, 512, device="cuda", requires_grad=True)

    def timed(fn, n=50):
        out = []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                r = fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            out.append(t1 - t0)
            del r
        return med(out)

    with torch.no_grad():
        nograd = timed(lambda: blk(h))
    print(json.dumps({"block_forward_ms": {
        "grad": round(timed(lambda: blk(h)) * 1e3, 3),
        "no_grad": round(nograd * 1e3, 3),
        "checkpoint": round(timed(lambda: checkpoint(blk, h, use_reentrant=False)) * 1e3, 3),
    }}))


if __name__ == "__main__":
    main()

"""Where a checkpoint's own host work lands, forward or backward (issue 75): the plan charged
the probe's per-call and per-op cost half to each, and Lightning's demo at batch 512 with the
whole `nn.Transformer` recomputed ran its backward 1-3.5 ms longer than predicted while its
forward matched.

    python3 capture/corpus/ckpt_split.py [--steps 40] > ckpt_split.jsonl

Lightning's demo `LightningTransformer` (lightning.pytorch.demos, unchanged) under bf16
autocast, its `training_step` loss, SGD, at batch 8 (the GPU faster than the host launches,
so the host's times are its own work, no waiting) and 512 (the issue's), three variants
interleaved step by step so that drift hits all alike: as written, `model.transformer` under
non-reentrant `torch.utils.checkpoint`, and each decoder layer under it. Per variant, medians:
the host's time in the forward call and in `backward()` (the queue drained before each, so a
wait inside is the phase's own), and the time inside the checkpointed function's calls during
the backward (the recompute), and in the variant as written the time inside `model.transformer`
and inside the decoder layers in the forward. Then the capture probe's chain of linear+gelu pairs, timed the
same way: its forward alone and its backward, with and without the checkpoint, so the probe's
own split can be set beside the model's.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from lightning.pytorch.demos import LightningTransformer

sys.path.insert(0, os.path.dirname(__file__))
import shim_module  # noqa: E402


def wrap(module, timer):
    """`module.forward` under checkpoint; calls made during a backward are timed into `timer`."""
    orig = module.forward

    def timed(*a, **k):
        if timer["in_backward"]:
            t0 = time.perf_counter_ns()
            try:  # checkpoint's early stop ends a recompute by raising through it
                return orig(*a, **k)
            finally:
                timer["recompute_ns"] += time.perf_counter_ns() - t0
        return orig(*a, **k)

    module.forward = lambda *a, **k: checkpoint(timed, *a, use_reentrant=False, **k)


def clock(module, timer, key):
    """`module.forward` as written, its calls' time added to `timer[key]`."""
    orig = module.forward

    def timed(*a, **k):
        t0 = time.perf_counter_ns()
        try:
            return orig(*a, **k)
        finally:
            timer[key] += time.perf_counter_ns() - t0

    module.forward = timed


def model_rows(batch, steps, vocab, seq):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    models = {}
    for variant in ("plain", "transformer", "decoder_layers"):
        m = LightningTransformer(vocab_size=vocab).to(dev)
        timer = {"in_backward": False, "recompute_ns": 0, "transformer_ns": 0, "layers_ns": 0}
        if variant == "plain":
            # The plain forward's time in what the plans wrap, to set the recompute against.
            clock(m.model.transformer, timer, "transformer_ns")
            for layer in m.model.transformer.decoder.layers:
                clock(layer, timer, "layers_ns")
        elif variant == "transformer":
            wrap(m.model.transformer, timer)
        elif variant == "decoder_layers":
            for layer in m.model.transformer.decoder.layers:
                wrap(layer, timer)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        models[variant] = (m, opt, timer)
    x = torch.randint(0, vocab, (batch, seq), device=dev)
    y = torch.randint(0, vocab, (batch, seq), device=dev)
    got = {v: {"forward": [], "backward": [], "recompute": [], "transformer": [], "layers": []}
           for v in models}
    for s in range(steps + 3):
        for v, (m, opt, timer) in models.items():
            opt.zero_grad(set_to_none=True)
            timer["transformer_ns"] = timer["layers_ns"] = 0
            torch.cuda.synchronize()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                t0 = time.perf_counter_ns()
                out = m(x, y)
                t1 = time.perf_counter_ns()
                loss = F.nll_loss(out, y.view(-1))
            torch.cuda.synchronize()
            timer["in_backward"], timer["recompute_ns"] = True, 0
            t2 = time.perf_counter_ns()
            loss.backward()
            t3 = time.perf_counter_ns()
            timer["in_backward"] = False
            opt.step()
            if s >= 3:
                got[v]["forward"].append((t1 - t0) * 1e-6)
                got[v]["backward"].append((t3 - t2) * 1e-6)
                got[v]["recompute"].append(timer["recompute_ns"] * 1e-6)
                got[v]["transformer"].append(timer["transformer_ns"] * 1e-6)
                got[v]["layers"].append(timer["layers_ns"] * 1e-6)
    for v, g in got.items():
        print(json.dumps({"what": "model", "batch": batch, "variant": v, "steps": steps,
                          **{k + "_ms": round(statistics.median(x), 4) for k, x in g.items()}}), flush=True)


def chain_rows(steps):
    w_in, _, x0, chain = shim_module.load()._probe_chain(torch, torch.device("cuda"))
    got = {}
    for r in range(steps + 3):
        for n in (1, 12):
            for ck in (False, True):
                f = chain(n)
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                h = F.linear(x0, w_in)
                y = checkpoint(f, h, use_reentrant=False) if ck else f(h)
                t1 = time.perf_counter_ns()
                s = y.sum()
                torch.cuda.synchronize()
                t2 = time.perf_counter_ns()
                s.backward()
                t3 = time.perf_counter_ns()
                if r >= 3:
                    k = (n, ck)
                    got.setdefault(k, {"forward": [], "backward": []})
                    got[k]["forward"].append((t1 - t0) * 1e-6)
                    got[k]["backward"].append((t3 - t2) * 1e-6)
    for (n, ck), g2 in sorted(got.items()):
        print(json.dumps({"what": "chain", "pairs": n, "checkpoint": ck, "steps": steps,
                          **{k + "_ms": round(statistics.median(x), 4) for k, x in g2.items()}}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--vocab", type=int, default=33278)
    a = ap.parse_args()
    chain_rows(a.steps)
    for batch in (8, 512):
        model_rows(batch, a.steps, a.vocab, 35)
    chain_rows(a.steps)


if __name__ == "__main__":
    main()

"""What the swap hooks cost on the host per module of a GPT (issue 20), to test whether that
cost follows the module's ops (the planner's model: a cost per call and one per op, from the
capture's probe on tiny linear+gelu chains) or the tensors the hooks copy.

    python3 capture/corpus/swap_cost.py [--rounds 40] > swap_cost.jsonl
    python3 capture/corpus/swap_cost.py --nanogpt .corpus/src/nanoGPT > swap_cost_nanogpt.jsonl

The model is this project's GPT example, or with `--nanogpt DIR` karpathy/nanoGPT's own
`model.py` (a public program, fetched by `capture/corpus/fetch.sh`) at the sizes of its
`bench.py`, which the planner's sweeps run (`budget_sweep.sh`: eager, bf16).

For each module kind (a whole Block, its LayerNorm, its Linears, one of its GELU-MLP halves),
at the example's sizes under bf16 autocast: host time to issue the module's forward and
backward as written and under the capture shim's own swap hooks (`_swap_hooks`, loaded from
its file), rounds interleaved, medians; how many tensors the hooks copy (packs) and how many
ops the forward dispatches. Then the shim's probe (`_plan_probe`) in the same process, and the
hooks' cost each model predicts.
"""
import argparse
import json
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(__file__))
from step_phases import SHIM, med  # noqa: E402  (the shim's module, loaded once)



def example_modules():
    """This project's GPT example at its sizes: (module kinds, batch, seq)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from train_gpt import GPT

    vocab, seq, batch, d = 512, 512, 16, 512
    model = GPT(vocab, d=d, heads=4, layers=8, seq=seq).cuda()
    blk = model.blocks[3]
    mlp = torch.nn.Sequential(blk.fc, torch.nn.GELU())
    kinds = {
        "Block": (blk, d),
        "LayerNorm": (blk.ln1, d),
        "Linear_qkv": (blk.qkv, d),
        "Linear_fc": (blk.fc, d),
        "Linear_fc2": (blk.fc2, 4 * d),
        "Linear_fc+GELU": (mlp, d),
    }
    return kinds, batch, seq


def nanogpt_modules(path):
    """nanoGPT's model at its bench.py sizes (batch 12, block 1024, 12 layers of 768)."""
    sys.path.insert(0, path)
    from model import GPT, GPTConfig

    cfg = GPTConfig(block_size=1024, vocab_size=50304, n_layer=12, n_head=12, n_embd=768,
                    dropout=0.0, bias=False)
    blk = GPT(cfg).cuda().transformer.h[5]
    d = cfg.n_embd
    kinds = {
        "Block": (blk, d),
        "LayerNorm": (blk.ln_1, d),
        "CausalSelfAttention": (blk.attn, d),
        "Linear_c_attn": (blk.attn.c_attn, d),
        "Linear_mlp_c_fc": (blk.mlp.c_fc, d),
        "Linear_mlp_c_proj": (blk.mlp.c_proj, 4 * d),
        "MLP": (blk.mlp, d),
    }
    return kinds, 12, cfg.block_size


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--nanogpt", help="nanoGPT's checkout: time its model instead of the example")
    a = ap.parse_args()
    torch.manual_seed(0)
    kinds, batch, seq = nanogpt_modules(a.nanogpt) if a.nanogpt else example_modules()
    # The shim's state, as a capture would make it (the probe switches the plan on and back).
    SHIM._S = SHIM._State()
    rows = []
    for name, (mod, width) in kinds.items():
        h = torch.randn(batch, seq, width, device="cuda", requires_grad=True)
        params = [p for p in mod.parameters() if p.requires_grad]
        packs = []

        def run(swap, count=None):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if swap:
                    hooks = SHIM._swap_hooks(torch, lambda: iter(params), [h], {})
                    if count is not None:
                        # The shim's pack, counted: what it returns as a tuple was copied.
                        pack, unpack = hooks.pack_hook, hooks.unpack_hook

                        def counted(t):
                            p = pack(t)
                            count.append(isinstance(p, tuple))
                            return p

                        hooks = torch.autograd.graph.saved_tensors_hooks(counted, unpack)
                    with hooks:
                        out = mod(h)
                else:
                    out = mod(h)
            torch.autograd.grad(out, [h] + params, torch.ones_like(out))

        run(True, packs)
        ops = CountOps()
        with ops:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                mod(h)
        times = {"plain": [], "swap": []}
        for r in range(a.rounds):
            for kind in times:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run(kind == "swap")
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                if r >= 5:
                    times[kind].append(t1 - t0)
        row = {
            "module": name,
            "packs": sum(packs),
            "saved": len(packs),
            "dispatched_ops": ops.n,
            "plain_host_ms": round(med(times["plain"]) * 1e3, 3),
            "swap_host_ms": round(med(times["swap"]) * 1e3, 3),
        }
        row["hooks_ms"] = round(row["swap_host_ms"] - row["plain_host_ms"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    probe = SHIM._plan_probe(torch)
    print(json.dumps({"probe": probe}))


if __name__ == "__main__":
    main()

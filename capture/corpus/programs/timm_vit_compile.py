"""A timm model trained as its users write a compiled loop: ViT-B/16 from timm's registry (no
pretrained weights: the GPU machine has no network), `torch.compile(model,
mode="reduce-overhead")` (Inductor with CUDA graphs, forward and backward), bf16 autocast,
fused AdamW, random images. The one addition is a step timer printing each step's wall time in
nanoGPT's format for capture/corpus/progress_timer.py.

    python3 timm_vit_compile.py [--steps N] [--batch B]
    python3 timm_vit_compile.py --reference OUT.json   # ground truth, nothing of steptrace loaded

With --reference it runs the same model eagerly for one step under FlopCounterMode (the FLOPs
a step does), then the compiled loop, and writes torch's own figures beside the FLOPs:
max_memory_allocated, memory_reserved, and each memory pool's reserved bytes as
torch.cuda.memory_snapshot() gives them.
"""

import argparse
import json
import time

import timm
import torch


def one_step(model, opt, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--reference")
    args = p.parse_args()
    torch.manual_seed(0)
    model = timm.create_model(args.model, pretrained=False, num_classes=1000).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    ref = {}
    if args.reference:
        from torch.utils.flop_counter import FlopCounterMode

        with torch.autocast("cuda", dtype=torch.bfloat16):
            with FlopCounterMode(display=False) as fc:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
        counts = fc.get_flop_counts()
        ref["flops_step"] = fc.get_total_flops()
        ref["flops_by_module"] = {k: sum(v.values()) for k, v in counts.items() if k.count(".") == 0}
        opt.zero_grad(set_to_none=True)
    compiled = torch.compile(model, mode="reduce-overhead")
    last = None
    for i in range(args.steps):
        one_step(compiled, opt, x, y)
        torch.cuda.synchronize()
        now = time.perf_counter()
        if last is not None:
            print("iter %d: loss 0, time %.2fms" % (i, (now - last) * 1e3), flush=True)
        last = now
    if args.reference:
        ref["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        ref["memory_allocated"] = torch.cuda.memory_allocated()
        ref["memory_reserved"] = torch.cuda.memory_reserved()
        pools = {}
        for seg in torch.cuda.memory_snapshot():
            key = "%d,%d" % tuple(seg["segment_pool_id"])
            pools.setdefault(key, {"reserved": 0, "allocated": 0, "segments": 0})
            pools[key]["reserved"] += seg["total_size"]
            pools[key]["allocated"] += seg["allocated_size"]
            pools[key]["segments"] += 1
        ref["pools"] = pools
        with open(args.reference, "w") as f:
            json.dump(ref, f, indent=1)
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

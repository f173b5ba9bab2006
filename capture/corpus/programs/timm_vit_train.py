"""A timm model trained as its users write an eager loop: ViT-B/16 from timm's registry (no
pretrained weights: the GPU machine has no network), bf16 autocast, AdamW, random images.
`--grad-checkpointing` turns on timm's own switch, `model.set_grad_checkpointing(True)`
(timm's `checkpoint_seq` over the blocks), issue 75's ground truth for a plan that recomputes
every block. The one addition is a step timer printing each step's wall time in nanoGPT's
format, and torch's max_memory_allocated over the whole run at the end.

    python3 timm_vit_train.py [--steps N] [--batch B] [--grad-checkpointing]
"""

import argparse
import inspect
import time

import timm
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--batch", type=int, default=96)
    p.add_argument("--model", default="vit_base_patch16_224")
    p.add_argument("--grad-checkpointing", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = timm.create_model(args.model, pretrained=False, num_classes=1000).cuda()
    if args.grad_checkpointing:
        model.set_grad_checkpointing(True)
        # Which checkpoint timm calls (reentrant or not) is part of what was measured.
        from timm.models import _manipulate

        src = inspect.getsource(_manipulate.checkpoint_seq)
        print("timm checkpoint_seq reentrant:", "use_reentrant" in src and "use_reentrant=False" not in src)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    last = None
    for i in range(args.steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item()  # as users log it: the step's end waits for the GPU
        now = time.perf_counter()
        if last is not None:
            print("iter %d: loss %.4f, time %.2fms" % (i, loss_v, (now - last) * 1e3), flush=True)
        last = now
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

"""A training loop as seed 003 writes it, under `@steptrace.profile` (issue 78's proof).

HF GPT-2 (transformers, from its config: no weights can be downloaded on the GPU machine) on
random tokens, AdamW, bf16 autocast; the decorated `train_model(args)` builds the model and runs
the loop, calling `steptrace.step()` after each optimizer step, as the seed's `step_profiler()`.

    python3 seed003_profile.py --out runs/inproc                 # recorded in-process
    steptrace capture -o runs/launched -- python3 seed003_profile.py
                                                                 # the same program under capture
    torchrun --nproc-per-node 2 seed003_profile.py --ddp --out runs/ddp
                                                                 # two ranks, DDP over gloo

Under `steptrace capture` the decorator records nothing itself and its steps mark the
launcher's. With --ddp every rank uses GPU 0 (one GPU with the gloo backend will do). Prints
`step <n> <ms>` for each step.
"""

import argparse
import os
import time

import torch
import steptrace

p = argparse.ArgumentParser()
p.add_argument("--out", default="./profiler_logs")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--ddp", action="store_true")
p.add_argument("--n-layer", type=int, default=6)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
args = p.parse_args()


@steptrace.profile(output_dir=args.out)
def train_model(args):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    device = torch.device("cuda", 0)
    cfg = GPT2Config(n_layer=args.n_layer, n_embd=768, n_head=12, n_positions=args.seq)
    model = GPT2LMHeadModel(cfg).to(device)
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=device)
    for step in range(args.steps):
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steptrace.step()
        torch.cuda.synchronize()
        print("step %d %.2f" % (step, (time.perf_counter() - t0) * 1e3), flush=True)
    print("max_memory_allocated %d" % torch.cuda.max_memory_allocated(), flush=True)


if __name__ == "__main__":
    if args.ddp:
        torch.distributed.init_process_group("gloo")
    train_model(args)
    if args.ddp:
        torch.distributed.destroy_process_group()

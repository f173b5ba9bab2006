"""Issue 79's verdict check: one program, run eagerly and with its whole step captured into a
CUDA graph (the same kernels, the host's launches gone), at a batch where the host bounds the
step and at one where the GPU does. The plain PyTorch loop of the CUDA graphs docs' "whole
network capture": an MLP, SGD, a loss read with `.item()` every step, random data. Prints
each step's wall time in nanoGPT's format.

    python3 verdict_mlp.py [--batch B] [--width W] [--layers L] [--steps N] [--graphs]
"""

import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--graphs", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(a.width, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.width, device="cuda")
    y = torch.randint(0, 10, (a.batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = step
    if a.graphs:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step()

        def run():
            g.replay()
            return static_loss

    last = time.perf_counter()
    for i in range(a.steps):
        loss = run().item()
        now = time.perf_counter()
        print("iter %d: loss %.4f, time %.3fms" % (i, loss, (now - last) * 1e3), flush=True)
        last = now
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

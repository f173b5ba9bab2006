"""A training loop with hand-written SGD updates (no torch.optim): capture must find the steps
from backward passes. `--cpu` trains on the CPU (a run with no GPU still yields a trace).

    python3 capture/examples/train_manual.py [--cpu] [--steps 8]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    dev = "cpu" if a.cpu or not torch.cuda.is_available() else "cuda"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    x_cpu, y_cpu = torch.randn(32, 128), torch.randint(0, 10, (32,))
    for step in range(a.steps):
        loss = F.cross_entropy(model(x_cpu.to(dev)), y_cpu.to(dev))
        model.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

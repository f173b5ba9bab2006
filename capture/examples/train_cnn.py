"""A plain ResNet-18 + Adam training loop (no profiler code): `steptrace capture` instruments it.

    python3 capture/examples/train_cnn.py [--steps 8] [--batch 8]
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision

from _reference import Reference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_cpu = torch.randn(a.batch, 3, 64, 64)
    y_cpu = torch.randint(0, 10, (a.batch,))
    ref = Reference("resnet18")
    ref.start()
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        x, y = x_cpu.cuda(), y_cpu.cuda()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        ref.after_optimizer()
        print(f"step {step} loss {loss.item():.4f}")

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x_cpu.cuda()), y_cpu.cuda()).backward()

    ref.finish(model, opt, fwd_bwd)


if __name__ == "__main__":
    main()

"""A small GPT trained with bf16 autocast and AdamW (no profiler code), optionally with
non-reentrant activation checkpointing on every block.

    python3 capture/examples/train_gpt.py [--ckpt] [--steps 8]
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from _reference import Reference


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=512, d=256, heads=4, layers=4, seq=128, ckpt=False):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.ckpt else blk(x)
        return self.head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    vocab, seq = 512, a.seq
    model = GPT(vocab, d=a.d, heads=4, layers=a.layers, seq=seq, ckpt=a.ckpt).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x_cpu = torch.randint(0, vocab, (a.batch, seq))
    y_cpu = torch.randint(0, vocab, (a.batch, seq))
    ref = Reference(("gpt_fp32" if a.fp32 else "gpt_bf16") + ("_ckpt" if a.ckpt else ""))

    def loss_of(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fp32):
            logits = model(x)
            return F.cross_entropy(logits.view(-1, vocab), y.view(-1))

    ref.start()
    for step in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x_cpu.cuda(), y_cpu.cuda())
        loss.backward()
        opt.step()
        ref.after_optimizer()
        print(f"step {step} loss {loss.item():.4f}")

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        loss_of(x_cpu.cuda(), y_cpu.cuda()).backward()

    ref.finish(model, opt, fwd_bwd)


if __name__ == "__main__":
    main()

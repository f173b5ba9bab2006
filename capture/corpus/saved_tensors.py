"""Issue 75: how many tensors `nn.Transformer`'s forward saves for the backward, against the
capture probe's chain of linear+gelu pairs, counted with saved-tensor hooks (CPU, bf16
autocast: no GPU needed). The planner charges a checkpoint's own host work per forward op;
this says whether charging it per saved tensor would raise the figure for Lightning's demo
(docs/planner.md, "Several rounds"). Run anywhere torch and lightning import:

    python3 capture/corpus/saved_tensors.py
"""

import torch
from lightning.pytorch.demos import Transformer


def saved(fn):
    n = [0]

    def pack(t):
        n[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fn()
    return n[0]


def main():
    torch.manual_seed(0)
    m = Transformer(vocab_size=33278)  # the demo's WikiText2 vocabulary
    m.train()
    seq = 35
    x = torch.randint(0, 33278, (4, seq))
    src = m.pos_encoder(m.embedding(x) * m.ninp**0.5).detach().requires_grad_()
    tgt = src.detach().clone().requires_grad_()
    mask = m.generate_square_subsequent_mask(seq)
    print("nn.Transformer forward:", saved(lambda: m.transformer(src, tgt, tgt_mask=mask)), "saved tensors")
    chain = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(12)])
    print("probe chain, 12 linear+gelu pairs (24 ops):", saved(lambda: chain(torch.randn(8, 64, requires_grad=True))),
          "saved tensors")


if __name__ == "__main__":
    main()

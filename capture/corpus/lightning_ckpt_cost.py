"""What checkpointing parts of Lightning's demo Transformer adds to a step, uninstrumented
(issue 43: the sweep of capture/corpus/programs/lightning_transformer.py measured 10.0 and
11.6 ms added by the whole nn.Transformer recomputed, where the planner predicted 15.6 ms; its
two decoder layers alone measured 10.7 against 10.3 predicted). Steps of the variants
interleaved round by round, so that drift hits all alike; the second step after each switch
timed (wall clock to a synchronize: the step is launch-bound); medians.

    python3 capture/corpus/lightning_ckpt_cost.py DATA_DIR [--rounds 40] > out.jsonl

The model is Lightning's `LightningTransformer` (lightning.pytorch.demos, unchanged) on the
WikiText2 stand-in in DATA_DIR/wikitext-2.txt, batch 32, its own `training_step` and SGD, in a
plain loop under bf16 autocast (the Trainer's bf16-mixed), without the Trainer's own loop.
Modules are wrapped as `capture --plan` wraps them (non-reentrant torch.utils.checkpoint).
"""
import argparse
import json
import time
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader

from lightning.pytorch.demos import LightningTransformer, WikiText2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    torch.manual_seed(0)
    ds = WikiText2(data_dir=Path(a.data))
    batch = next(iter(DataLoader(ds, batch_size=32)))
    batch = [t.cuda() for t in batch]
    lm = LightningTransformer(vocab_size=ds.vocab_size).cuda()
    opt = lm.configure_optimizers()
    tr = lm.model.transformer
    groups = {
        "none": [],
        "whole": [tr],
        "decoder_layers": list(tr.decoder.layers),
        "encoder_layers": list(tr.encoder.layers),
    }
    on = set()
    for mods in groups.values():
        for m in mods:
            if getattr(m, "_ck", False):
                continue
            orig = m.forward

            def fwd(*args, _orig=orig, _m=m, **kw):
                if id(_m) not in on or not torch.is_grad_enabled():
                    return _orig(*args, **kw)
                return checkpoint(_orig, *args, use_reentrant=False, **kw)

            m.forward, m._ck = fwd, True

    def step():
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm.training_step(batch, 0)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def use(name):
        on.clear()
        on.update(id(m) for m in groups[name])

    for _ in range(5):
        for name in groups:
            use(name)
            step()
    got = {k: [] for k in groups}
    for _ in range(a.rounds):
        for name in groups:
            use(name)
            step()
            got[name].append(step())
    med = {k: sorted(v)[len(v) // 2] for k, v in got.items()}
    for k, v in med.items():
        print(json.dumps({"variant": k, "step_ms": v * 1e3, "added_ms": (v - med["none"]) * 1e3,
                          "steps": len(got[k])}))


if __name__ == "__main__":
    main()

"""What checkpointing parts of Lightning's demo Transformer adds to a step under `Trainer.fit`,
with nothing of steptrace loaded (issue 43: the field sweep measured 10.0 and 11.6 ms added by
the whole nn.Transformer recomputed under the Trainer, 13.6 and 14.3 ms in a plain loop over the
same LightningModule, `lightning_ckpt_cost.py`, where the planner predicted 15.6 ms).

    python3 capture/corpus/lightning_trainer_ckpt_cost.py DATA_DIR [--rounds 40] > out.jsonl

The program is `programs/lightning_transformer.py`'s: Lightning's `LightningTransformer`
(lightning.pytorch.demos, unchanged) trained by `Trainer.fit` with bf16-mixed, batch 32, on the
WikiText2 stand-in in DATA_DIR/wikitext-2.txt. One callback, of the kind users add, switches
the variant between steps and times them: steps in pairs of one variant (the second of each
pair timed, as capture's timing phase times a plan both ways), variants round by round so that
drift hits all alike; wall time between the ends of consecutive steps, each end synchronised
(the step is launch-bound). Modules are wrapped as `capture --plan` wraps them (non-reentrant
torch.utils.checkpoint while the variant is on); medians.
"""
import argparse
import json
import time
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader

import lightning.pytorch as L
from lightning.pytorch.demos import LightningTransformer, WikiText2


class Variants(L.Callback):
    def __init__(self, groups, rounds, warm_rounds=3):
        self.groups = groups
        self.names = list(groups)
        # Each step's variant: pairs of one variant, round by round.
        self.plan = [n for _ in range(warm_rounds + rounds) for n in self.names for _ in (0, 1)]
        self.warm = warm_rounds * len(self.names) * 2
        self.on = set()
        self.got = {n: [] for n in self.names}
        self.last = None
        self.done = 0  # steps ended (batch_idx starts again each epoch)

    def use(self, i):
        self.on.clear()
        if i < len(self.plan):
            self.on.update(id(m) for m in self.groups[self.plan[i]])

    def on_train_start(self, trainer, pl_module):
        self.use(0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        torch.cuda.synchronize()
        now = time.perf_counter()
        i = self.done  # the step that just ended
        self.done += 1
        # Timed: the second step of a pair (the one before it ran the same way).
        if self.last is not None and i >= self.warm and i < len(self.plan) and i % 2 == 1:
            self.got[self.plan[i]].append(now - self.last)
        self.last = now
        self.use(i + 1)
        if i + 1 >= len(self.plan):
            trainer.should_stop = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    L.seed_everything(0)
    ds = WikiText2(data_dir=Path(a.data))
    loader = DataLoader(ds, batch_size=32, shuffle=True)
    lm = LightningTransformer(vocab_size=ds.vocab_size)
    tr = lm.model.transformer
    groups = {
        "none": [],
        "whole": [tr],
        "decoder_layers": list(tr.decoder.layers),
        "encoder_layers": list(tr.encoder.layers),
    }
    cb = Variants(groups, a.rounds)
    for mods in groups.values():
        for m in mods:
            orig = m.forward

            def fwd(*args, _orig=orig, _m=m, **kw):
                if id(_m) not in cb.on or not torch.is_grad_enabled():
                    return _orig(*args, **kw)
                return checkpoint(_orig, *args, use_reentrant=False, **kw)

            m.forward = fwd
    trainer = L.Trainer(max_steps=len(cb.plan) + 2, precision="bf16-mixed", accelerator="gpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb])
    trainer.fit(lm, loader)
    med = {k: sorted(v)[len(v) // 2] for k, v in cb.got.items() if v}
    for k, v in med.items():
        print(json.dumps({"variant": k, "step_ms": round(v * 1e3, 3), "added_ms": round((v - med["none"]) * 1e3, 3),
                          "steps": len(cb.got[k]), "under": "Trainer.fit"}))


if __name__ == "__main__":
    main()

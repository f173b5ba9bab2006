"""A PyTorch Lightning program as Lightning's own docs write one: the LightningModule is
Lightning's demo `LightningTransformer` (lightning.pytorch.demos.transformer, unchanged: its
`training_step`, SGD from `configure_optimizers`, a DataLoader without workers), trained by
`Trainer.fit` with bf16 mixed precision. Lightning runs `training_step` and `backward` inside
`optimizer.step(closure)`.

The demo's WikiText2 reads ./data/wikitext-2.txt (make_data.py writes a stand-in: the GPU
machine has no network). The one addition is a timing callback of the kind users add, printing
each step's wall time in nanoGPT's format for capture/corpus/progress_timer.py.

    python3 lightning_transformer.py [--max-steps N]
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader

import lightning.pytorch as L
from lightning.pytorch.demos import LightningTransformer, WikiText2


class StepTimer(L.Callback):
    def __init__(self):
        self.last = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.perf_counter()
        if self.last is not None:
            print("iter %d: loss %.4f, time %.2fms" % (trainer.global_step, float(outputs["loss"]), (now - self.last) * 1e3),
                  flush=True)
        self.last = now


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    # Checkpointing written into the program by hand, as a user does it (issue 75's ground
    # truth for a plan that recomputes the decoder layers): each layer's forward under
    # non-reentrant torch.utils.checkpoint.
    p.add_argument("--checkpoint-decoder-layers", action="store_true")
    # The same for the whole nn.Transformer (the plan that recomputes `model.transformer`).
    p.add_argument("--checkpoint-transformer", action="store_true")
    args = p.parse_args()
    L.seed_everything(0)
    dataset = WikiText2()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = LightningTransformer(vocab_size=dataset.vocab_size)
    if args.checkpoint_decoder_layers:
        from torch.utils.checkpoint import checkpoint

        for layer in model.model.transformer.decoder.layers:
            forward = layer.forward
            layer.forward = lambda *a, _f=forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    if args.checkpoint_transformer:
        from torch.utils.checkpoint import checkpoint

        t = model.model.transformer
        forward = t.forward
        t.forward = lambda *a, _f=forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    trainer = L.Trainer(max_steps=args.max_steps, precision="bf16-mixed", accelerator="gpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        callbacks=[StepTimer()])
    trainer.fit(model, loader)
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

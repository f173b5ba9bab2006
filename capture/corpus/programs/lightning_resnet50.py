"""A PyTorch Lightning program as its users write one: a LightningModule around torchvision's
ResNet-50 (no weights), SGD, `Trainer.fit` with 16-bit mixed precision and gradient
accumulation over 2 batches, a DataLoader of random images from pageable memory (no
pin_memory, the DataLoader's default). The one addition is a timing callback printing each
optimizer step's wall time in nanoGPT's format for capture/corpus/progress_timer.py.

    python3 lightning_resnet50.py [--max-steps N]
"""

import argparse
import time

import torch
import torchvision
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as L


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torchvision.models.resnet50(num_classes=100)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class StepTimer(L.Callback):
    def __init__(self):
        self.last = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        now = time.perf_counter()
        if self.last is not None:
            print("iter %d: loss 0, time %.2fms" % (trainer.global_step, (now - self.last) * 1e3), flush=True)
        self.last = now


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=128)
    args = p.parse_args()
    L.seed_everything(0)
    n = args.max_steps * 2 * args.batch_size + 64
    data = TensorDataset(torch.randn(n, 3, args.size, args.size), torch.randint(0, 100, (n,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    trainer = L.Trainer(max_steps=args.max_steps, precision="16-mixed", accelerator="gpu", devices=1,
                        accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[StepTimer()])
    trainer.fit(Classifier(), loader)
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

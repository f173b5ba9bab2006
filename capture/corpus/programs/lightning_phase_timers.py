"""Lightning's own timers beside a capture, the reference for steptrace's wall time by phase
(issue 45: `time_by_phase` against a ground truth from the framework itself).

The program is `lightning_transformer.py`'s (Lightning's demo `LightningTransformer`,
unchanged, trained by `Trainer.fit` with bf16-mixed), with the Trainer's own
`profiler="simple"`: Lightning times every hook it calls with `time.monotonic()`, among them
`[_TrainingEpochLoop].train_dataloader_next`, `[Strategy]SingleDeviceStrategy.batch_to_device`,
`.training_step`, `.backward`, `[LightningModule]LightningTransformer.optimizer_step` (which
runs the two before it inside `optimizer.step(closure)`) and `.optimizer_zero_grad`. One
callback records when each batch starts (`time.time_ns()`, the trace's own clock) so that
each profiled iteration is matched to its batch; after `fit`, the durations of every call and
those starts go to TIMERS_JSON.

    python3 lightning_phase_timers.py TIMERS_JSON [--max-steps N]
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader

import lightning.pytorch as L
from lightning.pytorch.demos import LightningTransformer, WikiText2


class BatchStarts(L.Callback):
    def __init__(self):
        self.starts_ns = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.starts_ns.append(time.time_ns())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("timers")
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    L.seed_everything(0)
    dataset = WikiText2()
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = LightningTransformer(vocab_size=dataset.vocab_size)
    starts = BatchStarts()
    trainer = L.Trainer(max_steps=args.max_steps, precision="bf16-mixed", accelerator="gpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        profiler="simple", callbacks=[starts])
    trainer.fit(model, loader)
    with open(args.timers, "w") as f:
        json.dump({"batch_start_ns": starts.starts_ns,
                   "durations_s": {k: v for k, v in trainer.profiler.recorded_durations.items()}}, f)
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

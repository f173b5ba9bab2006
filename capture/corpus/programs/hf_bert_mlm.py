"""A HuggingFace Trainer program as its users write one: BertForMaskedLM built from its config
(no weights can be downloaded on the GPU machine), random tokens with 15% of positions as
labels, bf16, gradient accumulation 4, `Trainer.train()`. BertForMaskedLM makes its
`CrossEntropyLoss()` inside every forward call, as many HF models do. The one addition is a
timing callback printing each optimizer step's wall time in nanoGPT's format for
capture/corpus/progress_timer.py.

    python3 hf_bert_mlm.py [--max-steps N]
"""

import argparse
import time

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForMaskedLM, Trainer, TrainerCallback, TrainingArguments


class RandomMasked(Dataset):
    def __init__(self, n, seq_len, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)
        self.mask = torch.rand(n, seq_len, generator=g) < 0.15

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        labels = torch.where(self.mask[i], self.ids[i], torch.full_like(self.ids[i], -100))
        return {"input_ids": self.ids[i], "labels": labels}


class StepTimer(TrainerCallback):
    def __init__(self):
        self.last = None

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self.last is not None:
            print("iter %d: loss 0, time %.2fms" % (state.global_step, (now - self.last) * 1e3), flush=True)
        self.last = now


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--n-layer", type=int, default=4)
    args = p.parse_args()
    config = BertConfig(hidden_size=256, num_hidden_layers=args.n_layer, num_attention_heads=4,
                        intermediate_size=1024)
    model = BertForMaskedLM(config)
    data = RandomMasked(args.max_steps * args.batch_size * 4 + 64, args.seq_len, config.vocab_size)
    targs = TrainingArguments(
        output_dir="hf_out",
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=4,
        max_steps=args.max_steps,
        learning_rate=1e-4,
        bf16=True,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=data, callbacks=[StepTimer()])
    trainer.train()
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

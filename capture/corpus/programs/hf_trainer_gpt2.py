"""A HuggingFace Trainer program as its users write one: GPT-2 (124M) built from its config
(no weights can be downloaded on the GPU machine), a dataset of random tokens, bf16, gradient
accumulation 4, `Trainer.train()`. The one addition is a timing callback of the kind users add,
printing each optimizer step's wall time in nanoGPT's format for
capture/corpus/progress_timer.py.

    python3 hf_trainer_gpt2.py [--max-steps N]
"""

import argparse
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, n, seq_len, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


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
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--n-layer", type=int, default=12)
    # HF's own switch (issue 75's ground truth for a plan that recomputes every block).
    p.add_argument("--gradient-checkpointing", action="store_true")
    args = p.parse_args()
    config = GPT2Config(n_positions=1024, n_embd=768, n_layer=args.n_layer, n_head=12)
    model = GPT2LMHeadModel(config)
    data = RandomTokens(args.max_steps * args.batch_size * 4 + 64, args.seq_len, config.vocab_size)
    targs = TrainingArguments(
        output_dir="hf_out",
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=4,
        max_steps=args.max_steps,
        learning_rate=3e-4,
        bf16=True,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        seed=0,
        gradient_checkpointing=args.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if args.gradient_checkpointing else None,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=data, callbacks=[StepTimer()])
    trainer.train()
    print("max_memory_allocated", torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()

"""Record one sample capture plus the ground-truth references the tests check against.

Run on the GPU machine (PyTorch 2.11, CUDA):

    python3 sample_traces/recorder/record.py --model resnet18 --out DIR

It trains a small model for skip_first + wait + warmup + active steps under torch.profiler and
writes, into DIR:

- trace.json.gz          Kineto Chrome trace of the active steps (export_chrome_trace)
- exec_trace.json.gz     Execution Trace (ExecutionTraceObserver) of the same window
- snapshot.pickle.gz     CUDA caching-allocator snapshot with history since program start
- memory_timeline_torch.json.gz  torch's own category timeline (export_memory_timeline)
- reference.json         values measured by torch itself, independent of the trace:
                         per-step torch.cuda.max_memory_allocated, ProfilerStep durations from
                         prof.events(), op counts from key_averages(), FlopCounterMode totals,
                         parameter / gradient / optimizer-state bytes, versions.

This script is not steptrace's capture path (that is `steptrace capture`); it exists so the
fixtures and their references come from one documented command.
"""

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

SKIP_FIRST, WAIT, WARMUP, ACTIVE = 1, 1, 1, 3


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
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, seq, ckpt):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.ckpt else blk(x)
        return self.head(self.ln_f(x))


def build(name):
    """Model, optimizer, CPU input batch, loss function and autocast dtype for one sample."""
    if name == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=10).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(8, 3, 64, 64)
        y = torch.randint(0, 10, (8,))
        return model, opt, x, y, F.cross_entropy, None
    if name in ("gpt_bf16", "gpt_bf16_ckpt"):
        vocab, seq = 512, 128
        model = GPT(vocab, 256, 4, 4, seq, ckpt=name.endswith("ckpt")).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randint(0, vocab, (4, seq))
        y = torch.randint(0, vocab, (4, seq))

        def loss_fn(logits, target):
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1))

        return model, opt, x, y, loss_fn, torch.bfloat16
    raise SystemExit(f"unknown model {name}")


def gzip_file(src, keep=False):
    with open(src, "rb") as f_in, gzip.open(src + ".gz", "wb", compresslevel=9) as f_out:
        shutil.copyfileobj(f_in, f_out)
    if not keep:
        os.remove(src)


def tensor_bytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor) and t.is_cuda)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)

    # History from program start, so parameters and optimizer state are in the snapshot.
    # context="alloc": the default ("all") breaks backward under non-reentrant checkpointing.
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=1_000_000)
    torch.manual_seed(0)
    model, opt, x_cpu, y_cpu, loss_fn, amp = build(args.model)

    def train_step():
        opt.zero_grad(set_to_none=True)
        x = x_cpu.to("cuda")
        y = y_cpu.to("cuda")
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    ref = {
        "model": args.model,
        "command": " ".join([sys.executable] + sys.argv),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "gpu_total_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "host": platform.node(),
        "schedule": {"skip_first": SKIP_FIRST, "wait": WAIT, "warmup": WARMUP, "active": ACTIVE},
        "steps": {},
    }
    ready = {}

    def on_ready(p):
        p.export_chrome_trace(os.path.join(out, "trace.json"))
        torch.cuda.memory._dump_snapshot(os.path.join(out, "snapshot.pickle"))
        steps = {}
        for e in p.events():
            if e.name.startswith("ProfilerStep#"):
                steps[e.name] = e.time_range.end - e.time_range.start
        ref["profiler_step_us"] = steps
        counts = {}
        for e in p.key_averages():
            counts[e.key] = e.count
        ref["key_averages_count"] = dict(sorted(counts.items()))
        try:
            p.export_memory_timeline(os.path.join(out, "memory_timeline_torch.json"), device="cuda:0")
            from torch.profiler import _memory_profiler as mp

            ref["memory_timeline_categories"] = [
                (c.name if c is not None else "UNKNOWN") for c in mp._CATEGORY_TO_INDEX.keys()
            ]
        except Exception as exc:  # recorded, not fatal: the trace is still a sample
            ref["memory_timeline_error"] = repr(exc)
        ready["done"] = True

    et = ExecutionTraceObserver()
    et.register_callback(os.path.join(out, "exec_trace.json"))
    total = SKIP_FIRST + WAIT + WARMUP + ACTIVE
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(skip_first=SKIP_FIRST, wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=on_ready,
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_flops=True,
        with_modules=True,
        execution_trace_observer=et,
    ) as prof:
        for i in range(total):
            # ProfilerStep#i spans from the previous prof.step() to the next one, so the peak
            # between these two lines is the peak inside ProfilerStep#i.
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            loss = train_step()
            loss_val = loss.item()  # synchronises, as a logging training loop would
            ref["steps"][str(i)] = {
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "memory_allocated_end": torch.cuda.memory_allocated(),
                "wall_s": time.perf_counter() - t0,
                "loss": loss_val,
            }
            prof.step()
    et.unregister_callback()
    torch.cuda.memory._record_memory_history(enabled=None)
    assert ready.get("done"), "on_trace_ready did not run"

    ref["param_bytes"] = tensor_bytes(model.parameters())
    ref["grad_bytes"] = tensor_bytes(p.grad for p in model.parameters())
    ref["opt_state_bytes"] = tensor_bytes(v for st in opt.state.values() for v in st.values())
    ref["param_count"] = sum(p.numel() for p in model.parameters())

    # FLOPs of one forward + backward of the same model and batch, by torch's own counter.
    opt.zero_grad(set_to_none=True)
    x, y = x_cpu.to("cuda"), y_cpu.to("cuda")
    with FlopCounterMode(display=False) as fc:
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
    ref["flop_counter"] = {
        "total": fc.get_total_flops(),
        "per_op": {str(k): v for k, v in sorted(fc.get_flop_counts().get("Global", {}).items(), key=lambda kv: str(kv[0]))},
    }

    for name in ("trace.json", "exec_trace.json", "snapshot.pickle", "memory_timeline_torch.json"):
        path = os.path.join(out, name)
        if os.path.exists(path):
            ref.setdefault("raw_sizes", {})[name] = os.path.getsize(path)
            gzip_file(path)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
    print(f"{args.model}: ok", {k: v for k, v in ref.get("raw_sizes", {}).items()})


if __name__ == "__main__":
    main()

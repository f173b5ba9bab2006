"""DistributedDataParallel training of a small MLP, for `torchrun --nproc-per-node 2`.

Uses NCCL with one GPU per rank when there are enough GPUs, else gloo with ranks sharing GPUs.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from _reference import Reference


def main():
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    ngpu = torch.cuda.device_count()
    backend = "nccl" if ngpu >= world else "gloo"
    dev = local % ngpu
    torch.cuda.set_device(dev)
    dist.init_process_group(backend)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x_cpu = torch.randn(32, 256)
    y_cpu = torch.randint(0, 10, (32,))
    ref = Reference("ddp_mlp")
    ref.start()
    for step in range(8):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x_cpu.cuda()), y_cpu.cuda())
        loss.backward()
        opt.step()
        ref.after_optimizer()
    ref.finish(model, opt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Two ranks of DistributedDataParallel training (gloo, CPU) under tb_wur_plugin.torch.watch,
both given the same logdir: `python torch_ddp_worker.py LOGDIR OUT_DIR`.

Each rank trains on its own batches; rank r writes OUT_DIR/rank_r.json, the ratios it
computed from copies of its weights before and after each step (the reference), and
whether its handle was active."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_exit import exit_without_teardown

STEPS = 4
EVERY = 1


def train(rank: int, logdir: str, out_dir: str) -> None:
    from tb_wur_plugin.torch import watch

    dist.init_process_group(
        "gloo", init_method=f"file://{os.path.join(out_dir, 'rendezvous')}",
        rank=rank, world_size=2,
    )
    torch.manual_seed(0)  # the same initial weights on both ranks
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    handle = watch(optimizer, ddp.module, logdir, every=EVERY)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    reference: dict[str, dict[int, float]] = {}
    for step in range(STEPS):
        before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
        x = torch.randn(16, 6, generator=generator)
        ddp(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        for name, p in model.named_parameters():
            delta = np.linalg.norm((p.detach().double() - before[name]).numpy())
            reference.setdefault(name.replace(".", "/"), {})[step] = float(
                delta / np.linalg.norm(before[name].numpy())
            )
    active = handle.active
    handle.remove()
    with open(os.path.join(out_dir, f"rank_{rank}.json"), "w") as f:
        json.dump({"active": active, "steps": handle.steps, "ratios": reference}, f)
    dist.barrier()
    exit_without_teardown()


if __name__ == "__main__":
    logdir, out_dir = sys.argv[1], sys.argv[2]
    mp.spawn(train, args=(logdir, out_dir), nprocs=2, join=True)

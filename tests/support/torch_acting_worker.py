"""Two gloo ranks on CPU train a small MLP under `tb_wur_plugin.torch.watch(..., stop_on=...)`
with a defect seeded at step K, and leave the loop when `handle.should_stop`:
`python torch_acting_worker.py LOGDIR OUT_DIR [SETTING ...]`.

Settings (DDP: each rank its own batches; FSDP2: the same batches):
- `ddp_frozen`, `fsdp2_frozen`: parameter group 1 (the second layer) gets lr 0 at step K,
  stop_on={"not_moving"} (`ddp_frozen` with spectral ratios too);
- `ddp_nan`: rank 0 alone makes one element of its copy of the second layer's weight NaN
  before the update at K (the ranks' weights differ from then on), stop_on={"nan"};
- `fsdp2_nan`: rank 0 makes one element of its shard of that weight NaN, stop_on={"nan"}.

Rank r writes OUT_DIR/SETTING.rank_r.json: the step after which it left the loop (None:
never), `should_stop` after each step, its handle's flags and whether it was active; rank 0
writes the run LOGDIR/SETTING. A rank that left alone would leave the other waiting in its
next collective: the process group's timeout (60 s) turns that into an error."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_exit import exit_without_teardown

K, STEPS, EVERY = 20, 60, 2
SETTINGS = ("ddp_frozen", "ddp_nan", "fsdp2_frozen", "fsdp2_nan")


def mlp() -> torch.nn.Sequential:
    """Six tanh layers (the same weights on every rank)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in [(8, 32), (32, 32), (32, 32), (32, 32), (32, 32), (32, 1)]:
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def _seed_defect(setting: str, rank: int, model: torch.nn.Sequential,
                 optimizer: torch.optim.Optimizer) -> None:
    with torch.no_grad():
        if setting.endswith("_frozen"):
            optimizer.param_groups[1]["lr"] = 0.0
        elif rank == 0:  # _nan: on rank 0 alone
            weight = model[2].weight
            local = weight.to_local() if hasattr(weight, "to_local") else weight
            local[0, 0] = math.nan


def run_setting(setting: str, rank: int, logdir: str, out_dir: str) -> None:
    from torch.distributed.fsdp import fully_shard

    from tb_wur_plugin.torch import watch

    model = mlp()
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    if setting.startswith("fsdp2"):
        for layer in linears:
            fully_shard(layer)
        wrapped = fully_shard(model)
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD([{"params": m.parameters()} for m in linears], lr=0.05)
    stop_on = {"not_moving"} if setting.endswith("_frozen") else {"nan"}
    handle = watch(optimizer, wrapped, os.path.join(logdir, setting), every=EVERY,
                   stop_on=stop_on, spectral=setting == "ddp_frozen")
    seed = 1 if setting.startswith("fsdp2") else 100 + rank
    generator = torch.Generator().manual_seed(seed)
    should_stop, stopped_after = [], None
    for step in range(STEPS):
        x = torch.randn(64, 8, generator=generator)
        torch.nn.functional.mse_loss(wrapped(x), torch.sin(x.sum(1, keepdim=True))).backward()
        if step == K:
            _seed_defect(setting, rank, model, optimizer)
        optimizer.step()
        optimizer.zero_grad()
        should_stop.append(handle.should_stop)
        if handle.should_stop:
            stopped_after = step
            break
    active = handle.active
    handle.remove()
    with open(os.path.join(out_dir, f"{setting}.rank_{rank}.json"), "w") as f:
        json.dump({"stopped_after": stopped_after, "should_stop": should_stop,
                   "active": active,
                   "flags": [dataclasses.asdict(flag) for flag in handle.flags]}, f)
    dist.barrier()


def train(rank: int, logdir: str, out_dir: str, settings: tuple[str, ...]) -> None:
    torch.set_num_threads(1)  # two ranks on a few busy cores: no spinning thread pools
    dist.init_process_group(
        "gloo", init_method=f"file://{os.path.join(out_dir, 'rendezvous')}",
        rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60),
    )
    for setting in settings:
        run_setting(setting, rank, logdir, out_dir)  # ends past a barrier of both ranks
    exit_without_teardown()


if __name__ == "__main__":
    logdir, out_dir = sys.argv[1], sys.argv[2]
    chosen = tuple(sys.argv[3:]) or SETTINGS
    mp.spawn(train, args=(logdir, out_dir, chosen), nprocs=2, join=True)

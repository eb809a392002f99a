"""PyTorch benchmark (issue 25): what `tb_wur_plugin.torch.watch` adds to a training step
of 2 gloo ranks on CPU, without sharding and under DDP, FSDP2 and tensor parallel.

Two ranks (`torch.multiprocessing.spawn`, gloo, a free local port, one thread each) train
an MLP (4 Linear layers WIDTH wide, ReLU between them, AdamW, batch 64, the same batch at
every step). A timed step is the whole training step: forward, backward (DDP's all-reduce,
FSDP2's reduce-scatter), `optimizer.step()` and `zero_grad()`. For each setting, in one
process per rank, each round times every variant over --steps steps, in a random order
that both ranks share (the collectives must meet), after a barrier; rank 0's times are
reported, as the median [min-max] over rounds of the per-round RATIO to the bare step of
the same setting, and the bare step's median in ms.

Settings:
  none   a plain model per rank (no collective at all; watch on rank 1 does nothing)
  ddp    DistributedDataParallel (watch: rank 0 reads its own copy, no collective)
  fsdp2  `fully_shard` on each Linear and on the root (watch: one all_reduce per logged step)
  tp     ColwiseParallel / RowwiseParallel pairs over a 1-D mesh of the 2 ranks (the same)

Variants:
  bare, again   no watch (the second timing is the noise floor)
  logged step   watch(optimizer, model, logdir, every=1) on every rank: every step logged
  other step    watch(..., every=10**9) after its logged step 0: no step logged
  all_reduce    no training step: one `dist.all_reduce` of 4 + 2 x (number of parameters)
                float64, the size of watch's collective on a sharded logged step (in ms)

    .venv/bin/python benchmarks/torch_sharded.py [--repeats 15] [--steps 20]
    .venv/bin/python benchmarks/torch_sharded.py --smoke   # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tb_wur_plugin.torch import watch

SETTINGS = ("none", "ddp", "fsdp2", "tp")
VARIANTS = ("bare", "again", "logged step", "other step", "all_reduce")
WORLD = 2
BATCH = 64


def mlp(width: int) -> torch.nn.Sequential:
    """4 Linear(width, width) layers, ReLU between them; the same weights on every rank."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for i in range(4):
        layers.append(torch.nn.Linear(width, width))
        if i < 3:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def shard(setting: str, model: torch.nn.Sequential) -> torch.nn.Module:
    """`model` as `setting` runs it over the 2 ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module,
    )

    if setting == "none":
        return model
    if setting == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    if setting == "fsdp2":
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(model)
    if setting == "tp":  # layers 0 and 4 split by rows, 2 and 6 by columns
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel(),
                "4": ColwiseParallel(), "6": RowwiseParallel()}
        return parallelize_module(model, init_device_mesh("cpu", (WORLD,)), plan)
    raise ValueError(f"unknown setting {setting!r}")


def time_setting(setting: str, rank: int, logdir: str, rounds: int, steps: int,
                 width: int) -> dict[str, list[float]]:
    """{variant: seconds per step, one per round} on this rank."""
    model = shard(setting, mlp(width))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, width, generator=torch.Generator().manual_seed(1))

    def step() -> None:
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    for _ in range(3):  # AdamW's state, FSDP2's lazy init, warm caches
        step()
    sums = torch.zeros(4 + 2 * len(list(model.parameters())), dtype=torch.float64)
    state: dict[str, object] = {}
    runs = iter(range(10**9))

    def start(every: int) -> Callable[[], None]:
        def setup() -> None:  # on every rank, the same arguments (rank 0 writes)
            run_dir = os.path.join(logdir, setting, f"run{next(runs)}")
            state["handle"] = watch(optimizer, model, run_dir, every=every, first_step=0)
            if every > 1:
                step()  # its logged step 0, before the timing
        return setup

    def stop() -> None:
        state["handle"].remove()

    nothing = lambda: None  # noqa: E731
    table = {"bare": (nothing, nothing, step), "again": (nothing, nothing, step),
             "logged step": (start(1), stop, step), "other step": (start(10**9), stop, step),
             "all_reduce": (nothing, nothing, lambda: dist.all_reduce(sums))}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    order_rng = random.Random(0)  # the same order on both ranks
    for _ in range(rounds):
        order = list(VARIANTS)
        order_rng.shuffle(order)
        for variant in order:
            setup, teardown, timed = table[variant]
            setup()
            dist.barrier()
            begin = time.perf_counter()
            for _ in range(steps):
                timed()
            times[variant].append((time.perf_counter() - begin) / steps)
            teardown()
    dist.barrier()
    return times


def report(results: dict[str, dict[str, list[float]]], rounds: int, steps: int,
           width: int) -> None:
    """The table, on rank 0."""
    weights = sum(p.numel() for p in mlp(width).parameters())
    print(f"{WORLD} gloo ranks on CPU, 1 thread each; MLP 4 x Linear({width}, {width}) "
          f"({weights / 1e6:.2f} M weights), AdamW, batch {BATCH}; {rounds} rounds x "
          f"{steps} steps; rank 0's times; ratio to the same setting's bare step: "
          "median [min-max]")
    header = (f"{'setting':<8} {'bare ms':>8} {'again':>19} {'logged step':>19} "
              f"{'other step':>19} {'logged-bare ms':>15} {'all_reduce ms':>14}")
    print(header)
    for setting, times in results.items():
        bare = times["bare"]
        cells = []
        for variant in ("again", "logged step", "other step"):
            ratios = [v / b for v, b in zip(times[variant], bare)]
            cells.append(f"{statistics.median(ratios):.3f} "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        extra = 1e3 * (statistics.median(times["logged step"]) - statistics.median(bare))
        collective = 1e3 * statistics.median(times["all_reduce"])
        print(f"{setting:<8} {1e3 * statistics.median(bare):>8.2f} "
              + " ".join(f"{c:>19}" for c in cells) + f" {extra:>15.2f} {collective:>14.3f}")


def rank_main(rank: int, port: int, settings: tuple[str, ...], rounds: int, steps: int,
              width: int, logdir: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=300))
    try:
        results = {s: time_setting(s, rank, logdir, rounds, steps, width) for s in settings}
        if rank == 0:
            report(results, rounds, steps, width)
        # both ranks leave together: a rank that tears its gloo group down while the other
        # still uses its own can abort the other at exit ("terminate called without an
        # active exception", seen under load)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # done and printed: end the rank without interpreter finalization, in which PyTorch's
    # gloo teardown still sometimes aborts (SIGABRT, seen under load after the barrier),
    # which mp.spawn reports as a failed rank (the tests' ranks end the same way:
    # tests/support/rank_exit.py)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds per setting")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--smoke", action="store_true", help="width 32, 2 rounds x 2 steps")
    args = parser.parse_args()
    rounds, steps, width = (2, 2, 32) if args.smoke else (args.repeats, args.steps, args.width)
    with tempfile.TemporaryDirectory() as logdir:
        mp.spawn(rank_main, args=(free_port(), tuple(args.settings), rounds, steps, width,
                                  logdir), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()

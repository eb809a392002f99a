"""Two gloo ranks on CPU training one small MLP under each sharding that
`tb_wur_plugin.torch.watch` supports, each setting a run of one logdir:
`python torch_sharded_worker.py LOGDIR OUT_DIR`.

The MLP's shards are uneven (7 rows over 2 ranks, a bias of 1 element) and its last bias
starts at 0 (a ratio of +inf at step 0, whose norm is re-taken exactly). Around each update
every rank gathers the full parameters (`full_tensor()`, `summon_full_params`) and rank 0
computes the reference from them in numpy: the ratios in float64, the histogram counts of
the elementwise ratios in the parameters' float32 (as the plugin buckets them). Rank r
writes OUT_DIR/SETTING.rank_r.json: its handle's `active` and `steps`, and on rank 0 the
reference ratios, histograms, full shapes, skipped steps and the warnings `watch` gave."""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_exit import exit_without_teardown

STEPS = 4
EVERY = {"fsdp1_flat": 2}  # else 1
SETTINGS = ("fsdp2", "fsdp1_orig", "fsdp1_flat", "tp", "fsdp_tp", "hsdp", "ddp",
            "scaler_agreed", "scaler_disagree")
SCALER_INF_AT = 1  # the step whose gradient rank 1 (alone) makes infinite
TAGS = ["0/weight", "0/bias", "2/weight", "2/bias", "4/weight", "4/bias"]


def mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3),
                                torch.nn.Tanh(), torch.nn.Linear(3, 1))
    with torch.no_grad():
        model[4].bias.zero_()
    return model


def shard(setting: str, model: torch.nn.Sequential) -> torch.nn.Module:
    """`model` sharded as `setting` says (2 ranks)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module,
    )

    plan = {"0": ColwiseParallel(use_local_output=False), "2": RowwiseParallel()}
    if setting in ("fsdp2", "scaler_agreed"):
        fully_shard(model[0])
        fully_shard(model[2])
        return fully_shard(model)  # the root holds the last layer
    if setting in ("fsdp1_orig", "fsdp1_flat", "scaler_disagree"):
        policy = functools.partial(
            lambda_auto_wrap_policy, lambda_fn=lambda m: m is model[0] or m is model[2])
        return FullyShardedDataParallel(
            model, auto_wrap_policy=policy, device_id=torch.device("cpu"),
            use_orig_params=setting == "fsdp1_orig",  # flat: plain tensors, as their grads
        )
    if setting == "tp":  # the last layer stays a plain tensor on both ranks
        return parallelize_module(model, init_device_mesh("cpu", (2,)), plan)
    if setting == "fsdp_tp":  # a 1 × 2 mesh: FSDP over "dp", tensor parallel over "tp"
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, mesh["tp"], plan)
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh["dp"])
        return fully_shard(model, mesh=mesh["dp"])
    if setting == "hsdp":  # 2 replicas × shards of 1: every rank holds a full copy
        mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard"))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    if setting == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    raise ValueError(f"unknown setting {setting!r}")


def full_parameters(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """{tag: the full parameter} (a collective under sharding), in float32."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    def tag(name: str) -> str:
        name = name.removeprefix("module.")
        return "/".join(s for s in name.split(".") if s != "_fsdp_wrapped_module")

    if isinstance(model, FullyShardedDataParallel):
        with FullyShardedDataParallel.summon_full_params(model):
            return {tag(n): p.detach().clone().numpy() for n, p in model.named_parameters()}
    out = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        out[tag(name)] = full.detach().clone().numpy()
    return out


def _local_gradient(parameter: torch.Tensor) -> torch.Tensor:
    grad = parameter.grad
    return grad.to_local() if hasattr(grad, "to_local") else grad


def run_setting(setting: str, rank: int, logdir: str, out_dir: str) -> None:
    from tb_wur_plugin.arrays import numpy_math
    from tb_wur_plugin.torch import watch

    model = shard(setting, mlp())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scaler = None
    if setting == "scaler_agreed":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        scaler = ShardedGradScaler("cpu", init_scale=2.0**8)
    elif setting == "scaler_disagree":
        # A plain GradScaler over FSDP1's flat (plain tensor) gradients checks only this
        # rank's shards: rank 1 skips SCALER_INF_AT while rank 0 steps (a real split).
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    every = EVERY.get(setting, 1)
    refused = None
    if setting == "fsdp2":  # spectral ratios of sharded matrices: refused, on every rank
        try:
            watch(optimizer, model, os.path.join(logdir, "spectral"), spectral=True)
        except ValueError as error:
            refused = str(error)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = watch(optimizer, model, os.path.join(logdir, setting), every=every,
                       histograms=True)
        generator = torch.Generator().manual_seed(1)  # the same batches on both ranks
        ratios: dict[str, dict[int, float]] = {}
        hists: dict[str, dict[int, list[int]]] = {}
        shapes: dict[str, list[int]] = {}
        skipped = []
        for step in range(STEPS):
            x = torch.randn(6, 5, generator=generator)
            loss = model(x).pow(2).mean()
            (scaler.scale(loss) if scaler else loss).backward()
            before = full_parameters(model) if step % every == 0 else None
            if scaler is not None:
                if step == SCALER_INF_AT and rank == 1:
                    next(g for g in map(_local_gradient, model.parameters())
                         if g is not None and g.numel()).view(-1)[0] = math.inf
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()
            if before is None:
                continue
            after = full_parameters(model)
            if all(np.array_equal(before[t], after[t]) for t in before):
                skipped.append(step)
            for tag, old in before.items():
                new = after[tag]
                update = np.linalg.norm(new.astype(np.float64) - old.astype(np.float64))
                weight = np.linalg.norm(old.astype(np.float64))
                with np.errstate(divide="ignore"):
                    ratios.setdefault(tag, {})[step] = float(update / weight) if update else 0.0
                change = new - old
                with np.errstate(divide="ignore", invalid="ignore"):
                    elementwise = np.abs(np.where(change == 0, 0, change / old))
                hists.setdefault(tag, {})[step] = numpy_math.bucket_counts(elementwise).tolist()
                shapes[tag] = list(old.shape)
        active = handle.active
        handle.remove()
    result = {"active": active, "steps": handle.steps, "spectral_refused": refused}
    if rank == 0:
        result.update(ratios=ratios, hists=hists, shapes=shapes, skipped=skipped,
                      warnings=[str(w.message) for w in caught  # PyTorch's own left out
                                if f"{os.sep}torch{os.sep}" not in w.filename])
    with open(os.path.join(out_dir, f"{setting}.rank_{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()


def train(rank: int, logdir: str, out_dir: str, settings: tuple[str, ...]) -> None:
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

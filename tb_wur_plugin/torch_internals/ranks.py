"""What the ranks of a distributed PyTorch run agree on at a logged step, so that every rank
judges the same ratios and stops at the same step.

`step_fields` and `ranks_if_same_step` check, inside a logged step's one collective, that
every rank logs the same step (a rank that counted other steps would otherwise wait forever
on, or pair up with, another step's collective). `share_from_rank_0` brings rank 0's ratios
of an unsharded (e.g. DistributedDataParallel) model to every rank in one `all_reduce`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["STEP_FIELDS", "step_fields", "ranks_if_same_step", "share_from_rank_0"]

# A step is compared across ranks by this residue (its square, summed over ranks, is exact in
# float64).
_STEP_MODULUS = 65521
# How many numbers `step_fields` gives.
STEP_FIELDS = 3


def step_fields(step: int) -> list[float]:
    """[residue, residue², 1.0] of `step`: summed over the ranks (in a collective the step
    takes anyway), `ranks_if_same_step` tells whether every rank logged `step`."""
    residue = float(step % _STEP_MODULUS)
    return [residue, residue * residue, 1.0]


def ranks_if_same_step(summed: np.ndarray, step: int) -> int:
    """The number of ranks, from `step_fields` summed over the ranks.

    Raises:
      RuntimeError: the ranks are not logging the same step (the residues' variance is not 0).
    """
    residues, squares, ranks = (float(x) for x in summed[:STEP_FIELDS])
    if squares * ranks != residues * residues:
        raise RuntimeError(
            f"tb_wur_plugin.torch.watch: the ranks are not logging the same step (this "
            f"rank: step {step}): every rank must call watch alike and count the same "
            "optimizer.step() calls"
        )
    return int(ranks)


def share_from_rank_0(step: int, values: np.ndarray | None, size: int,
                      device: torch.device) -> np.ndarray:
    """Rank 0's `values` (float64[size]: ratios, NaN and +inf included) on every rank, in one
    `all_reduce(SUM)` on `device` (the ranks other than 0 add zeros, which leave every
    float64 as it is), checking that every rank logs `step`.

    Every rank calls this at the same logged steps with the same `size`.

    Args:
      step: the step being logged.
      values: rank 0's numbers (float64[size]); None on the other ranks.
      size: how many numbers.
      device: where the collective runs (the model's parameters' device: CPU under gloo,
        CUDA under NCCL).

    Returns:
      float64[size]: rank 0's values.

    Raises:
      RuntimeError: the ranks are not logging the same step.
    """
    mine = np.zeros(STEP_FIELDS + size)
    mine[:STEP_FIELDS] = step_fields(step)
    if values is not None:
        mine[STEP_FIELDS:] = values
    vector = torch.from_numpy(mine).to(device)
    dist.all_reduce(vector)
    summed = vector.cpu().numpy()
    ranks_if_same_step(summed, step)
    return summed[STEP_FIELDS:].copy()

"""PyTorch's fused list ops (`torch._foreach_*`, semi-private: undocumented, used by its own
optimizers) that the PyTorch math uses, in one place: one kernel launch for a list of
tensors (on a GPU, one launch instead of one per tensor; on the CPU, one Python call).

`NAMES` lists the ops used; `tests/frameworks/test_torch_foreach.py` fails naming the one a
PyTorch release removes or changes."""

from __future__ import annotations

import torch

NAMES = ("_foreach_norm", "_foreach_sub_", "_foreach_copy_", "_foreach_mul")


def norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The 2-norm of each tensor (all its elements, whatever its shape), a 0-d tensor each,
    in the tensor's dtype, on its device.

    Args:
      tensors: floating-point tensors, all on one device.
    """
    return list(torch._foreach_norm(tensors))


def sub_(targets: list[torch.Tensor], others: list[torch.Tensor]) -> None:
    """targets[i] -= others[i], in place, for every i.

    Args:
      targets, others: lists of equal length, tensors pairwise of one shape and dtype, all on
        one device.
    """
    torch._foreach_sub_(targets, others)


def copy_(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """targets[i] := sources[i] (converted to the target's dtype), in place, for every i.

    Args:
      targets, sources: lists of equal length (possibly empty), tensors pairwise of one
        shape.
    """
    if targets:
        torch._foreach_copy_(targets, sources)


def copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """A new copy of each tensor (same dtype, shape and device).

    Args:
      tensors: tensors of one dtype (float32 or float64), all on one device.
    """
    return list(torch._foreach_mul(tensors, 1.0))

"""Exact weight-update ratios of sharded PyTorch parameters, for `tb_wur_plugin.torch.watch`.

Under FSDP2 (`fully_shard`: DTensor parameters), DTensor tensor parallel
(`parallelize_module`), their 2-D combinations (FSDP × TP, HSDP) and FSDP1
(`FullyShardedDataParallel`, flat parameters, either `use_orig_params`) each rank holds parts
of each parameter. `pieces` finds, on every rank, the same list of original parameters
(tag, global shape, dtype) with this rank's part of each and whether that part counts: a part
that other ranks hold too (a `Replicate` mesh dimension, HSDP's replicas, a plain tensor
every rank holds) counts on one of them only, so that the parts that count cover every
element exactly once. `reduce_norms` then sums the counted parts' float64 sums of squares
(and histogram counts) over all ranks in one `all_reduce(SUM)`, re-taking exactly, with two
more collectives, the norms whose reduced sum may have overflowed or underflowed (decided
from the reduced sums, so on every rank alike).

Private PyTorch API, read only and only here: the attributes of FSDP1's `FlatParameter`
(`_fqns`, `_shapes`, `_param_infos`, `_shard_param_infos` and `_params`), and
`FullyShardedDataParallel._flat_param` and `._handle` (`.uses_sharded_strategy`,
`.process_group`: the ranks that hold one copy). `tests/frameworks/test_torch_sharded.py`
exercises all of them against the installed PyTorch.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays import torch_math
from tb_wur_plugin.torch_internals.ranks import STEP_FIELDS, ranks_if_same_step, step_fields

__all__ = [
    "Piece", "Reduced", "is_sharded", "pieces", "reduce_norms", "agreed_steps", "tag_and_dtype",
    "wrapper_prefix",
]

# The attribute names of the wrappers whose segments tags drop anywhere in a name.
_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module", "_orig_mod")


class Reduced(NamedTuple):
    """The full parameters' norms (and histogram counts) of a logged step."""

    weight_norms: np.ndarray  # float64[n]
    update_norms: np.ndarray  # float64[n]
    counts: np.ndarray | None  # int64[n, NUM_BUCKETS]
    all_skipped: bool  # every rank's GradScaler skipped the update


class Piece(NamedTuple):
    """One original parameter, as seen from this rank."""

    tag: str
    tensor: torch.Tensor  # this rank's part (detached; possibly empty)
    shape: tuple[int, ...]  # the full parameter's shape
    dtype: str
    counted: bool  # whether this rank's part counts in the sums (else another rank's does)


# --- tags ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def tag_and_dtype(name: str, dtype: torch.dtype) -> tuple[str, str]:
    """The tag of the parameter `name` (FSDP1's `_fsdp_wrapped_module` and torch.compile's
    `_orig_mod` segments dropped, '.' → '/') and the name of `dtype`.

    Raises:
      ValueError: the tag is in the plugin's reserved namespace.
    """
    segments = [s for s in name.split(".") if s not in _WRAPPER_SEGMENTS]
    tag = "/".join(segments)
    if metadata.is_reserved_tag(tag):
        raise ValueError(
            f"parameter {name!r} has the tag {tag!r}, in the namespace "
            f"{metadata.RESERVED_TAG_PREFIX!r} reserved for the plugin's own series; "
            "rename the submodule"
        )
    return tag, str(dtype).removeprefix("torch.")


def wrapper_prefix(model: torch.nn.Module) -> str:
    """The leading segments of `model.named_parameters()`' names that DDP (`module.`) and
    torch.compile (`_orig_mod.`) wrapped around the user's model: tags drop them."""
    prefix = ""
    ddp = torch.nn.parallel.DistributedDataParallel
    compiled = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    compiled = getattr(compiled, "OptimizedModule", ())
    while True:
        if isinstance(model, ddp):
            prefix, model = prefix + "module.", model.module
        elif compiled and isinstance(model, compiled):
            prefix, model = prefix + "_orig_mod.", model._orig_mod
        else:
            return prefix


# --- which parameters are sharded, and how -----------------------------------------------


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without distributed support
        return None
    return DTensor


def _fsdp1_type():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:
        return None
    return FullyShardedDataParallel


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether any parameter of `model` is a DTensor or any submodule is an FSDP1
    `FullyShardedDataParallel`: then every rank takes part in each logged step."""
    dtensor, fsdp1 = _dtensor_type(), _fsdp1_type()
    if fsdp1 is not None and any(isinstance(m, fsdp1) for m in model.modules()):
        return True
    return dtensor is not None and any(isinstance(p, dtensor) for p in model.parameters())


def _holds_rank_0(ranks) -> bool:
    """Whether the group of `ranks` is, of the groups of ranks that each hold one copy of a
    parameter, the one that counts: the one with rank 0."""
    return 0 in ranks


def _first_copy_fsdp1(fsdp_module) -> bool:
    """Whether this rank's shard of `fsdp_module`'s flat parameter counts: its shard group
    (the ranks that together hold one copy; HSDP replicates it over several) holds rank 0;
    under NO_SHARD (every rank a full copy) only rank 0's counts."""
    handle = fsdp_module._handle
    if not handle.uses_sharded_strategy:
        return dist.get_rank() == 0
    return _holds_rank_0(dist.get_process_group_ranks(handle.process_group))


def _counted_dtensor(parameter, name: str) -> bool:
    """Whether this rank's local shard of the DTensor `parameter` counts: its coordinate is
    0 on every mesh dimension the parameter is replicated over, and its mesh, where it
    spans only part of the ranks (FSDP × TP: a parameter only FSDP shards lives on the
    data-parallel sub-mesh, a copy on each), is the one that holds rank 0.

    Raises:
      ValueError: a `Partial` placement.
    """
    mesh = parameter.device_mesh
    coordinate = mesh.get_coordinate()
    counted = _holds_rank_0(mesh.mesh.reshape(-1).tolist())
    for dim, placement in enumerate(parameter.placements):
        if placement.is_partial():
            raise ValueError(
                f"parameter {name!r} has a Partial placement: its local tensors are partial "
                "sums, whose norms do not add up; watch needs Shard or Replicate placements"
            )
        if placement.is_replicate() and coordinate[dim] != 0:
            counted = False
    return counted


def _fsdp1_metadata(model: torch.nn.Module):
    """{id(flat parameter): FSDP module} and {id(original parameter): (flat parameter,
    index, FSDP module)} (`use_orig_params=True`) of the FSDP1 modules in `model`."""
    flats, originals = {}, {}
    fsdp1 = _fsdp1_type()
    if fsdp1 is None:
        return flats, originals
    for module in model.modules():
        if not isinstance(module, fsdp1):
            continue
        flat = module._flat_param
        if flat is None:
            continue
        flats[id(flat)] = module
        for index, original in enumerate(flat._params or ()):
            originals[id(original)] = (flat, index, module)
    return flats, originals


def pieces(model: torch.nn.Module) -> list[Piece]:
    """The parameters of `model` that require grad, as this rank sees them: the same
    tags, shapes and order on every rank; FSDP1 flat parameters split into their original
    parameters (in model order).

    Raises:
      ValueError: a tag in the reserved namespace; a DTensor with a `Partial` placement.
    """
    prefix = wrapper_prefix(model)
    flats, originals = _fsdp1_metadata(model)
    dtensor = _dtensor_type()
    rank = dist.get_rank()
    found: list[tuple[str, Piece]] = []  # (module path, piece)
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        name = name.removeprefix(prefix)
        if id(parameter) in flats:
            found.extend(_flat_pieces(name, parameter, flats[id(parameter)]))
            continue
        tag, dtype = tag_and_dtype(name, parameter.dtype)
        if id(parameter) in originals:  # FSDP1 use_orig_params=True: a 1-D view or empty
            flat, index, module = originals[id(parameter)]
            piece = Piece(tag, parameter.detach(), tuple(flat._shapes[index]), dtype,
                          _first_copy_fsdp1(module))
        elif dtensor is not None and isinstance(parameter, dtensor):
            piece = Piece(tag, parameter.detach().to_local(), tuple(parameter.shape), dtype,
                          _counted_dtensor(parameter, name))
        else:  # a plain tensor every rank holds alike: rank 0's counts
            piece = Piece(tag, parameter.detach(), tuple(parameter.shape), dtype, rank == 0)
        found.append((tag.rpartition("/")[0], piece))
    if not flats:
        return [p for _, p in found]
    order = {}  # module path (tag style) -> position in model order
    for module_name, _ in model.named_modules():
        order.setdefault(tag_and_dtype(module_name.removeprefix(prefix), torch.float32)[0],
                         len(order))
    ranked = sorted(range(len(found)), key=lambda i: (order.get(found[i][0], len(order)), i))
    return [found[i][1] for i in ranked]


def _flat_pieces(name: str, flat, module) -> list[tuple[str, Piece]]:
    """The original parameters of FSDP1's flat parameter `flat` (`use_orig_params=False`),
    each with this rank's part of it: a view of the local shard, from FSDP's own shard
    metadata (`_shard_param_infos`), empty where the parameter is not in this shard."""
    base = name.removesuffix("_flat_param").rstrip(".")
    counted = _first_copy_fsdp1(module)
    local = flat.detach()
    out = []
    for fqn, shape, info, param_info in zip(
        flat._fqns, flat._shapes, flat._shard_param_infos, flat._param_infos
    ):
        tag, dtype = tag_and_dtype(_join(base, fqn), flat.dtype)
        if info.in_shard:
            part = local[info.offset_in_shard:info.offset_in_shard + info.numel_in_shard]
        else:
            part = local[:0]
        module_path = tag_and_dtype(_join(base, param_info.module_name), flat.dtype)[0]
        out.append((module_path, Piece(tag, part, tuple(shape), dtype, counted)))
    return out


def _join(prefix: str, name: str) -> str:
    return ".".join(part for part in (prefix, name) if part)


# --- the collectives -------------------------------------------------------------------------


def agreed_steps(first_step: int, explicit: bool, every: int, device: torch.device) -> int:
    """The first step every rank counts from (one `all_reduce(MAX)`): the ranks' own when
    they agree, the largest restored count when `first_step` was taken from the optimizers'
    state (a rank whose shard holds no state counts 0).

    Raises:
      ValueError: the ranks were given different `every` or `first_step` values.
    """
    mine = torch.tensor([first_step, -first_step, every, -every], dtype=torch.float64,
                        device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    high, low, every_high, every_low = mine.tolist()
    if every_high != -every_low:
        raise ValueError(
            f"the ranks call watch with different every values ({-every_low:g} to "
            f"{every_high:g}): every rank must log the same steps"
        )
    if explicit and high != -low:
        raise ValueError(
            f"the ranks call watch with different first_step values ({-low:g} to "
            f"{high:g}): every rank must count the same steps"
        )
    return int(high)


def reduce_norms(
    step: int,
    entries: list[Piece],
    weight_sums: torch.Tensor,
    update_sums: torch.Tensor,
    counts: torch.Tensor | None,
    skipped: bool,
    weight_of: Callable[[int], torch.Tensor],
    update_of: Callable[[int], torch.Tensor],
) -> Reduced:
    """The full parameters' ‖w‖ and ‖Δw‖ (and histogram counts), from every rank's sums.

    Every rank calls this on the same steps with the same `entries` (tags and order).

    Args:
      step: the step being logged (compared across ranks).
      entries: `pieces(model)` of this step.
      weight_sums, update_sums: float64[n] on one device: Σw², ΣΔw² of this rank's parts
        (0 for a part that does not count).
      counts: int64[n, NUM_BUCKETS] of this rank's counted parts, or None (no histograms).
      skipped: this rank's `GradScaler` skipped the update (its ΔW is 0).
      weight_of, update_of: i → this rank's part of w and of ±Δw of entry i (called only
        where a reduced sum may have overflowed or underflowed, on every rank alike).

    Returns:
      A `Reduced`: the norms, the counts (None without histograms), and whether every
      rank skipped.

    Raises:
      RuntimeError: the ranks are not logging the same step (their step counts differ).

    Warns:
      UserWarning: (on rank 0) some ranks' `GradScaler` skipped the update and others did
        not: the ratios are those of the parts that moved (use FSDP's `ShardedGradScaler`,
        which agrees on skipping across ranks).
    """
    n = len(entries)
    head = torch.tensor([float(skipped), *step_fields(step)], dtype=torch.float64,
                        device=weight_sums.device)
    parts = [head, weight_sums, update_sums]
    if counts is not None:
        parts.append(counts.to(torch.float64).reshape(-1))
    vector = torch.cat(parts)
    dist.all_reduce(vector)
    reduced = vector.cpu().numpy()
    skips = reduced[0]
    count = ranks_if_same_step(reduced[1:], step)
    if 0 < skips < count and dist.get_rank() == 0:
        warnings.warn(
            f"tb_wur_plugin.torch.watch: at step {step} the GradScaler skipped the update on "
            f"{int(skips)} of {count} ranks and not on the others, so the shards moved "
            "apart; the logged ratios are those of the shards that moved. Use "
            "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler, which agrees on "
            "skipping across ranks",
            UserWarning,
            stacklevel=4,
        )
    start = 1 + STEP_FIELDS  # after the head
    weight = reduced[start:start + n].copy()
    update = reduced[start + n:start + 2 * n].copy()
    both = np.concatenate([weight, update])
    unsafe = np.flatnonzero(torch_math.needs_exact_norm(both)).tolist()
    if unsafe:
        exact = _exact_norms(
            [weight_of(i) if i < n else update_of(i - n) for i in unsafe],
            [entries[i % n].counted for i in unsafe],
            weight_sums.device,
        )
        both[unsafe] = np.square(exact)
    norms = np.sqrt(both)
    hists = None
    if counts is not None:
        hists = np.rint(reduced[start + 2 * n:]).astype(np.int64).reshape(n, metadata.NUM_BUCKETS)
    return Reduced(norms[:n], norms[n:], hists, bool(skips == count))


def _exact_norms(tensors: list[torch.Tensor], counted: list[bool], device) -> np.ndarray:
    """‖x‖ of each full tensor whose parts are `tensors` (those not counted left out), in
    float64 scaled by the global max|x| (two collectives): no overflow, no underflow; NaN
    where a part is NaN, +inf where one is infinite."""
    tops = torch.zeros(len(tensors), dtype=torch.float64, device=device)
    for k, (tensor, keep) in enumerate(zip(tensors, counted)):
        if keep and tensor.numel():
            tops[k] = tensor.abs().max().to(torch.float64)
    has_nan = torch.tensor([float(torch.isnan(t).any()) if keep and t.numel() else 0.0
                            for t, keep in zip(tensors, counted)],
                           dtype=torch.float64, device=device)
    tops = torch.where(torch.isnan(tops), math.inf, tops)  # NaN is carried by has_nan
    both = torch.cat([tops, has_nan])
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    tops, has_nan = both[:len(tensors)], both[len(tensors):]
    sums = torch.zeros(len(tensors), dtype=torch.float64, device=device)
    for k, (tensor, keep) in enumerate(zip(tensors, counted)):
        top = tops[k]
        if keep and tensor.numel() and 0 < top < math.inf:
            sums[k] = (tensor.to(torch.float64) / top).square().sum()
    dist.all_reduce(sums)
    tops, sums, has_nan = tops.cpu().numpy(), sums.cpu().numpy(), has_nan.cpu().numpy()
    out = np.where(np.isfinite(tops) & (tops > 0), tops * np.sqrt(sums), tops)
    return np.where(has_nan > 0, math.nan, out)

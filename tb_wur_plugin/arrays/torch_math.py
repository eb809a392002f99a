"""The array math of PyTorch tensors that `tb_wur_plugin.torch` and the Keras PyTorch backend
share: work dtypes, copies (and snapshots that reuse an earlier one's tensors), norms in
float64 without overflow, and histogram bucketing on the protocol's edges, on the tensors'
device. The fused list ops are `torch_internals.foreach`'s. Imports no TensorFlow module."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays.stacking import stacks_by_shape
from tb_wur_plugin.torch_internals import foreach

# Tensors are reduced in chunks of this many elements: norms of the chunks in the tensor's
# precision, their squares summed in float64 (`sums_of_squares`). At most PyTorch's grain
# size (at::internal::GRAIN_SIZE, 32,768): on the CPU, rows that long are reduced with far
# less float32 rounding than longer ones, and no slower (benchmarks/RESULTS.md).
CHUNK_ELEMENTS = 1 << 15

# On a GPU the chunks are split views of the tensors, one fused op for all of them
# (`_chunks`): fewer, larger ones.
GPU_CHUNK_ELEMENTS = 1 << 16

# On the CPU, a tensor larger than this is subtracted and reduced this many elements at a
# time (`subtract_with_sums`), so that each block is read from memory once for its norms
# before and after the subtraction (benchmarks/RESULTS.md).
UPDATE_BLOCK_ELEMENTS = 1 << 17


# A snapshot stacks the small copies of a shape where there are at least this many (fewer:
# one reduction a stack saves less than its few more ops cost), of at most
# MAX_STACKED_ELEMENTS elements each (a stack's rows are reduced a chunk at a time).
MIN_STACK_MEMBERS = 8
MAX_STACKED_ELEMENTS = 1 << 16


# Histogram temporaries are bounded by bucketing this many elements at a time (one chunk's
# temporaries, reused by the next chunk). On the CPU a large tensor's chunks are smaller:
# the chunk's chain of ops (five arrays of it, 1.25 MB) then stays in a core's second-level
# cache where it holds 2 MB; small tensors are bucketed together in batches of up to
# HISTOGRAM_CPU_BATCH_ELEMENTS (fewer, larger batches: fewer ops). benchmarks/RESULTS.md
# has the measurements.
HISTOGRAM_CHUNK_ELEMENTS = 1 << 22
HISTOGRAM_CPU_CHUNK_ELEMENTS = 1 << 16
HISTOGRAM_CPU_BATCH_ELEMENTS = 1 << 18


# A chunked sum of squares below this (or not finite) may have lost precision to float
# underflow or overflowed: that tensor's norm is taken again, exactly (`exact_norm`).
_SMALLEST_SAFE_SUM = 1e-30


WORK_DTYPES = (torch.float32, torch.float64)


def work(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in the precision the ratios are computed in: float32 or float64 as it is,
    16-bit (and other) floats as float32, complex numbers as their real and imaginary
    parts."""
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    return tensor if tensor.dtype in WORK_DTYPES else tensor.to(torch.float32)


def copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """New copies of `tensors` in the work dtype (`work`): one fused op for those already in
    it (on the CPU one clone each, which is faster there)."""
    same = [i for i, t in enumerate(tensors) if t.dtype in WORK_DTYPES]
    out: list[Any] = [None] * len(tensors)
    if any(tensors[i].device.type == "cpu" for i in same):
        same = []
    if same:
        for i, copy in zip(same, foreach.copies([tensors[i] for i in same])):
            out[i] = copy
    for i, tensor in enumerate(tensors):
        if out[i] is None:
            converted = work(tensor)  # a new tensor where converted, else a view or itself
            out[i] = converted.clone() if converted is tensor or tensor.is_complex() else converted
    return out


class Snapshot(list):
    """The copies `snapshot` makes (a list of tensors), and `stacks`: the groups of them that
    are the rows of one tensor (`_Stack`), whose sums of squares `sums_of_squares` takes in
    one reduction a stack."""

    def __init__(self, copies: list[torch.Tensor], stacks: list["_Stack"]) -> None:
        super().__init__(copies)
        self.stacks = stacks
        stacked = {i for stack in stacks for i in stack.members}
        # the positions of the copies in no stack, and as an index on their device
        self.loose = [i for i in range(len(copies)) if i not in stacked]
        self.loose_index = None
        if stacks and self.loose:
            self.loose_index = torch.tensor(self.loose, device=stacks[0].rows_of.device)


class _Stack(NamedTuple):
    """Copies that are rows of `rows_of`, a [k, ...] tensor: the copy at position
    members[j] of its snapshot is rows_of[rows[j]] (a row no member names is stale); the
    same positions and rows as int64 tensors on rows_of's device (indices for the device,
    the lists for the host: no device synchronization)."""

    rows_of: torch.Tensor
    members: list[int]
    rows: list[int]
    member_index: torch.Tensor
    row_index: torch.Tensor


def _stack(rows_of: torch.Tensor, members: list[int], rows: list[int]) -> _Stack:
    device = rows_of.device
    return _Stack(rows_of, members, rows, torch.tensor(members, device=device),
                  torch.tensor(rows, device=device))


def snapshot(tensors: list[torch.Tensor], kept: list[torch.Tensor]) -> Snapshot:
    """Copies of `tensors` in the work dtype, as `copies` makes them, written into the
    tensors of `kept` (an earlier snapshot, reused rather than allocated again) where the
    one at the same position has the work dtype, shape, strides and device the copy would
    have; new copies of the others: those of one shape, work dtype and device, contiguous
    and of at most MAX_STACKED_ELEMENTS elements, at least MIN_STACK_MEMBERS of them, as
    the rows of one new tensor (a `_Stack`), the rest by `copies`.

    Returns:
      The snapshot, of len(tensors): the reused tensors of `kept` and the new copies, with
      the stacks of `kept` whose rows it still holds and the new ones.
    """
    sources = [torch.view_as_real(t) if t.is_complex() else t for t in tensors]
    fits = [i < len(kept) and _holds(kept[i], s) for i, s in enumerate(sources)]
    reused = [i for i, fit in enumerate(fits) if fit]
    foreach.copy_([kept[i] for i in reused], [sources[i] for i in reused])
    if isinstance(kept, Snapshot) and len(reused) == len(kept) == len(sources):
        return kept  # every copy reused, in place
    out: list[Any] = [kept[i] if fit else None for i, fit in enumerate(fits)]
    stacks = [_still_held(stack, fits) for stack in getattr(kept, "stacks", ())]
    fresh = [i for i, fit in enumerate(fits) if not fit]
    stackable = [i for i in fresh if sources[i].dtype in WORK_DTYPES
                 and sources[i].is_contiguous() and 0 < sources[i].numel()]
    groups, _ = stacks_by_shape(
        [(sources[i].shape, sources[i].dtype, sources[i].device) for i in stackable],
        [sources[i].numel() for i in stackable], MAX_STACKED_ELEMENTS)
    for group in (g for g in groups if len(g) >= MIN_STACK_MEMBERS):
        members = [stackable[j] for j in group]
        rows_of = torch.stack([sources[i] for i in members])
        for row, i in enumerate(members):
            out[i] = rows_of[row]
        stacks.append(_stack(rows_of, members, list(range(len(members)))))
    rest = [i for i in fresh if out[i] is None]
    for i, copy in zip(rest, copies([tensors[i] for i in rest])):
        out[i] = copy
    return Snapshot(out, [stack for stack in stacks if stack is not None])


def _still_held(stack: _Stack, fits: list[bool]) -> _Stack | None:
    """`stack`'s members whose copies a new snapshot reuses (`fits`); None if none."""
    keep = [j for j, i in enumerate(stack.members) if i < len(fits) and fits[i]]
    if len(keep) == len(stack.members):
        return stack
    if not keep:
        return None
    return _stack(stack.rows_of, [stack.members[j] for j in keep], [stack.rows[j] for j in keep])


def _holds(kept: torch.Tensor, source: torch.Tensor) -> bool:
    """Whether `kept` is what a copy of `source` (real) in the work dtype would be."""
    dtype = source.dtype if source.dtype in WORK_DTYPES else torch.float32
    return (kept.dtype == dtype and kept.shape == source.shape
            and kept.stride() == source.stride() and kept.device == source.device)


def sums_of_squares(tensors: list[torch.Tensor],
                    chunk_norms: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """float64[n] on the tensors' device: Σx² of each, from the norms of chunks of
    CHUNK_ELEMENTS elements (on a GPU GPU_CHUNK_ELEMENTS) in the tensor's precision, squared
    and summed in float64; the copies of a `Snapshot`'s stacks by one reduction over each
    stack's rows a chunk of CHUNK_ELEMENTS at a time (their squares summed in float64).

    chunk_norms: of some tensors in no stack, by position, the norms of their chunks as this
    function takes them (`_blocked_subtraction`), used instead of taking them again."""
    chunk_norms = chunk_norms or {}
    stacks = getattr(tensors, "stacks", None)
    if not stacks:
        return _sums_of_squares(tensors, chunk_norms)
    out = torch.empty(len(tensors), dtype=torch.float64, device=tensors[0].device)
    for stack in stacks:
        squares = _row_sums_of_squares(stack.rows_of.reshape(len(stack.rows_of), -1))
        out.index_copy_(0, stack.member_index, squares.index_select(0, stack.row_index))
    if tensors.loose:
        loose_norms = {j: chunk_norms[i] for j, i in enumerate(tensors.loose) if i in chunk_norms}
        out.index_copy_(0, tensors.loose_index,
                        _sums_of_squares([tensors[i] for i in tensors.loose], loose_norms))
    return out


def subtract_with_sums(olds: list[torch.Tensor],
                       news: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """olds[i] := olds[i] − news[i], in place, with the sums of squares of the olds before
    and after the subtraction: bit for bit `sums_of_squares(olds)` taken before
    `foreach.sub_(olds, news)` and after it.

    On the CPU, each contiguous tensor of more than UPDATE_BLOCK_ELEMENTS elements in no
    stack is taken a block at a time (`_blocked_subtraction`): one pass over its memory
    instead of three.

    Args:
      olds: tensors in the work dtype (or a `Snapshot` of them), all on one device.
      news: tensors pairwise of the olds' shapes and dtypes.

    Returns:
      float64[n] each, on the device: Σold² before the subtraction, and after it.
    """
    blocked: list[int] = []
    if olds and olds[0].device.type == "cpu":
        stacked = {i for stack in getattr(olds, "stacks", ()) for i in stack.members}
        blocked = [i for i, (old, new) in enumerate(zip(olds, news))
                   if old.numel() > UPDATE_BLOCK_ELEMENTS and i not in stacked
                   and old.is_contiguous() and new.is_contiguous()]
    before, after = {}, {}
    for i in blocked:
        before[i], after[i] = _blocked_subtraction(olds[i], news[i])
    weight_sums = sums_of_squares(olds, before)
    rest = [i for i in range(len(olds)) if i not in before]
    if len(rest) == len(olds):
        foreach.sub_(olds, news)
    elif rest:
        foreach.sub_([olds[i] for i in rest], [news[i] for i in rest])
    return weight_sums, sums_of_squares(olds, after)


def update_norms(olds: list[torch.Tensor],
                 news: list[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """float64[n] each, on the host: ‖olds[i]‖ and ‖olds[i] − news[i]‖ (`checked_norms` of
    `subtract_with_sums`, one transfer); olds[i] := olds[i] − news[i] in place, so that the
    snapshot of a logged step then holds −Δw (the weights before the update: −Δw + w).

    Args:
      olds, news: as `subtract_with_sums`.
    """
    n = len(olds)
    sums = torch.cat(subtract_with_sums(olds, news)).cpu().numpy()
    return (checked_norms(sums[:n], lambda k: olds[k] + news[k]),
            checked_norms(sums[n:], olds))


def _blocked_subtraction(old: torch.Tensor,
                         new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """old := old − new (contiguous CPU tensors of one shape and dtype, more than
    CHUNK_ELEMENTS elements) a block of whole chunks at a time: the block's chunk norms, its
    subtraction and its chunk norms again while it is in the core's cache; then the last,
    partial chunk.

    Returns:
      The norms of old's chunks (as `_sums_of_squares` takes them) before the subtraction,
      and after it.
    """
    flat_old, flat_new = old.view(-1), new.view(-1)
    rows, partial = divmod(flat_old.numel(), CHUNK_ELEMENTS)
    norms_before = torch.empty(rows + (partial > 0), dtype=old.dtype)
    norms_after = torch.empty_like(norms_before)
    per_block = max(UPDATE_BLOCK_ELEMENTS // CHUNK_ELEMENTS, 1)
    for first in range(0, rows, per_block):
        last = min(first + per_block, rows)
        span = slice(first * CHUNK_ELEMENTS, last * CHUNK_ELEMENTS)
        block = flat_old[span].view(last - first, CHUNK_ELEMENTS)
        torch.linalg.vector_norm(block, dim=1, out=norms_before[first:last])
        block.sub_(flat_new[span].view(last - first, CHUNK_ELEMENTS))
        torch.linalg.vector_norm(block, dim=1, out=norms_after[first:last])
    if partial:
        tail = flat_old[rows * CHUNK_ELEMENTS:]
        norms_before[rows] = torch.linalg.vector_norm(tail)
        tail.sub_(flat_new[rows * CHUNK_ELEMENTS:])
        norms_after[rows] = torch.linalg.vector_norm(tail)
    return norms_before, norms_after


def _row_sums_of_squares(rows: torch.Tensor) -> torch.Tensor:
    """float64[k]: Σx² of each row of a contiguous [k, m] tensor, from the norms of its
    parts of at most CHUNK_ELEMENTS elements: p equal parts, one reduction over the k·p of
    them, where p parts divide m, else one reduction per part."""
    k, m = rows.shape
    parts = max(-(-m // CHUNK_ELEMENTS), 1)
    if parts == 1:
        return torch.linalg.vector_norm(rows, dim=1).to(torch.float64).square()
    if m % parts == 0:
        norms = torch.linalg.vector_norm(rows.reshape(k * parts, m // parts), dim=1)
        return norms.to(torch.float64).square().view(k, parts).sum(dim=1)
    squares = [torch.linalg.vector_norm(rows[:, start:start + CHUNK_ELEMENTS], dim=1)
               .to(torch.float64).square() for start in range(0, m, CHUNK_ELEMENTS)]
    return torch.stack(squares, dim=1).sum(dim=1)


def _sums_of_squares(tensors: list[torch.Tensor],
                     chunk_norms: dict[int, torch.Tensor]) -> torch.Tensor:
    """`sums_of_squares` of tensors in no stack (the chunk norms of those in `chunk_norms`
    given, on the CPU).

    On a GPU the chunks' norms are one fused op. On the CPU a tensor's whole chunks are the
    rows of one matrix and their norms one reduction over its rows (a fused op's call per
    chunk costs more there than the chunk's arithmetic); the tensors of one chunk are one
    fused op.
    """
    device = tensors[0].device
    if device.type != "cpu":
        chunks, owners = [], []
        for i, tensor in enumerate(tensors):
            parts = _chunks(tensor)
            chunks.extend(parts)
            owners.extend([i] * len(parts))
        norms = torch.stack(foreach.norms(chunks))
    else:
        single = [i for i, t in enumerate(tensors) if t.numel() <= CHUNK_ELEMENTS]
        pieces = [torch.stack(foreach.norms([tensors[i] for i in single]))] if single else []
        owners = list(single)
        for i, tensor in enumerate(tensors):
            if tensor.numel() <= CHUNK_ELEMENTS:
                continue
            owners.extend([i] * -(-tensor.numel() // CHUNK_ELEMENTS))
            if i in chunk_norms:
                pieces.append(chunk_norms[i])
                continue
            flat = tensor.reshape(-1)
            whole = flat.numel() // CHUNK_ELEMENTS * CHUNK_ELEMENTS
            pieces.append(torch.linalg.vector_norm(flat[:whole].view(-1, CHUNK_ELEMENTS), dim=1))
            if whole < flat.numel():
                pieces.append(torch.linalg.vector_norm(flat[whole:]).reshape(1))
        norms = torch.cat([p.to(torch.float64) for p in pieces])
    squares = norms.to(torch.float64).square()
    if len(owners) == len(tensors) and owners == sorted(owners):
        return squares
    index = torch.tensor(owners, device=device)
    return torch.zeros(len(tensors), dtype=torch.float64, device=device).index_add_(
        0, index, squares
    )


def _chunks(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The tensor itself (at most GPU_CHUNK_ELEMENTS elements, whatever its shape), else its
    elements in order in pieces of GPU_CHUNK_ELEMENTS."""
    if tensor.numel() <= GPU_CHUNK_ELEMENTS:
        return [tensor]
    return list(tensor.reshape(-1).split(GPU_CHUNK_ELEMENTS))


def needs_exact_norm(sums_of_squares: Any) -> np.ndarray:
    """Whether each chunked sum of squares (a float or an array of them) may have overflowed
    or lost precision to underflow: not finite but not NaN, or below _SMALLEST_SAFE_SUM."""
    sums = np.asarray(sums_of_squares, np.float64)
    return (sums < _SMALLEST_SAFE_SUM) | (sums == math.inf)  # NaN compares false


def checked_norms(sums_of_squares: np.ndarray,
                  tensors: Sequence[torch.Tensor] | Callable[[int], torch.Tensor]) -> np.ndarray:
    """float64[n]: √ of each of `sums_of_squares` (float64[n]), or, where that sum may have
    overflowed or lost precision to underflow (`needs_exact_norm`), the exact norm of
    tensor i; NaN for a NaN sum.

    `tensors`: the n tensors (a list or a `Snapshot`), whose max|x| where needed are taken
    together first (`maxima`: a snapshot's stacked ones a stack at a time), so that a
    tensor that is 0 (a layer that did not move) costs no op of its own; or a function of i
    that makes tensor i, called only where its exact norm is needed."""
    norms = np.sqrt(sums_of_squares)  # of sums >= 0, +inf or NaN: no floating-point warning
    unsafe = np.flatnonzero(needs_exact_norm(sums_of_squares))
    if callable(tensors):
        for i in unsafe:
            norms[i] = exact_norm(tensors(int(i)))
        return norms
    tops = maxima(tensors, unsafe) if len(unsafe) > 1 else [None] * len(unsafe)
    for i, top in zip(unsafe, tops):
        norms[i] = exact_norm(tensors[int(i)], top)
    return norms


def maxima(tensors: list[torch.Tensor], indices: Any) -> np.ndarray:
    """float64[len(indices)] on the host: max|x| of tensors[i] for each of `indices` (0 for
    an empty tensor), from one reduction over the rows of each of a `Snapshot`'s stacks
    that holds at least MIN_STACK_MEMBERS of them and one per other tensor, copied in one
    transfer.

    Args:
      tensors: a list of tensors (or a `Snapshot`), all on one device.
      indices: positions in `tensors`, distinct.
    """
    indices = [int(i) for i in indices]
    out = np.zeros(len(indices))
    position = {i: k for k, i in enumerate(indices)}
    parts, places = [], []
    for stack in getattr(tensors, "stacks", ()):
        held = [(j, member) for j, member in enumerate(stack.members) if member in position]
        if len(held) < MIN_STACK_MEMBERS:
            continue
        rows = stack.rows_of.reshape(len(stack.rows_of), -1)
        row_index = torch.tensor([stack.rows[j] for j, _ in held], device=rows.device)
        parts.append(rows.abs().amax(dim=1).index_select(0, row_index))
        places.extend(position.pop(member) for _, member in held)
    rest = [(i, k) for i, k in position.items() if tensors[i].numel()]
    if rest:
        parts.append(torch.stack([_max_magnitude(tensors[i]) for i, _ in rest]))
        places.extend(k for _, k in rest)
    if parts:  # float32 maxima promoted to float64 where some are (exactly)
        out[places] = torch.cat(parts).cpu().numpy()
    return out


def exact_norm(tensor: torch.Tensor, top: float | None = None) -> float:
    """‖x‖₂ in float64, scaled by max|x| (no overflow, no underflow); 0 for x = 0, +inf or
    NaN where x is not finite. `top`: max|x| where already known."""
    if top is None:
        top = _max_magnitude(tensor).item() if tensor.numel() else 0.0
    if top == 0 or not math.isfinite(top):
        return top
    scaled = tensor.to(torch.float64) / top
    return top * torch.linalg.vector_norm(scaled).item()


def _max_magnitude(tensor: torch.Tensor) -> torch.Tensor:
    """max|x| of a tensor of at least one element, 0-d on its device (NaN where any x is),
    from its least and greatest values: one pass, no temporary (on the CPU many times
    quicker than `vector_norm(x, inf)`)."""
    low, high = torch.aminmax(tensor)
    return torch.maximum(high, low.neg())


# Bucketing works on the bits of values x >= 0 (and NaN) with the sign bit clear: read as a
# signed integer they grow with x, so each bucket is a range of them. The top bits (the
# exponent and _FINE_MANTISSA_BITS of the mantissa) name a value's fine bin, of 2**-3 of an
# octave at most: narrower than a bucket (10**(1 / BINS_PER_DECADE) wide), so at most one
# bucket boundary falls inside a fine bin. Adding the bin's offset to the bits moves that
# boundary onto the start of the next bin, so (bits + offset) >> shift, the value's key, is
# the bin below the boundary and the next one at or above it; each key holds one bucket.
_FINE_MANTISSA_BITS = 3


class _BitTables(NamedTuple):
    """How `_key_counts` buckets the values of one floating dtype on one device.

    int_dtype: the signed integer dtype of the float's width.
    shift: bits >> shift is a value's fine bin (bits >= 0: fine_bins bins).
    fine_bins: the number of fine bins of values with the sign bit clear.
    offsets: int_dtype[fine_bins]: what is added to the bits of a value of each bin to make
      (bits + offset) >> shift its key: the bin itself below the bin's boundary, the next
      one at or above it (0 or 1 << shift where no boundary lies inside the bin).
    buckets: int32[fine_bins + 1]: the bucket of the values of each key.
    """

    int_dtype: torch.dtype
    shift: int
    fine_bins: int
    offsets: torch.Tensor
    buckets: torch.Tensor


_TABLES: dict[tuple[torch.dtype, torch.device], _BitTables] = {}

_INT_OF = {torch.float32: (torch.int32, np.int32, np.float32, 23),
           torch.float64: (torch.int64, np.int64, np.float64, 52)}


def _reference_buckets(bits: np.ndarray, float_dtype: type) -> np.ndarray:
    """The bucket of each value whose bits (signed integers) are `bits`: the protocol's rule
    on the value itself, in its precision (+-0, positive values below the first edge, the
    edges' bins, at or above the last edge, +inf, NaN or negative)."""
    x = bits.view(float_dtype)
    zero = float_dtype(0)
    smallest = np.nextafter(zero, float_dtype(1))
    boundaries = np.concatenate(
        [[smallest], metadata.HISTOGRAM_EDGES.astype(float_dtype), [np.inf]]).astype(float_dtype)
    ids = np.searchsorted(boundaries, x, side="right").astype(np.int64)
    with np.errstate(invalid="ignore"):
        ids[~(x >= zero)] = metadata.NAN_BUCKET
    return ids


def _bit_tables(dtype: torch.dtype, device: torch.device) -> _BitTables:
    """The tables of `dtype` (float32 or float64) on `device`, built once.

    Raises:
      RuntimeError: two bucket boundaries would share a key (the protocol's edges closer
        than a fine bin).
    """
    key = (dtype, device)
    tables = _TABLES.get(key)
    if tables is not None:
        return tables
    torch_int, np_int, np_float, mantissa = _INT_OF[dtype]
    width = np.dtype(np_int).itemsize * 8
    shift = mantissa - _FINE_MANTISSA_BITS
    fine_bins = 1 << (width - 1 - shift)
    start = np.arange(fine_bins, dtype=np.int64) << shift  # each fine bin's first and last bits
    end = start + (1 << shift) - 1
    low = _reference_buckets(start.astype(np_int), np_float)
    high = _reference_buckets(end.astype(np_int), np_float)
    # The first bits of the upper bucket in each bin with a boundary inside: a binary search.
    below, above = start.copy(), end.copy()  # B(below) = low, B(above) = high
    split = low != high
    while np.any(split & (above - below > 1)):
        middle = below + (above - below) // 2
        upper = _reference_buckets(middle.astype(np_int), np_float) != low
        above = np.where(split & upper, middle, above)
        below = np.where(split & ~upper, middle, below)
    offsets = np.zeros(fine_bins, dtype=np.int64)
    buckets = np.zeros(fine_bins + 1, dtype=np.int64)
    taken = np.zeros(fine_bins + 1, dtype=bool)  # keys that already hold a bucket
    for f in range(fine_bins):
        if split[f]:  # below the boundary: key f; at or above it: key f + 1
            offsets[f] = start[f] + (1 << shift) - above[f]
            parts = [(f, low[f]), (f + 1, high[f])]
        elif taken[f] and buckets[f] != low[f]:  # key f holds another bucket: all to f + 1
            offsets[f] = 1 << shift
            parts = [(f + 1, low[f])]
        else:
            parts = [(f, low[f])]
        for k, bucket in parts:
            if taken[k] and buckets[k] != bucket:
                raise RuntimeError("histogram edges closer than a fine bin: two buckets in one key")
            taken[k], buckets[k] = True, bucket
    if np.any(end + offsets > np.iinfo(np_int).max):
        raise RuntimeError("a fine bin's offset overflows its bits")
    tables = _TABLES[key] = _BitTables(
        torch_int, shift, fine_bins, torch.from_numpy(offsets.astype(np_int)).to(device),
        torch.from_numpy(buckets.astype(np.int32)).to(device))
    return tables


def elementwise_counts(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """int64[NUM_BUCKETS] on the device: the counts of |Δw_i| / |w_i| (0 where Δw_i = 0, as
    `xdivy`), computed in the tensors' dtype and bucketed as `bucket_counts` does, a chunk
    at a time.

    Args:
      before, after: floating-point tensors of one shape, dtype and device.
    """
    old, new = before.reshape(-1), after.reshape(-1)
    size, device = old.numel(), old.device
    chunk = HISTOGRAM_CPU_CHUNK_ELEMENTS if device.type == "cpu" else HISTOGRAM_CHUNK_ELEMENTS
    if old.dtype not in _INT_OF:
        total = torch.zeros(metadata.NUM_BUCKETS, dtype=torch.int64, device=device)
        for start in range(0, size, chunk):
            w, n = old[start:start + chunk], new[start:start + chunk]
            delta = torch.sub(n, w)
            total += _bucketized_counts(torch.where(delta == 0, 0.0, delta.div_(w).abs_()))
        return total
    tables = _bit_tables(old.dtype, device)
    # one chunk's temporaries, used by every chunk
    quotients = torch.empty(min(chunk, size), dtype=old.dtype, device=device)
    fine = torch.empty(quotients.shape, dtype=tables.int_dtype, device=device)
    key = torch.empty_like(fine)
    keys = torch.zeros(tables.fine_bins + 1, dtype=torch.int64, device=device)
    for start in range(0, size, chunk):
        w, n = old[start:start + chunk], new[start:start + chunk]
        k = w.numel()
        bits = torch.sub(n, w, out=quotients[:k]).div_(w).view(tables.int_dtype)
        bits.bitwise_and_(torch.iinfo(tables.int_dtype).max)  # the sign bit cleared: |Δw_i / w_i|
        keys += _key_counts(bits, tables, fine[:k], key[:k])
    counts = _counts_of_keys(keys, tables)
    # Δw_i = 0 = w_i made 0/0, a NaN: counted as 0. Reading a count costs nothing on the
    # CPU, so there this pass runs only when the NaN bucket holds any.
    if device.type != "cpu" or counts[metadata.NAN_BUCKET]:
        zero_over_zero = sum(
            torch.count_nonzero((old[i:i + chunk] == 0) & (new[i:i + chunk] == 0))
            for i in range(0, size, chunk))
        counts[metadata.NAN_BUCKET] -= zero_over_zero
        counts[metadata.ZERO_BUCKET] += zero_over_zero
    return counts


def elementwise_counts_of(befores: list[torch.Tensor],
                          afters: list[torch.Tensor]) -> list[torch.Tensor]:
    """`elementwise_counts` of each pair (befores[i], afters[i]), the same counts: tensors
    of at least one element and fewer than a batch (on the CPU HISTOGRAM_CPU_BATCH_ELEMENTS,
    elsewhere HISTOGRAM_CHUNK_ELEMENTS), float32 or float64, are bucketed together, up to a
    batch at a time (a dozen ops for all of them rather than for each); the others one by
    one.

    Args:
      befores, afters: lists of equal length; pairs of floating-point tensors of one shape,
        dtype and device, all on one device.

    Returns:
      int64[NUM_BUCKETS] per pair, on the device.
    """
    if not befores:
        return []
    device = befores[0].device
    limit = HISTOGRAM_CPU_BATCH_ELEMENTS if device.type == "cpu" else HISTOGRAM_CHUNK_ELEMENTS
    counts: list[Any] = [None] * len(befores)
    batches: dict[torch.dtype, list[list[int]]] = {}  # of each dtype: its batches' members
    filled: dict[torch.dtype, int] = {}  # the elements of each dtype's last batch
    for i, before in enumerate(befores):
        size = before.numel()
        if before.dtype not in _INT_OF or size >= limit or size == 0:
            counts[i] = elementwise_counts(before, afters[i])
            continue
        batch = batches.setdefault(before.dtype, [[]])
        if filled.get(before.dtype, 0) + size > limit:
            batch.append([])
            filled[before.dtype] = 0
        batch[-1].append(i)
        filled[before.dtype] = filled.get(before.dtype, 0) + size
    for members in (m for batch in batches.values() for m in batch):
        rows = _counts_of_rows([befores[i] for i in members], [afters[i] for i in members])
        for i, row in zip(members, rows):
            counts[i] = row
    return counts


def _counts_of_rows(befores: list[torch.Tensor], afters: list[torch.Tensor]) -> torch.Tensor:
    """int64[len(befores), NUM_BUCKETS]: `elementwise_counts` of each pair, the pairs' values
    (one float dtype, one device) bucketed in one pass over their concatenation."""
    device, dtype = befores[0].device, befores[0].dtype
    tables = _bit_tables(dtype, device)
    sizes = [b.numel() for b in befores]
    old = torch.cat([b.reshape(-1) for b in befores])
    new = torch.cat([a.reshape(-1) for a in afters])
    bits = torch.sub(new, old).div_(old).view(tables.int_dtype)
    bits.bitwise_and_(torch.iinfo(tables.int_dtype).max)  # the sign bit cleared: |Δw_i / w_i|
    key = torch.empty_like(bits)
    _key_of_each(bits, tables, torch.empty_like(bits), key)
    # int32 ids: each pair holds a value, a batch at most a chunk of them, so that
    # len(sizes) * NUM_BUCKETS < 2**31
    row_of_each = torch.repeat_interleave(  # the pair of each value
        torch.arange(len(sizes), dtype=torch.int32, device=device),
        torch.tensor(sizes, device=device), output_size=old.numel())
    ids = torch.index_select(tables.buckets, 0, key).add_(row_of_each, alpha=metadata.NUM_BUCKETS)
    counts = torch.bincount(ids, minlength=len(sizes) * metadata.NUM_BUCKETS)
    counts = counts.view(len(sizes), metadata.NUM_BUCKETS)
    # Δw_i = 0 = w_i made 0/0, a NaN: counted as 0 (as `elementwise_counts` does). Reading
    # a count costs nothing on the CPU, so there this pass runs only when there are NaNs.
    if device.type != "cpu" or bool(counts[:, metadata.NAN_BUCKET].any()):
        zero_over_zero = torch.zeros(len(sizes), dtype=torch.int64, device=device).index_add_(
            0, row_of_each, ((old == 0) & (new == 0)).to(torch.int64))
        counts[:, metadata.NAN_BUCKET] -= zero_over_zero
        counts[:, metadata.ZERO_BUCKET] += zero_over_zero
    return counts


def bucket_counts(values: torch.Tensor) -> torch.Tensor:
    """int64[NUM_BUCKETS] on the values' device: `values` (floating point, any shape)
    compared with the protocol's edges in their own precision: ZERO_BUCKET for +-0,
    UNDERFLOW_BUCKET for 0 < x < edges[0] (subnormals too), FIRST_BIN + k for
    edges[k] <= x < edges[k + 1], OVERFLOW_BUCKET for edges[-1] <= x < inf, INF_BUCKET for
    +inf, NAN_BUCKET for NaN and negative values. float32 and float64 values are bucketed
    by their bits (`_BitTables`), others by `torch.bucketize` on the edges in their dtype."""
    if values.dtype not in _INT_OF:
        return _bucketized_counts(values)
    tables = _bit_tables(values.dtype, values.device)
    values = values.reshape(-1)
    nan = torch.full((), math.nan, dtype=values.dtype, device=values.device)  # no host copy
    magnitudes = values.view(tables.int_dtype).bitwise_and(torch.iinfo(tables.int_dtype).max)
    # -0 as 0, and negative values as a NaN, in its bucket
    bits = torch.where(values >= 0, magnitudes, nan.view(tables.int_dtype))
    return _counts_of_keys(_key_counts(bits, tables, torch.empty_like(bits),
                                       torch.empty_like(bits)), tables)


_EDGES: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _bucketized_counts(values: torch.Tensor) -> torch.Tensor:
    """`bucket_counts` by one `bucketize` on [smallest positive, edges..., +inf] in the
    values' dtype (0 in ZERO_BUCKET, positive values below the first edge in
    UNDERFLOW_BUCKET, ..., +inf in INF_BUCKET), then NaN and negative values to NAN_BUCKET."""
    key = (values.dtype, values.device)
    boundaries = _EDGES.get(key)
    if boundaries is None:
        edges = torch.tensor(metadata.HISTOGRAM_EDGES, dtype=values.dtype)
        zero = torch.zeros(1, dtype=values.dtype)
        smallest = torch.nextafter(zero, torch.ones(1, dtype=values.dtype))
        inf = torch.full((1,), math.inf, dtype=values.dtype)
        boundaries = _EDGES[key] = torch.cat([smallest, edges, inf]).to(values.device)
    values = values.reshape(-1)
    ids = torch.bucketize(values, boundaries, right=True)
    ids = torch.where(values >= 0, ids, metadata.NAN_BUCKET)
    return torch.bincount(ids, minlength=metadata.NUM_BUCKETS)


def _key_counts(bits: torch.Tensor, tables: _BitTables, fine: torch.Tensor,
                key: torch.Tensor) -> torch.Tensor:
    """int64[fine_bins + 1]: how many of the values whose bits are the vector `bits` (all
    >= 0) have each key of `tables.buckets`; `fine` and `key` (of the bits' shape and dtype)
    are overwritten."""
    _key_of_each(bits, tables, fine, key)
    return torch.bincount(key, minlength=tables.fine_bins + 1)


def _key_of_each(bits: torch.Tensor, tables: _BitTables, fine: torch.Tensor,
                 key: torch.Tensor) -> None:
    """key := the key (an index of `tables.buckets`) of each value whose bits are the vector
    `bits` (all >= 0); `fine` (of the bits' shape and dtype) is overwritten."""
    torch.bitwise_right_shift(bits, tables.shift, out=fine)
    torch.index_select(tables.offsets, 0, fine, out=key)
    key.add_(bits).bitwise_right_shift_(tables.shift)


def _counts_of_keys(keys: torch.Tensor, tables: _BitTables) -> torch.Tensor:
    """int64[NUM_BUCKETS]: the counts per bucket of the counts per key `keys`."""
    return torch.zeros(metadata.NUM_BUCKETS, dtype=torch.int64, device=keys.device).index_add_(
        0, tables.buckets, keys)

"""The array math of PyTorch tensors that `tb_wur_plugin.torch` and the Keras PyTorch backend
share: work dtypes, copies, norms in float64 without overflow, and histogram bucketing on the
protocol's edges, on the tensors' device. Imports no TensorFlow module."""

from __future__ import annotations

import math
from typing import Any

import torch

from tb_wur_plugin import metadata

# Tensors are reduced in chunks of this many elements: float32 norms of the chunks (one
# fused `_foreach_norm` over all chunks of all parameters), their squares summed in float64.
CHUNK_ELEMENTS = 1 << 16


# Histogram temporaries are bounded by bucketing this many elements at a time.
HISTOGRAM_CHUNK_ELEMENTS = 1 << 22


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
    """Copies of `tensors` in the work dtype: one fused op for those already in it."""
    same = [i for i, t in enumerate(tensors) if t.dtype in WORK_DTYPES]
    out: list[Any] = [None] * len(tensors)
    if any(tensors[i].device.type == "cpu" for i in same):  # one clone each is faster there
        same = []
    if same:
        for i, copy in zip(same, torch._foreach_mul([tensors[i] for i in same], 1.0)):
            out[i] = copy
    for i, tensor in enumerate(tensors):
        if out[i] is None:
            converted = work(tensor)  # a new tensor where converted, else a view or itself
            out[i] = converted.clone() if converted is tensor or tensor.is_complex() else converted
    return out


def sums_of_squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    """float64[n] on the tensors' device: Σx² of each, from the norms of chunks of
    CHUNK_ELEMENTS elements in the tensor's precision (one fused op), squared and summed in
    float64."""
    chunks, owners = [], []
    for i, tensor in enumerate(tensors):
        if tensor.numel() <= CHUNK_ELEMENTS:
            chunks.append(tensor)  # the norm of all its elements, whatever its shape
            owners.append(i)
        else:
            parts = tensor.reshape(-1).split(CHUNK_ELEMENTS)
            chunks.extend(parts)
            owners.extend([i] * len(parts))
    device = tensors[0].device
    squares = torch.stack(torch._foreach_norm(chunks)).to(torch.float64).square()
    if len(chunks) == len(tensors):
        return squares
    index = torch.tensor(owners, device=device)
    return torch.zeros(len(tensors), dtype=torch.float64, device=device).index_add_(
        0, index, squares
    )


def needs_exact_norm(sum_of_squares: float) -> bool:
    """Whether a chunked sum of squares may have overflowed or lost precision to underflow:
    not finite but not NaN, or below _SMALLEST_SAFE_SUM."""
    return not (_SMALLEST_SAFE_SUM <= sum_of_squares < math.inf or math.isnan(sum_of_squares))


def checked_norm(sum_of_squares: float, tensor) -> float:
    """√sum_of_squares, or, where that sum may have overflowed or lost precision to
    underflow (`needs_exact_norm`), the exact norm of tensor() (a callable: computed only
    then); NaN for a NaN sum."""
    if sum_of_squares >= _SMALLEST_SAFE_SUM and sum_of_squares < math.inf:
        return math.sqrt(sum_of_squares)
    if math.isnan(sum_of_squares):
        return math.nan
    return exact_norm(tensor())


def exact_norm(tensor: torch.Tensor) -> float:
    """‖x‖₂ in float64, scaled by max|x| (no overflow, no underflow); 0 for x = 0, +inf or
    NaN where x is not finite."""
    top = torch.linalg.vector_norm(tensor, math.inf).item() if tensor.numel() else 0.0
    if top == 0 or not math.isfinite(top):
        return top
    scaled = tensor.to(torch.float64) / top
    return top * torch.linalg.vector_norm(scaled).item()


_EDGES: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def elementwise_counts(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """int64[NUM_BUCKETS] on the device: the counts of |Δw_i| / |w_i| (0 where Δw_i = 0, as
    `xdivy`), bucketed as `numpy_bucketing.bucket_counts` does, a chunk at a time."""
    old, new = before.reshape(-1), after.reshape(-1)
    total = torch.zeros(metadata.NUM_BUCKETS, dtype=torch.int64, device=old.device)
    for start in range(0, old.numel(), HISTOGRAM_CHUNK_ELEMENTS):
        w = old[start:start + HISTOGRAM_CHUNK_ELEMENTS]
        delta = new[start:start + HISTOGRAM_CHUNK_ELEMENTS] - w
        ratios = torch.where(delta == 0, 0.0, delta.div_(w).abs_())
        total += bucket_counts(ratios)
    return total


def bucket_counts(values: torch.Tensor) -> torch.Tensor:
    """int64[NUM_BUCKETS]: `values` (float32 or float64) compared with the protocol's edges
    in their own precision: the bucket of edges[k] <= x < edges[k + 1] is FIRST_BIN + k.

    One `bucketize` on [smallest positive, edges..., +inf] puts 0 in ZERO_BUCKET, positive
    values below the first edge (subnormals too) in UNDERFLOW_BUCKET, ..., +inf in
    INF_BUCKET; then NaN and negative values go to NAN_BUCKET."""
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

"""The array math of numpy: ratios from norms with the protocol's conventions
(`ratios_from_norms`), and the counts of elementwise ratios per bucket of the protocol's
fixed log10 layout (`metadata`), exactly as `tf_write.bucketing.bucket_counts` (the
TensorFlow path) counts them. O(N) time; temporaries of at most CHUNK_ELEMENTS elements."""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_wur_plugin import metadata

CHUNK_ELEMENTS = 1 << 20


def bucket_counts(ratios) -> np.ndarray:
    """Counts of `ratios` (any shape) per bucket of the protocol's layout, int64[NUM_BUCKETS].

    As the TensorFlow path: values that are not float32 or float64 are taken as float32;
    each value is compared with the edges in its own precision (the float64 edges rounded to
    float32 for float32 values): ZERO_BUCKET for ±0, UNDERFLOW_BUCKET for 0 < x < edges[0]
    (subnormals included), FIRST_BIN + k for edges[k] <= x < edges[k + 1], OVERFLOW_BUCKET
    for edges[-1] <= x < inf, INF_BUCKET for +inf, NAN_BUCKET for NaN and negative values.
    """
    values = np.asarray(ratios)
    if values.dtype not in (np.float32, np.float64):
        values = values.astype(np.float32)
    flat = values.reshape(-1)
    counts = np.zeros(metadata.NUM_BUCKETS, np.int64)
    for start in range(0, flat.size, CHUNK_ELEMENTS):
        counts += np.bincount(
            _bucket_ids(flat[start:start + CHUNK_ELEMENTS]), minlength=metadata.NUM_BUCKETS
        )
    return counts


def _edges(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper edge of each position p (0: below the first edge, k + 1: bin k,
    NUM_BINS + 1: at or above the last edge), in `dtype`."""
    edges = metadata.HISTOGRAM_EDGES.astype(dtype)
    return (
        np.concatenate([[-np.inf], edges]).astype(dtype),
        np.concatenate([edges, [np.inf]]).astype(dtype),
    )


_EDGES = {np.dtype(np.float32): _edges(np.float32), np.dtype(np.float64): _edges(np.float64)}


def _bucket_ids(x: np.ndarray) -> np.ndarray:
    """The bucket of each value of the float32 or float64 vector `x` (intp)."""
    lower, upper = _EDGES[x.dtype]
    positive = (x > 0) & (x < np.inf)  # finite and > 0, subnormals too
    safe = np.where(positive, x, x.dtype.type(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.log10(safe) * metadata.BINS_PER_DECADE + (
            1 - metadata.LOG10_MIN * metadata.BINS_PER_DECADE
        )
    position = np.clip(np.floor(t), 0, metadata.NUM_BINS + 1).astype(np.intp)
    # log10 is off by far less than one bin: one comparison with the bin's edges makes it exact
    position += (safe >= upper[position]).astype(np.intp)
    position -= (safe < lower[position]).astype(np.intp)
    ids = position + metadata.UNDERFLOW_BUCKET
    ids[~positive] = metadata.NAN_BUCKET  # NaN, negative, -inf
    ids[x == 0] = metadata.ZERO_BUCKET
    ids[x == np.inf] = metadata.INF_BUCKET
    return ids


def ratios_from_norms(update_norms: Any, weight_norms: Any) -> np.ndarray:
    """‖Δw‖ / ‖w‖ of each pair of norms, float64, with the protocol's conventions: 0 when
    ‖Δw‖ = 0, +inf when ‖w‖ = 0 < ‖Δw‖, NaN when a norm is not finite (the weights or the
    update were not)."""
    update = np.asarray(update_norms, np.float64)
    weight = np.asarray(weight_norms, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(update == 0, 0.0, update / weight)
    return np.where(np.isfinite(update) & np.isfinite(weight), ratio, np.nan)

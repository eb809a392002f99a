"""The array math of JAX arrays that `tb_wur_plugin.jax` and the Keras JAX backend share:
ratios from norms that neither overflow nor underflow (`norm_parts`) and histogram
bucketing on the protocol's edges, on the arrays' devices, jitted. Imports no TensorFlow
module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms
from tb_wur_plugin.arrays.stacking import stacks_by_shape


def ratios(p_leaves: list, u_leaves: list) -> np.ndarray:
    tops, sums = jax.device_get(norm_parts(p_leaves, u_leaves))
    tops, sums = np.asarray(tops, np.float64), np.asarray(sums, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.where(tops == 0, 0.0, tops * np.sqrt(sums))
    return ratios_from_norms(norms[1], norms[0])


def work(x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        x = jnp.abs(x)
    return x if x.dtype == jnp.float64 else x.astype(jnp.float32)


def scaled_norm_parts(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """max|x| and Σ(x / max|x|)² (Σx² when max|x| = 0): ‖x‖ = max · √Σ."""
    x = work(x)
    top, total = _scaled_rows(x.reshape(1, x.size))
    return top[0], total[0]


# Below this a sum of squares may have lost precision to underflow (in float32: squares
# below 1.2e-38 are flushed or subnormal).
_SMALLEST_SAFE_SUM = 1e-30

# Leaves above this many elements take one pass first (`norm_parts_of`); smaller ones are
# stacked by shape and dtype (`stacking.stacks_by_shape`), each stack's rows reduced together.
ONE_PASS_MIN_ELEMENTS = 1 << 16


def norm_parts_of(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(1, Σx²) from one pass over x where that sum is finite and above
    _SMALLEST_SAFE_SUM (no square overflowed, none that counts underflowed), else
    `scaled_norm_parts(x)` (two passes): ‖x‖ = first · √second either way."""
    x = work(x)
    plain = jnp.sum(jnp.square(x))
    return jax.lax.cond(
        jnp.isfinite(plain) & (plain > _SMALLEST_SAFE_SUM),
        lambda x: (jnp.ones((), x.dtype), plain),
        scaled_norm_parts,
        x,
    )


def _scaled_rows(rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`scaled_norm_parts` of each row of a [k, m] array (in the work dtype)."""
    magnitude = jnp.abs(rows)
    top = jnp.max(magnitude, axis=1, initial=0.0)
    scale = jnp.where(top > 0, top, jnp.ones_like(top))
    return top, jnp.sum(jnp.square(magnitude / scale[:, None]), axis=1)


def _stacked(leaves: list, members: list[int]) -> jax.Array:
    """The leaves at `members` (of one shape) as the rows of a [k, m] array."""
    size = int(np.prod(leaves[members[0]].shape, dtype=np.int64))
    return jnp.stack([leaves[i] for i in members]).reshape(len(members), size)


@jax.jit
def norm_parts(p_leaves: list, u_leaves: list) -> tuple[jax.Array, jax.Array]:
    """[2, n] factors and [2, n] sums, ‖x‖ = factor · √sum: row 0 of the params, row 1 of
    the updates: `norm_parts_of` of each leaf above ONE_PASS_MIN_ELEMENTS elements,
    `scaled_norm_parts` of each smaller one, those of a shape and dtype as one stack (two
    reductions a stack, not two a leaf)."""
    leaves = [work(x) for x in (*p_leaves, *u_leaves)]
    stacks, large = stacks_by_shape([(x.shape, x.dtype) for x in leaves],
                                    [x.size for x in leaves], ONE_PASS_MIN_ELEMENTS)
    parts: list = [None] * len(leaves)
    for i in large:
        parts[i] = norm_parts_of(leaves[i])
    for members in stacks:
        tops, sums = _scaled_rows(_stacked(leaves, members))
        for row, i in enumerate(members):
            parts[i] = (tops[row], sums[row])
    dtype = jnp.result_type(*[top for top, _ in parts])
    tops = jnp.stack([top.astype(dtype) for top, _ in parts]).reshape(2, -1)
    sums = jnp.stack([total.astype(dtype) for _, total in parts]).reshape(2, -1)
    return tops, sums


@jax.jit
def histogram_counts(p_leaves: list, u_leaves: list) -> jax.Array:
    """int32[n, NUM_BUCKETS]: the bucket counts of each leaf's |u_i| / |p_i| (0 where
    u_i = 0), as `numpy_bucketing.bucket_counts` counts them."""
    return jnp.stack([bucket_counts(elementwise(p, u)) for p, u in zip(p_leaves, u_leaves)])


def elementwise(p: jax.Array, u: jax.Array) -> jax.Array:
    p, u = work(p), work(u)
    return jnp.abs(jnp.where(u == 0, jnp.zeros_like(u), u / p)).reshape(-1)


def bucket_counts(values: jax.Array) -> jax.Array:
    """int32[NUM_BUCKETS]: the counts of `values` (float32 or float64) per bucket, as
    comparisons with the edges in the values' precision put them.

    A value x > 0 lies in bin floor(t), t = BINS_PER_DECADE · (log10 x − LOG10_MIN), then
    moved by one where a comparison with that bin's edges disagrees (the error of t is far
    below one bin): a logarithm and two lookups per value, not a search of the edges.
    Classified by their bits (XLA reads subnormals as zero: they are positive here, below
    the first edge).
    """
    int_type, inf_bits = (jnp.int32, 0x7F800000) if values.dtype == jnp.float32 else (
        jnp.int64, 0x7FF0000000000000)
    bits = jax.lax.bitcast_convert_type(values, int_type)
    positive = (bits > 0) & (bits < inf_bits)  # finite, > 0 (subnormals too)
    x = jnp.where(positive, values, jnp.ones_like(values))
    # position p: 0 below the first edge, k + 1 in bin k, NUM_BINS + 1 at or above the last
    t = (jnp.log(x) * (metadata.BINS_PER_DECADE / np.log(10.0))
         + (1 - metadata.LOG10_MIN * metadata.BINS_PER_DECADE))
    position = jnp.clip(jnp.floor(t), 0, metadata.NUM_BINS + 1).astype(jnp.int32)
    lower = jnp.asarray(np.concatenate([[-np.inf], metadata.HISTOGRAM_EDGES]), values.dtype)
    upper = jnp.asarray(np.concatenate([metadata.HISTOGRAM_EDGES, [np.inf]]), values.dtype)
    position = (position + (x >= upper[position]).astype(jnp.int32)
                - (x < lower[position]).astype(jnp.int32))
    ids = jnp.where(
        positive,
        position + metadata.UNDERFLOW_BUCKET,
        jnp.where(
            (bits == 0) | (bits == jnp.iinfo(int_type).min),
            metadata.ZERO_BUCKET,
            jnp.where(bits == inf_bits, metadata.INF_BUCKET, metadata.NAN_BUCKET),
        ),
    )
    return jnp.bincount(ids, length=metadata.NUM_BUCKETS)

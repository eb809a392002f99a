"""The array math of JAX arrays that `tb_wur_plugin.jax` and the Keras JAX backend share:
ratios from scaled norms (no overflow, no underflow) and histogram bucketing on the protocol's
edges, on the arrays' devices, jitted. Imports no TensorFlow module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms

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
    magnitude = jnp.abs(work(x))
    top = jnp.max(magnitude, initial=0.0) if magnitude.size else jnp.zeros((), magnitude.dtype)
    scale = jnp.where(top > 0, top, jnp.ones_like(top))
    return top, jnp.sum(jnp.square(magnitude / scale))


@jax.jit
def norm_parts(p_leaves: list, u_leaves: list) -> tuple[jax.Array, jax.Array]:
    """[2, n] maxima and [2, n] scaled sums of squares: row 0 of the params, row 1 of the
    updates."""
    parts = [[scaled_norm_parts(x) for x in leaves] for leaves in (p_leaves, u_leaves)]
    dtype = jnp.result_type(*[top for row in parts for top, _ in row])
    tops = jnp.stack([jnp.stack([top.astype(dtype) for top, _ in row]) for row in parts])
    sums = jnp.stack([jnp.stack([s.astype(dtype) for _, s in row]) for row in parts])
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
    """Classified by their bits (XLA reads subnormals as zero: they are positive here)."""
    int_type, inf_bits = (jnp.int32, 0x7F800000) if values.dtype == jnp.float32 else (
        jnp.int64, 0x7FF0000000000000)
    bits = jax.lax.bitcast_convert_type(values, int_type)
    edges = jnp.asarray(metadata.HISTOGRAM_EDGES, values.dtype)
    position = jnp.searchsorted(edges, values, side="right")
    ids = jnp.where(
        (bits > 0) & (bits < inf_bits),
        position + metadata.UNDERFLOW_BUCKET,
        jnp.where(
            (bits == 0) | (bits == jnp.iinfo(int_type).min),
            metadata.ZERO_BUCKET,
            jnp.where(bits == inf_bits, metadata.INF_BUCKET, metadata.NAN_BUCKET),
        ),
    )
    return jnp.bincount(ids, length=metadata.NUM_BUCKETS)

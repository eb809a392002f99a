"""Weight-update ratios of JAX / optax training: Δw is the optax update itself, so no
snapshot of the weights is needed.

    from tb_wur_plugin.jax import log_update_ratios
    from tb_wur_plugin.writer import SummaryWriter

    @jax.jit
    def train_step(params, opt_state, batch):
        grads = jax.grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, updates

    with SummaryWriter("logs/run1") as writer:
        for step, batch in enumerate(batches):
            new_params, opt_state, updates = train_step(params, opt_state, batch)
            log_update_ratios(writer, params, updates, step, every=100)
            params = new_params

No TensorFlow is imported.
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.writer import (
    Counts,
    SummaryWriter,
    histogram_description,
    ratio_description,
    ratios_from_norms,
)

__all__ = ["update_ratios", "log_update_ratios", "pytree_tags"]

# The tag of a pytree that is a single array (its path is empty).
SINGLE_LEAF_TAG = "params"


def update_ratios(params: Any, updates: Any) -> dict[str, float]:
    """‖u‖₂ / ‖p‖₂ of each leaf of `params` and the optax update `u` of it that
    `optax.apply_updates(params, updates)` applies: the weight-update ratio of the step.

    One jitted function computes every leaf's norms on the leaves' device, each as
    max|x| · ‖x / max|x|‖₂ (no overflow, no underflow; float32 for 16-bit and float32
    leaves, float64 for float64 ones), then the ratios are formed in float64 on the host:
    `+inf` when ‖p‖ = 0 < ‖u‖, 0 when ‖u‖ = 0, NaN when either is not finite. Leaves that
    are not floating-point (integer counters) are left out.

    Args:
      params: the parameters before the update, a pytree of arrays.
      updates: the updates, a pytree of the same structure.

    Returns:
      {tag: ratio} in the leaves' order (`jax.tree_util` flattening order); tag = the
      leaf's path joined by '/' (`pytree_tags`).

    Raises:
      ValueError: `params` and `updates` do not have the same structure and shapes.
    """
    tags, (p_leaves, u_leaves), _ = _flattened(params, updates)
    if not tags:
        return {}
    ratios = _ratios(p_leaves, u_leaves)
    return {tag: float(r) for tag, r in zip(tags, ratios)}


def log_update_ratios(
    writer: SummaryWriter,
    params: Any,
    updates: Any,
    step: int,
    *,
    every: int = 1,
    histograms: bool = False,
    learning_rate: Any = None,
) -> bool:
    """Write `update_ratios(params, updates)` at `step` when `step` is a multiple of
    `every` (else return False at once), as `watch` writes ratios: same tags order (model
    order), descriptions, skipped-step marker (1 when every ratio is 0, as with
    `optax.apply_if_finite` skipping a non-finite update), and with `histograms=True` the
    histograms of the elementwise ratios |u_i| / |p_i| (bucketed on the device; counts only
    come to the host).

    Args:
      writer: a `tb_wur_plugin.writer.SummaryWriter`.
      params, updates: as for `update_ratios`; `params` before the update.
      step: the step (the number of updates before this one).
      every: log only when `step % every == 0`.
      histograms: also write the elementwise histograms.
      learning_rate: a learning rate to write beside the ratios, or None.

    Returns:
      True if written.
    """
    step = operator.index(step)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive int, got {every!r}")
    if step % every:
        return False
    if not isinstance(writer, SummaryWriter):
        raise TypeError(f"writer must be a tb_wur_plugin.writer.SummaryWriter, got {writer!r}")
    tags, (p_leaves, u_leaves), about = _flattened(params, updates)
    if not tags:
        return False
    ratios = _ratios(p_leaves, u_leaves)
    writer.add_ratios(
        dict(zip(tags, map(float, ratios))),
        step,
        descriptions={tag: ratio_description(tag, *info) for tag, info in zip(tags, about)},
    )
    if histograms:
        counts = np.asarray(jax.device_get(_histogram_counts(p_leaves, u_leaves)))
        writer.add_histograms(
            {tag: Counts(c) for tag, c in zip(tags, counts)},
            step,
            descriptions={
                tag: histogram_description(tag, *info) for tag, info in zip(tags, about)
            },
        )
    if learning_rate is not None:
        writer.add_learning_rate(learning_rate, step)
    return True


def pytree_tags(tree: Any) -> list[str]:
    """The tag of each leaf of `tree`: its path joined by '/', dict keys as `str(key)`,
    sequence indices as decimal numbers, namedtuple and dataclass fields by name; a path
    taken by an earlier leaf gets the first suffix '_1', '_2', ... that is no leaf's path
    (as `watch` does with variable paths)."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    return _unique([_path_tag(path) for path in paths])


# --- internals --------------------------------------------------------------------------------


def _path_tag(path) -> str:
    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(key.name)
        elif isinstance(key, jax.tree_util.FlattenedIndexKey):
            parts.append(str(key.key))
        else:
            parts.append(str(key))
    return "/".join(parts) if parts else SINGLE_LEAF_TAG


def _unique(paths: list[str]) -> list[str]:
    every_path, taken, tags = set(paths), set(), []
    for path in paths:
        tag, suffix = path, 0
        while tag in taken or (suffix and tag in every_path):
            suffix += 1
            tag = f"{path}_{suffix}"
        taken.add(tag)
        tags.append(tag)
    return tags


def _flattened(params: Any, updates: Any):
    """The tags, the floating-point leaves of params and updates, and each one's (shape,
    dtype name)."""
    with_paths, params_def = jax.tree_util.tree_flatten_with_path(params)
    u_leaves, updates_def = jax.tree_util.tree_flatten(updates)
    if params_def != updates_def:
        raise ValueError(
            f"params and updates must have the same structure, got {params_def} and "
            f"{updates_def}"
        )
    tags = _unique([_path_tag(path) for path, _ in with_paths])
    kept_tags, kept_p, kept_u, about = [], [], [], []
    for tag, (_, p), u in zip(tags, with_paths, u_leaves):
        p_shape, u_shape = np.shape(p), np.shape(u)
        if p_shape != u_shape:
            raise ValueError(f"the update of {tag!r} has shape {u_shape}, the leaf {p_shape}")
        dtype = jnp.result_type(p)
        if not jnp.issubdtype(dtype, jnp.inexact):
            continue
        if metadata.is_reserved_tag(tag):
            raise ValueError(
                f"the leaf at {tag!r} is in the namespace {metadata.RESERVED_TAG_PREFIX!r} "
                "reserved for the plugin's own series; rename its key"
            )
        kept_tags.append(tag)
        kept_p.append(p)
        kept_u.append(u)
        about.append((p_shape, np.dtype(dtype).name))
    return kept_tags, (kept_p, kept_u), about


def _ratios(p_leaves: list, u_leaves: list) -> np.ndarray:
    tops, sums = jax.device_get(_norm_parts(p_leaves, u_leaves))
    tops, sums = np.asarray(tops, np.float64), np.asarray(sums, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.where(tops == 0, 0.0, tops * np.sqrt(sums))
    return ratios_from_norms(norms[1], norms[0])


def _work(x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        x = jnp.abs(x)
    return x if x.dtype == jnp.float64 else x.astype(jnp.float32)


def _scaled_norm_parts(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """max|x| and Σ(x / max|x|)² (Σx² when max|x| = 0): ‖x‖ = max · √Σ."""
    magnitude = jnp.abs(_work(x))
    top = jnp.max(magnitude, initial=0.0) if magnitude.size else jnp.zeros((), magnitude.dtype)
    scale = jnp.where(top > 0, top, jnp.ones_like(top))
    return top, jnp.sum(jnp.square(magnitude / scale))


@jax.jit
def _norm_parts(p_leaves: list, u_leaves: list) -> tuple[jax.Array, jax.Array]:
    """[2, n] maxima and [2, n] scaled sums of squares: row 0 of the params, row 1 of the
    updates."""
    parts = [[_scaled_norm_parts(x) for x in leaves] for leaves in (p_leaves, u_leaves)]
    dtype = jnp.result_type(*[top for row in parts for top, _ in row])
    tops = jnp.stack([jnp.stack([top.astype(dtype) for top, _ in row]) for row in parts])
    sums = jnp.stack([jnp.stack([s.astype(dtype) for _, s in row]) for row in parts])
    return tops, sums


@jax.jit
def _histogram_counts(p_leaves: list, u_leaves: list) -> jax.Array:
    """int32[n, NUM_BUCKETS]: the bucket counts of each leaf's |u_i| / |p_i| (0 where
    u_i = 0), as `numpy_bucketing.bucket_counts` counts them."""
    return jnp.stack([_bucket_counts(_elementwise(p, u)) for p, u in zip(p_leaves, u_leaves)])


def _elementwise(p: jax.Array, u: jax.Array) -> jax.Array:
    p, u = _work(p), _work(u)
    return jnp.abs(jnp.where(u == 0, jnp.zeros_like(u), u / p)).reshape(-1)


def _bucket_counts(values: jax.Array) -> jax.Array:
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

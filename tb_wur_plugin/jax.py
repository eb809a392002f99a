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
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays import jax_math, jax_spectral
from tb_wur_plugin.arrays.spectral import TRAILING_FAN_OUT, SpectralState
from tb_wur_plugin.event_write import (
    LoggedLayer,
    LoggedStep,
    LoggedStepWriter,
    SummaryWriter,
    TrainingJudgement,
    watch_arguments,
)

__all__ = ["update_ratios", "log_update_ratios", "pytree_tags"]

# The tag of a pytree that is a single array (its path is empty).
SINGLE_LEAF_TAG = "params"


def update_ratios(params: Any, updates: Any) -> dict[str, float]:
    """‖u‖₂ / ‖p‖₂ of each leaf of `params` and the optax update `u` of it that
    `optax.apply_updates(params, updates)` applies: the weight-update ratio of the step.

    One jitted function computes every leaf's norms on the leaves' device, each from its
    sum of squares, taken again as max|x| · ‖x / max|x|‖₂ where it may have overflowed or
    underflowed (float32 for 16-bit and float32 leaves, float64 for float64 ones;
    `arrays.jax_math.norm_parts`), then the ratios are formed in float64 on the host:
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
    ratios = jax_math.ratios(p_leaves, u_leaves)
    return {tag: float(r) for tag, r in zip(tags, ratios)}


def log_update_ratios(
    writer: SummaryWriter | None,
    params: Any,
    updates: Any,
    step: int,
    *,
    every: int = 1,
    histograms: bool = False,
    learning_rate: Any = None,
    spectral: bool = False,
    judgement: TrainingJudgement | None = None,
) -> bool:
    """Write `update_ratios(params, updates)` at `step` when `step` is a multiple of
    `every` (else return False at once), as `watch` writes ratios: same tags order (model
    order), descriptions, skipped-step marker (1 when every ratio is 0, as with
    `optax.apply_if_finite` skipping a non-finite update), and with `histograms=True` the
    histograms of the elementwise ratios |u_i| / |p_i| (bucketed on the device; counts only
    come to the host).

    Several processes (multi-controller JAX, `jax.distributed.initialize`): every process
    calls this on the same steps with the same arguments, process 0 with its writer and
    the others with `writer=None`. Every process takes part in the computation (the norms
    of globally sharded arrays are collectives over all processes' devices); only process
    0 writes, so the run has one event file.

    Acting while training: process 0's writer judges every step it writes
    (`SummaryWriter(..., on_flag=, stop_on=, patience=, low=, high=)`: `writer.flags`,
    `writer.should_stop`). A process that passes `writer=None` judges nothing unless given
    `judgement`, a `tb_wur_plugin.writer.TrainingJudgement` made with the same settings:
    it then judges the same ratios (those of the computation every process takes part in,
    the same numbers on every process), so that every process fires the same flags and
    reaches the same `judgement.should_stop` at the same step.

    Args:
      writer: a `tb_wur_plugin.writer.SummaryWriter` on process 0; None on the other
        processes of a multi-process run.
      params, updates: as for `update_ratios`; `params` before the update.
      step: the step (the number of updates before this one).
      every: log only when `step % every == 0`.
      histograms: also write the elementwise histograms.
      learning_rate: a learning rate to write beside the ratios, or None.
      spectral: also write the spectral update ratio ‖u‖₂ / ‖p‖₂ (largest singular
        values) of each real leaf of two or more dimensions, viewed as the matrix
        (prod(kernel) · in, out) of a flax kernel (`metric="spectral"`, same step and
        skipped-step marker). Lanczos iterations on the leaves' device, warm-started from
        the vectors of the previous logged step, which are kept per `writer` (and tag):
        one writer per run keeps them between calls; they go with the writer (with
        `writer=None`, with `judgement`).
      judgement: with `writer=None`, the `TrainingJudgement` that judges this process's
        logged steps (one per run, as the writer is); None: not judged. With a writer,
        None or `writer.judgement` (the writer judges what it writes).

    Returns:
      True if written.

    Raises:
      ValueError: on a step to log, `params` has no floating-point leaf (as
        `SummaryWriter.add_ratios` refuses an empty mapping), or `params` and `updates` do
        not have the same structure and shapes; `every` is below 1.
      TypeError: `every` is not an int, `histograms` or `spectral` not a bool
        (`event_write.watch_arguments`); `writer` is not a `SummaryWriter` (or None off
        process 0).
      ValueError: process 0 passed `writer=None` (nothing would be written), or another
        process passed a writer (a second event file for the run); a writer and a
        `judgement` other than its own.
      TypeError: `judgement` is not a `TrainingJudgement`.

    Example (every process; process 0 writes, all stop alike):
      >>> if jax.process_index() == 0:
      ...     writer = SummaryWriter("logs/run1", stop_on={"nan"})
      ...     judgement = writer.judgement
      ... else:
      ...     writer, judgement = None, TrainingJudgement(stop_on={"nan"})
      >>> log_update_ratios(writer, params, updates, step, every=100, judgement=judgement)
      >>> if judgement.should_stop:
      ...     break
    """
    step = operator.index(step)
    every, histograms, spectral = watch_arguments(every, histograms, spectral)
    if step % every:
        return False
    _check_writer(writer, judgement)
    tags, (p_leaves, u_leaves), about = _flattened(params, updates)
    if not tags:  # a caller's mistake (say, an empty trainable subtree): no empty run
        raise ValueError(
            "log_update_ratios: params has no floating-point leaf (integer leaves are left "
            "out), so there is no ratio to log; pass the trainable parameters and their "
            "updates"
        )
    ratios = jax_math.ratios(p_leaves, u_leaves)
    # the warm-start vectors' key: the run's writer, else its judgement, else the process's
    key = writer if writer is not None else judgement if judgement is not None else _OTHER_PROCESS
    spectral_ratios = None
    if spectral:
        matrices = _matrices(about)
        values = _spectral_values(tags, p_leaves, u_leaves, about, key) if matrices else []
        spectral_ratios = {i: float(r) for i, r in zip(matrices, values)}
    counts = None
    if histograms:
        counts = np.asarray(jax.device_get(jax_math.histogram_counts(p_leaves, u_leaves)))
    if writer is None and judgement is None:  # its part of the computation is done
        return False
    layers = [LoggedLayer(tag, shape, dtype) for tag, (shape, dtype) in zip(tags, about)]
    steps = LoggedStepWriter(writer) if writer is not None else LoggedStepWriter(None, judgement)
    steps.write(LoggedStep(
        step, layers, ratios, spectral=spectral_ratios, histograms=counts,
        learning_rate=learning_rate,
    ))
    return writer is not None


class _OtherProcess:
    """The key of the warm-start vectors of a process that neither writes nor judges
    (weakly held like a writer, so it lives as long as the module)."""


_OTHER_PROCESS = _OtherProcess()


def _check_writer(writer: SummaryWriter | None, judgement: TrainingJudgement | None) -> None:
    if judgement is not None and not isinstance(judgement, TrainingJudgement):
        raise TypeError(f"judgement must be a tb_wur_plugin.writer.TrainingJudgement or None, "
                        f"got {type(judgement).__name__}")
    index = jax.process_index()
    if writer is None:
        if index == 0:
            raise ValueError(
                "log_update_ratios: writer=None on process 0; process 0 writes the run, so "
                "pass it a SummaryWriter (writer=None is for the other processes of a "
                "multi-process run)"
            )
        return
    if not isinstance(writer, SummaryWriter):
        raise TypeError(f"writer must be a tb_wur_plugin.writer.SummaryWriter, got {writer!r}")
    if index != 0:
        raise ValueError(
            f"log_update_ratios: process {index} passed a writer; only process 0 writes "
            "(one event file per run), the other processes pass writer=None"
        )
    if judgement is not None and judgement is not writer.judgement:
        raise ValueError(
            "log_update_ratios: the writer judges what it writes (SummaryWriter(..., "
            "stop_on=...)); pass judgement= only with writer=None, or writer.judgement")


def _matrices(about: list) -> list[int]:
    """Indices of the real leaves of two or more dimensions (a complex leaf has no
    spectral ratio here)."""
    return [
        i for i, (shape, dtype) in enumerate(about)
        if len(shape) >= 2 and not np.issubdtype(np.dtype(dtype), np.complexfloating)
    ]


def _spectral_values(tags, p_leaves, u_leaves, about, key) -> np.ndarray:
    matrices = _matrices(about)
    state = _SPECTRAL_STATES.setdefault(key, SpectralState())
    return jax_spectral.spectral_ratios(
        [tags[i] for i in matrices], [p_leaves[i] for i in matrices],
        [u_leaves[i] for i in matrices], state, TRAILING_FAN_OUT,
    )


def pytree_tags(tree: Any) -> list[str]:
    """The tag of each leaf of `tree`: its path joined by '/', dict keys as `str(key)`,
    sequence indices as decimal numbers, namedtuple and dataclass fields by name; a path
    taken by an earlier leaf gets the first suffix '_1', '_2', ... that is no leaf's path
    (as `watch` does with variable paths)."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    return _unique([_path_tag(path) for path in paths])


# --- internals --------------------------------------------------------------------------------

# The warm-start vectors of `log_update_ratios(..., spectral=True)`, per writer (with
# `writer=None`, per judgement, or the process's `_OTHER_PROCESS`), held weakly.
_SPECTRAL_STATES: "weakref.WeakKeyDictionary[Any, SpectralState]" = (
    weakref.WeakKeyDictionary()
)


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
    dtype name); what depends only on the structure, shapes and dtypes is worked out once
    per such signature (`_kept_leaves`)."""
    p_leaves, params_def = jax.tree_util.tree_flatten(params)
    u_leaves, updates_def = jax.tree_util.tree_flatten(updates)
    if params_def != updates_def:
        raise ValueError(
            f"params and updates must have the same structure, got {params_def} and "
            f"{updates_def}"
        )
    leaves = tuple((np.shape(p), _dtype_of(p)) for p in p_leaves)
    tags, indices, about = _kept_leaves(params, params_def, leaves)
    for tag, (shape, _), u in zip(tags, leaves, u_leaves):
        if np.shape(u) != shape:
            raise ValueError(f"the update of {tag!r} has shape {np.shape(u)}, the leaf {shape}")
    return ([tags[i] for i in indices],
            ([p_leaves[i] for i in indices], [u_leaves[i] for i in indices]), list(about))


def _dtype_of(leaf: Any) -> np.dtype:
    dtype = getattr(leaf, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.dtype(jnp.result_type(leaf))


# The `_kept_leaves` of the latest few (structure, leaves' shapes and dtypes) signatures.
_KEPT_LEAVES: dict = {}
_KEPT_LEAVES_SIZE = 8
_KEPT_LEAVES_LOCK = threading.Lock()


def _kept_leaves(params: Any, treedef: Any, leaves: tuple) -> tuple[tuple, tuple, tuple]:
    """The tags of all the leaves of `params` (of structure `treedef`, its leaves of the
    (shape, dtype) of `leaves`), the indices of its floating-point ones and their (shape,
    dtype name); kept for the next calls with the same signature.

    Raises:
      ValueError: a floating-point leaf's tag is in the plugin's reserved namespace.
    """
    signature = (treedef, leaves)
    with _KEPT_LEAVES_LOCK:
        kept = _KEPT_LEAVES.get(signature)
    if kept is not None:
        return kept
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    tags = _unique([_path_tag(path) for path in paths])
    indices, about = [], []
    for index, (tag, (shape, dtype)) in enumerate(zip(tags, leaves)):
        if not jnp.issubdtype(dtype, jnp.inexact):
            continue
        if metadata.is_reserved_tag(tag):
            raise ValueError(
                f"the leaf at {tag!r} is in the namespace {metadata.RESERVED_TAG_PREFIX!r} "
                "reserved for the plugin's own series; rename its key"
            )
        indices.append(index)
        about.append((shape, dtype.name))
    kept = (tuple(tags), tuple(indices), tuple(about))
    with _KEPT_LEAVES_LOCK:
        if len(_KEPT_LEAVES) >= _KEPT_LEAVES_SIZE:
            del _KEPT_LEAVES[next(iter(_KEPT_LEAVES))]
        _KEPT_LEAVES[signature] = kept
    return kept

"""Weight-update ratios and `watch`, which logs them around an optimizer step.

For one variable with values w before and w' after a step, Δw = w' − w and

    ratio = ‖Δw‖₂ / ‖w‖₂        (+inf if ‖w‖ = 0 < ‖Δw‖, 0 if both are 0, NaN if not finite)

computed from sums of squares (see `update_ratios`). The elementwise ratios |Δw_i| / |w_i|
follow the same conventions (0 where Δw_i = 0, +inf where w_i = 0 < |Δw_i|).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata, summary


class WatchedVariable(NamedTuple):
    tag: str
    variable: tf.Variable


def update_ratios(before: Sequence[tf.Tensor], after: Sequence[tf.Tensor]) -> tf.Tensor:
    """float64[n]: ‖after_i − before_i‖₂ / ‖before_i‖₂ for each pair, with the conventions above.

    Variables of up to FUSED_MAX_ELEMENTS elements are summed together, exactly, in float64
    (a few ops for all of them). Larger ones are summed one after the other, so that one
    update Δw is held at a time, in one pass each in their own precision (at least float32;
    relative error about 1e-7); where such a sum may have overflowed, underflowed or is not
    finite, they are summed again exactly in float64.
    """
    if not before:
        return tf.zeros([0], tf.float64)
    small, large = [], []
    for index, old in enumerate(before):
        (small if _size(old) <= FUSED_MAX_ELEMENTS else large).append(index)
    parts, order = [], small + large
    if small:
        parts.append(_fused_exact_sums([before[i] for i in small], [after[i] for i in small]))
    if large:
        old, new = [before[i] for i in large], [after[i] for i in large]
        weights, updates = _sums_one_by_one(old, new, exact=False)
        suspect = ~(
            tf.math.is_finite(weights) & tf.math.is_finite(updates)
            & (weights > _SMALLEST_SAFE_SUM) & (updates > _SMALLEST_SAFE_SUM)
        )
        parts.append(tf.cond(
            tf.reduce_any(suspect),
            lambda: _sums_one_by_one(old, new, exact=True),
            lambda: (weights, updates),
        ))
    inverse = np.argsort(order)
    weights = tf.gather(tf.concat([w for w, _ in parts], 0), inverse)
    updates = tf.gather(tf.concat([u for _, u in parts], 0), inverse)
    ratio = tf.where(updates == 0, tf.zeros_like(updates), tf.sqrt(updates) / tf.sqrt(weights))
    finite = tf.math.is_finite(weights) & tf.math.is_finite(updates)
    return tf.where(finite, ratio, tf.fill(tf.shape(ratio), tf.constant(float("nan"), tf.float64)))


FUSED_MAX_ELEMENTS = 1 << 16

# Below this a float32 sum of squares may have lost precision to underflow.
_SMALLEST_SAFE_SUM = 1e-30


def _size(tensor: tf.Tensor) -> float:
    size = tensor.shape.num_elements()
    return float("inf") if size is None else size


def _fused_exact_sums(before, after) -> tuple[tf.Tensor, tf.Tensor]:
    """float64 vectors Σw² and Σ(Δw)² of small variables, from one flat float64 copy of all."""
    old, new = _flat_float64(before), _flat_float64(after)
    sizes = [_size(t) for t in before]
    segments = tf.constant(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes))
    return (
        tf.math.segment_sum(tf.square(old), segments),
        tf.math.segment_sum(tf.square(new - old), segments),
    )


def _flat_float64(tensors: Sequence[tf.Tensor]) -> tf.Tensor:
    """All elements of `tensors`, concatenated, as float64 (one cast when the dtypes agree)."""
    flat_shape = tf.constant([-1])
    flat = [tf.reshape(t, flat_shape) for t in tensors]
    if len({t.dtype for t in tensors}) == 1:
        return tf.cast(tf.concat(flat, 0), tf.float64)
    return tf.concat([tf.cast(t, tf.float64) for t in flat], 0)


def _sums_one_by_one(before, after, exact: bool) -> tuple[tf.Tensor, tf.Tensor]:
    """float64 vectors Σw² and Σ(Δw)², one variable after the other; in float64 if `exact`,
    else in the variables' precision (float32 for float16/bfloat16/float32)."""
    weights, updates, previous = [], [], []
    for old, new in zip(before, after):
        dtype = tf.float64 if exact or old.dtype == tf.float64 else tf.float32
        with tf.control_dependencies(previous):
            old_value = tf.cast(old, dtype)
            delta = tf.cast(new, dtype) - old_value
            update = 2.0 * tf.nn.l2_loss(delta)
        weights.append(tf.cast(2.0 * tf.nn.l2_loss(old_value), tf.float64))
        updates.append(tf.cast(update, tf.float64))
        previous = [update]
    return tf.stack(weights), tf.stack(updates)


def elementwise_ratios(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """|after − before| / |before| elementwise, 0 where nothing moved (at least float32)."""
    dtype = tf.float64 if before.dtype == tf.float64 else tf.float32
    old = tf.cast(before, dtype)
    delta = tf.cast(after, dtype) - old
    return tf.where(delta == 0, tf.zeros_like(delta), tf.abs(delta) / tf.abs(old))


def watched_variables(variables: Any) -> list[WatchedVariable]:
    """The trainable floating-point variables among `variables`, each with a unique tag.

    The tag is the Keras variable path, else the TensorFlow name without ':0'. A path
    taken by an earlier variable gets the first suffix '_1', '_2', ... that is no variable's
    path. Integer and non-trainable variables are skipped; anything that is not a variable
    raises TypeError, a path in the plugin's reserved namespace ValueError.
    """
    if isinstance(variables, (tf.Variable, str, bytes)) or hasattr(variables, "path"):
        variables = [variables]
    try:
        candidates = list(variables)
    except TypeError:
        raise TypeError(
            f"variables must be a variable or an iterable of variables, got "
            f"{type(variables).__name__}"
        ) from None
    kept: list[tuple[str, tf.Variable]] = []
    seen: set[int] = set()
    for candidate in candidates:
        variable = _tf_variable(candidate)
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        if not getattr(candidate, "trainable", True) or not variable.dtype.is_floating:
            continue
        kept.append((_variable_path(candidate), variable))
    paths = {path for path, _ in kept}
    taken: set[str] = set()
    watched = []
    for path, variable in kept:
        if metadata.is_reserved_tag(path):
            raise ValueError(
                f"variable path {path!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which "
                "is reserved for the plugin's own series; rename the layer or variable"
            )
        tag, suffix = path, 0
        while tag in taken or (suffix and tag in paths):  # keep other variables' paths free
            suffix += 1
            tag = f"{path}_{suffix}"
        taken.add(tag)
        watched.append(WatchedVariable(tag, variable))
    return watched


def snapshot(watched: Sequence[WatchedVariable]) -> list[tf.Tensor]:
    """The current values of the watched variables (copied only when later overwritten)."""
    return [w.variable.value() for w in watched]


def record(
    watched: Sequence[WatchedVariable],
    before: Sequence[tf.Tensor],
    step: Any,
    histograms: bool = False,
):
    """Write the ratio (and histogram) of each watched variable's change since `before`,
    and the skipped-step marker (1 if no watched variable changed).

    Writes to the default writer regardless of `record_if`: the caller decided to record
    when it took the snapshot. Eagerly, one traced function computes all ratios at once.
    """
    tags = tuple(w.tag for w in watched)
    variables = [w.variable for w in watched]
    write = _traced_for_default_writer() if tf.executing_eagerly() else _write_ratios
    return write(tags, variables, list(before), _read_step(step), histograms)


@contextlib.contextmanager
def watch(variables: Any, step: Any = None, histograms: bool = False) -> Iterator[None]:
    """Log the weight-update ratio of each of `variables` for the update made in the block.

    Snapshots the variables on entry and writes, on exit, one ratio per variable (and with
    `histograms=True` the histogram of its elementwise ratios) at `step`, read on entry.
    When summaries are not being recorded (no default writer, or `record_if` false) it
    reads, computes and writes nothing. Inside a `tf.function` traced without a default
    writer, or under a constant `record_if(False)`, it adds no op at all; with a writer and a
    tensor or callable `record_if` condition it adds one conditional on entry and one on
    exit, which run the snapshot and the ratios only when the condition holds.
    """
    watched = watched_variables(variables)
    recording = summary.static_recording()
    if recording is None and tf.executing_eagerly():
        recording = bool(tf.summary.should_record_summaries())
    if recording is False or not watched:
        yield
        return
    summary.check_default_writer_open("wur_summary.watch")
    if step is None:
        step = tf.summary.experimental.get_step()
    if step is None:
        raise ValueError(
            "wur_summary.watch: no step set; pass step= or call "
            "tf.summary.experimental.set_step()"
        )
    if recording:  # known now: eagerly, or constant conditions in a graph
        step_value = _read_step(step)
        before = snapshot(watched)
        yield
        record(watched, before, step_value, histograms)
        return

    def take_snapshot():
        return _read_step(step), [tf.identity(value) for value in snapshot(watched)]

    def no_snapshot():
        return tf.constant(0, tf.int64), [tf.zeros([0], w.variable.dtype) for w in watched]

    should_record = tf.summary.should_record_summaries()
    step_value, before = tf.cond(should_record, take_snapshot, no_snapshot)
    yield
    tf.cond(
        should_record,
        lambda: record(watched, before, step_value, histograms),
        lambda: tf.constant(False),
    )


def _write_ratios(
    tags: tuple[str, ...],
    variables: list[tf.Variable],
    before: list[tf.Tensor],
    step: tf.Tensor,
    histograms: bool,
) -> tf.Tensor:
    after = [v.value() for v in variables]
    ratios = update_ratios(before, after)
    skipped = tf.cast(tf.reduce_all(ratios == 0), tf.float32)[tf.newaxis]
    abouts = [f"of {tag}: shape {v.shape.as_list()}, {v.dtype.name}" for tag, v in zip(tags, variables)]
    with tf.summary.record_if(True):
        written = [
            summary.write_scalars(
                [*tags, metadata.SKIPPED_STEP_TAG],
                tf.concat([summary.to_stored_scalar(ratios), skipped], 0),
                step,
                [
                    *(
                        metadata.create_summary_metadata(
                            metadata.KIND_RATIO, f"Weight-update ratio {about}", index
                        )
                        for index, about in enumerate(abouts)
                    ),
                    metadata.create_summary_metadata(
                        metadata.KIND_SKIPPED_STEP,
                        "1 where no watched variable changed (the optimizer skipped the step)",
                    ),
                ],
            )
        ]
        if histograms:
            for index, (tag, about) in enumerate(zip(tags, abouts)):
                written.append(
                    summary.write(
                        metadata.histogram_tag(tag),
                        lambda i=index: summary.bucket_counts(
                            elementwise_ratios(before[i], after[i])
                        ),
                        step,
                        metadata.create_summary_metadata(
                            metadata.KIND_HISTOGRAM, f"Elementwise update ratios {about}"
                        ),
                    )
                )
    return tf.reduce_all(tf.stack(written))


# A traced function captures the writer it was traced with and does not retrace for another
# one, so each writer gets its own.
_traced_by_writer: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _traced_for_default_writer():
    writer = summary.default_writer()
    traced = _traced_by_writer.get(writer)
    if traced is None:
        traced = _traced_by_writer[writer] = tf.function(_write_ratios, reduce_retracing=True)
    return traced


def _read_step(step: Any) -> tf.Tensor:
    return tf.cast(tf.identity(step), tf.int64)


def _tf_variable(candidate: Any) -> tf.Variable:
    if isinstance(candidate, tf.Variable):
        return candidate
    inner = getattr(candidate, "value", None)  # a Keras 3 Variable wraps a tf.Variable
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError(
        f"wur_summary.watch takes tf.Variable or keras.Variable objects, got "
        f"{type(candidate).__name__}: {candidate!r:.80}"
    )


def _variable_path(candidate: Any) -> str:
    path = getattr(candidate, "path", None)
    if isinstance(path, str) and path:
        return path
    name = candidate.name
    return name[:-2] if name.endswith(":0") else name

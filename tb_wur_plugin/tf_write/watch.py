"""`watch`: logs the weight-update ratios of the update made in its block, and `record`,
which writes them for a snapshot taken before an update (the Keras callback's way)."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.tf_write.batched_write import (
    histogram_chunks,
    ratio_chunks,
    spectral_chunks,
    to_stored_scalar,
    write_packed_histograms,
    write_packed_ratios,
)
from tb_wur_plugin.tf_write.capture import captured_changes
from tb_wur_plugin.tf_write.concrete_calls import ConcreteCalls, tensor_types
from tb_wur_plugin.tf_write.ratios import histogram_counts, partition, update_ratios
from tb_wur_plugin.tf_write.spectral import matrix_shape, spectral_ratios, warm_vectors
from tb_wur_plugin.tf_write.recording import (
    MetadataOnce,
    check_default_writer_open,
    default_writer_resource,
    static_recording,
)
from tb_wur_plugin.tf_write.variables import WatchedVariable, snapshot, watched_variables, writes_summaries


NOTHING_TO_WATCH = (
    "wur_summary.watch: none of the variables is a trainable floating-point variable "
    "(integer and non-trainable ones are skipped; a model whose layers are all frozen, or "
    "one not built yet, has none), so no ratio is written for this update"
)


def _captures_changes(optimizer: Any, watched: Sequence[WatchedVariable]) -> bool:
    """Whether `watch` takes Δw from `optimizer`'s updates (`captured_changes`): a Keras
    optimizer, outside `tf.distribute` (whose updates go to each replica's copy).

    Raises:
      TypeError: `optimizer` is neither None nor a Keras optimizer.
      ValueError: Keras's backend is not TensorFlow's.
    """
    if optimizer is None:
        return False
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"wur_summary.watch: optimizer must be a keras.optimizers.Optimizer, whose updates "
            f"go through the variables' assign methods; got {type(optimizer).__name__}. "
            "Leave optimizer out to compare the weights before and after instead."
        )
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"wur_summary.watch: optimizer= needs Keras's TensorFlow backend, not "
            f"{keras.backend.backend()!r}"
        )
    return not tf.distribute.has_strategy() and not any(
        isinstance(w.variable, tf.distribute.DistributedValues) for w in watched
    )


def record(
    watched: Sequence[WatchedVariable],
    before: Sequence[tf.Tensor],
    step: Any,
    histograms: bool = False,
    changes: Sequence[tf.Tensor | None] | None = None,
    spectral: bool = False,
) -> bool | tf.Tensor:
    """Write the ratio (and histogram) of each watched variable's change since `before`,
    and the skipped-step marker (1 if no watched variable changed), as packed series
    (`metadata`'s protocol version 3): the ratios and the marker as one float32 tensor per
    chunk of layers, the histograms as one of varint counts per chunk, in two events; with
    `spectral`, the spectral ratios of the variables of two or more dimensions and the same
    marker in a third (`tf_write.spectral`).

    Writes to the default writer regardless of `record_if`: the caller decided to record
    when it took the snapshot. Eagerly, one traced function computes all ratios at once.

    Args:
      watched: the variables, as `watched.watched_variables` gives them.
      before: their values before the update (`watched.snapshot`).
      step: the step to write at.
      histograms: also write the histograms of the elementwise ratios.
      changes: optional, per variable, Δw as `captured_changes` gives it (then the ratio
        reads no variable), or None.
      spectral: also write the spectral ratios ‖ΔW‖₂ / ‖W‖₂ (`metadata.KIND_PACKED_SPECTRAL`)
        of the variables of two or more dimensions, warm-started from the vectors this
        process kept for each variable at its previous logged step.

    Returns:
      Whether it wrote (False for no writer or a no-op writer); in a graph, a boolean tensor.

    Raises:
      RuntimeError: the default writer is closed.
    """
    writer = default_writer_resource("wur_summary.watch")
    if writer is None:  # no writer, or one that writes nothing
        return False if tf.executing_eagerly() else tf.constant(False)
    written, _ = _record(writer, watched, before, step, histograms, changes, spectral)
    return written


class StepRatios(NamedTuple):
    """A logged step's ratios on the host, as `record_ratios` wrote them (or, with no
    writer, would have).

    Attributes:
      ratios: float32[len(watched)], each variable's ratio as stored (`to_stored_scalar`).
      skipped: the step's skipped-step marker.
      matrices: the indices in `watched` of the variables with a spectral ratio.
      spectral: float32[len(matrices)], their spectral ratios as stored (empty without
        `spectral`).
    """

    ratios: np.ndarray
    skipped: bool
    matrices: tuple[int, ...]
    spectral: np.ndarray


def record_ratios(
    watched: Sequence[WatchedVariable],
    before: Sequence[tf.Tensor],
    step: int,
    histograms: bool = False,
    spectral: bool = False,
) -> StepRatios:
    """Eagerly, `record` (to the default writer) and the ratios it wrote brought to the
    host: one copy of the stored float32 ratios, the marker and the spectral ratios, for
    the judgement while training (the Keras callback). With no writer or a no-op writer (a
    non-chief worker of a multi-worker strategy) the same ratios are computed, by the same
    ops on the same values, and nothing is written.

    Args:
      watched, before, step, histograms, spectral: as for `record`.

    Returns:
      The step's `StepRatios`.

    Raises:
      RuntimeError: called inside a `tf.function`, or the default writer is closed.
    """
    if not tf.executing_eagerly():
        raise RuntimeError("record_ratios runs eagerly only")
    changes = [None] * len(watched)
    variables = [w.variable for w in watched]
    matrices = _matrices(variables, spectral)
    writer = default_writer_resource("WeightUpdateRatioCallback")
    if writer is None:
        vectors = warm_vectors([variables[i] for i in matrices])
        values = _ratio_values_calls(
            (matrices, tensor_types(before), tensor_types(changes)),
            variables + [v for pair in vectors for v in pair],
            variables, list(before), changes, matrices=matrices, vectors=vectors,
        )
    else:
        _, values = _record(writer, watched, before, step, histograms, changes, spectral)
    host = np.asarray(values)  # the one copy to the host
    count = len(watched)
    return StepRatios(host[:count], bool(host[count]), matrices, host[count + 1:])


def _matrices(variables: Sequence[Any], spectral: bool) -> tuple[int, ...]:
    """The indices of the variables with a spectral ratio (none without `spectral`)."""
    return tuple(
        i for i, v in enumerate(variables) if spectral and matrix_shape(v) is not None
    )


def _record(
    writer: tf.Tensor,
    watched: Sequence[WatchedVariable],
    before: Sequence[tf.Tensor],
    step: Any,
    histograms: bool,
    changes: Sequence[tf.Tensor | None] | None,
    spectral: bool,
) -> tuple[bool | tf.Tensor, tf.Tensor]:
    """The body of `record` with a writer: (whether it wrote, the values written as
    `_ratio_values` gives them), eagerly a bool and a tensor on the device."""
    tags = tuple(w.tag for w in watched)
    variables = [w.variable for w in watched]
    changes = list(changes or [None] * len(watched))
    # Each packed tag's metadata goes into the writer's file with its first event only.
    writer_object = tf_private.default_writer()
    ratios_once = [MetadataOnce(writer_object, (c.tag,)) for c in ratio_chunks(tags, variables)]
    histograms_once = [
        MetadataOnce(writer_object, (c.tag,)) for c in histogram_chunks(tags)
    ] if histograms else []
    matrices = _matrices(variables, spectral)
    spectral_once = [
        MetadataOnce(writer_object, (c.tag,))
        for c in spectral_chunks([tags[i] for i in matrices], [variables[i] for i in matrices])
    ] if matrices else []
    include = ([once.include for once in ratios_once],
               [once.include for once in histograms_once] or False,
               [once.include for once in spectral_once] or False)
    vectors = warm_vectors([variables[i] for i in matrices])
    if tf.executing_eagerly():
        include = tuple(tf.constant(flags) for flags in include)  # one trace for all
        written, values = _write_ratios_calls(
            (tags, histograms, matrices, tensor_types(before), tensor_types(changes),
             tuple(tuple(flags.shape) for flags in include)),
            variables + [v for pair in vectors for v in pair],
            tags, variables, list(before), _read_step(step), histograms, writer, changes,
            *include, matrices=matrices, vectors=vectors,
        )
    else:
        written, values = _write_ratios(
            tags, variables, list(before), _read_step(step), histograms, writer, changes,
            *include, matrices=matrices, vectors=vectors,
        )
    for once in ratios_once + histograms_once + spectral_once:
        written = once.written(written)
    return (bool(written) if tf.executing_eagerly() else written), values


@contextlib.contextmanager
def watch(
    variables: Any, step: Any = None, histograms: bool = False, optimizer: Any = None,
    spectral: bool = False,
) -> Iterator[None]:
    """Log the weight-update ratio of each of `variables` for the update made in the block.

    Snapshots the variables on entry and writes, on exit, one ratio ‖Δw‖₂ / ‖w‖₂ per
    variable (and with `histograms=True` the histogram of its elementwise ratios) at `step`,
    read on entry, to the default writer; also the skipped-step marker (1 when no watched
    variable changed). The layers' tags are the variables' paths
    (`watched.watched_variables`); a step's ratios and marker are one event of packed
    series, its histograms another (`record`; the protocol is in `metadata`). When
    summaries are not being recorded (no default writer, or `record_if` false) it reads,
    computes and writes nothing. When it would record but none of `variables` is a trainable
    floating-point variable, it writes nothing and warns (a `UserWarning`, which Python's
    default filter shows once per line of code; in a `tf.function`, when traced). Inside a
    `tf.function` traced without a default writer, or under a constant `record_if(False)`,
    it adds no op at all; with a writer and a tensor or callable `record_if` condition it
    adds one conditional on entry and one on exit, which run the snapshot and the ratios
    only when the condition holds.

    Under a synchronous `tf.distribute` strategy it may wrap `optimizer.apply_gradients` in
    the replica function (only replica 0 logs, as for `tf.summary`) or wrap `strategy.run`
    in cross-replica context; either way each update is logged once, by the chief alone: on
    the other workers of a multi-worker strategy it does nothing.

    Args:
      variables: a variable or an iterable of `tf.Variable`s or Keras variables; integer
        and non-trainable ones are skipped.
      step: the step to log at, read on entry (`step=optimizer.iterations` gives the number
        of updates before this one); default `tf.summary.experimental.get_step()`.
      histograms: also write the histogram of each variable's elementwise ratios.
      optimizer: the Keras optimizer whose update the block makes, or None. With it, on
        steps whose recording is known when traced (eagerly, or a function traced under a
        writer without a tensor `record_if`), Δw is what the optimizer passes to the
        variables' `assign`, `assign_add` and `assign_sub` (`capture.captured_changes`):
        no second read of the weights. That is the update the optimizer computed, which
        differs from the change of the stored weights by the float rounding of w + Δw.
        Variables whose update it cannot see so are compared before and after.
      spectral: also write, at the same step and with the same skipped-step marker, the
        spectral update ratio ‖ΔW‖₂ / ‖W‖₂ (largest singular values) of each variable of
        two or more dimensions, viewed as the matrix (prod(kernel) · in, out) of a Keras
        kernel (a bool). Computed only when the step is recorded, by Lanczos iterations
        warm-started from the variable's vectors of its previous logged step (kept in two
        non-trainable variables per variable), within 1e-3 of numpy's SVD.

    Raises:
      TypeError: something in `variables` is not a variable, `optimizer` is not a Keras
        optimizer, or `spectral` not a bool.
      ValueError: a variable path is reserved, no step is set while recording, or
        `optimizer` is given on a Keras backend other than TensorFlow's.
      NotImplementedError: under a `ParameterServerStrategy`.
      RuntimeError: the default writer is closed.

    Example:
      >>> writer = tf.summary.create_file_writer("logs/run1")
      >>> with writer.as_default():
      ...     with wur_summary.watch(model.trainable_variables, step=optimizer.iterations,
      ...                            optimizer=optimizer):
      ...         optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
    if not isinstance(spectral, bool):
        raise TypeError(f"wur_summary.watch: spectral must be a bool, got {spectral!r}")
    watched = watched_variables(variables)
    capturing = _captures_changes(optimizer, watched)
    recording = static_recording()
    if recording is None and tf.executing_eagerly():
        recording = bool(tf.summary.should_record_summaries())
    if recording is False:
        yield
        return
    if not watched:  # nothing to write: say so rather than leave an empty run
        warnings.warn(NOTHING_TO_WATCH, UserWarning, stacklevel=3)  # the `with` line
        yield
        return
    if not writes_summaries(watched):  # a non-chief worker: the chief logs this update
        yield
        return
    check_default_writer_open("wur_summary.watch")
    if step is None:
        step = tf.summary.experimental.get_step()
    if step is None:
        raise ValueError(
            "wur_summary.watch: no step set; pass step= or call "
            "tf.summary.experimental.set_step()"
        )
    if not recording:  # decided when the graph runs
        yield from _watch_conditionally(watched, step, histograms, spectral)
        return
    step_value = _read_step(step)
    before = snapshot(watched)
    with (
        captured_changes([w.variable for w in watched]) if capturing
        else contextlib.nullcontext([None] * len(watched))
    ) as changes:
        yield
    record(watched, before, step_value, histograms, changes, spectral)


def _watch_conditionally(
    watched: Sequence[WatchedVariable], step: Any, histograms: bool, spectral: bool
) -> Iterator[None]:
    """The body of `watch` in a graph whose recording `tf.summary.should_record_summaries()`
    decides when it runs: a conditional snapshot on entry, conditional ratios on exit."""
    # The snapshot leaves the conditional as one stacked tensor per shape of small
    # variables, and as is for large ones: few outputs, so that it costs little when it
    # does not record.
    stacks, large = partition([w.variable for w in watched])

    def take_snapshot():
        values = snapshot(watched)
        return _read_step(step), (
            [tf.stack([values[i] for i in stack]) for stack in stacks],
            [tf.identity(values[i]) for i in large],
        )

    def no_snapshot():
        def empty(i, rank):
            return tf.zeros([0] * (rank or 1), watched[i].variable.dtype)

        return tf.constant(0, tf.int64), (
            [empty(stack[0], 1 + watched[stack[0]].variable.shape.rank) for stack in stacks],
            [empty(i, watched[i].variable.shape.rank) for i in large],
        )

    def record_snapshot(snapshots):
        stacked, large_values = snapshots
        before = [None] * len(watched)
        for stack, values in zip(stacks, stacked):
            for i, value in zip(stack, tf.unstack(values, num=len(stack))):  # no copy
                before[i] = value
        for i, value in zip(large, large_values):
            before[i] = value
        return record(watched, before, step_value, histograms, spectral=spectral)

    # Each branch that records is one call of a function kept out of line: when the
    # condition is false, the step skips one op instead of hundreds.
    take_snapshot = tf.function(take_snapshot, experimental_attributes=_NOT_INLINED)
    record_snapshot = tf.function(record_snapshot, experimental_attributes=_NOT_INLINED)
    should_record = tf.summary.should_record_summaries()
    step_value, stacked = tf.cond(should_record, take_snapshot, no_snapshot)
    yield
    tf.cond(should_record, lambda: record_snapshot(stacked), lambda: tf.constant(False))


_NOT_INLINED = {"_noinline": True}


def _write_ratios(
    tags: tuple[str, ...],
    variables: list[tf.Variable],
    before: list[tf.Tensor],
    step: tf.Tensor,
    histograms: bool,
    writer: tf.Tensor,
    changes: list[tf.Tensor | None],
    ratios_metadata: Any = True,
    histograms_metadata: Any = True,
    spectral_metadata: Any = True,
    *,
    matrices: tuple[int, ...] = (),
    vectors: Sequence[tuple[tf.Variable, tf.Variable]] = (),
) -> tuple[tf.Tensor, tf.Tensor]:
    """The body of `record`: the packed ratios with the skipped-step marker, the packed
    histograms, and the packed spectral ratios of the variables at `matrices` (warm-started
    from `vectors`, `spectral.warm_vectors`) with the same marker, in up to three events,
    each chunk with its metadata where `ratios_metadata` / `histograms_metadata` /
    `spectral_metadata` say so (a bool or boolean tensor for all chunks, or one per chunk:
    `batched_write.write_packed_ratios`). Returns (True once written, the values written:
    `_ratio_values`)."""
    stored, skipped = _frobenius_values(variables, before, changes)
    written = [
        write_packed_ratios(
            ratio_chunks(tags, variables), stored, skipped, step, writer, ratios_metadata,
        )
    ]
    if histograms:
        written.append(
            write_packed_histograms(
                histogram_chunks(tags), histogram_counts(before, variables, changes), step,
                writer, histograms_metadata,
            )
        )
    spectral = _spectral_values(variables, before, changes, matrices, vectors)
    if matrices:
        written.append(
            write_packed_ratios(
                spectral_chunks([tags[i] for i in matrices], [variables[i] for i in matrices]),
                spectral, skipped, step, writer, spectral_metadata,
            )
        )
    return tf.reduce_all(tf.stack(written)), _values_vector(stored, skipped, spectral)


def _ratio_values(
    variables: list[tf.Variable],
    before: list[tf.Tensor],
    changes: list[tf.Tensor | None],
    *,
    matrices: tuple[int, ...] = (),
    vectors: Sequence[tuple[tf.Variable, tf.Variable]] = (),
) -> tf.Tensor:
    """What `_write_ratios` writes, by the same ops, without writing (`_values_vector`)."""
    stored, skipped = _frobenius_values(variables, before, changes)
    spectral = _spectral_values(variables, before, changes, matrices, vectors)
    return _values_vector(stored, skipped, spectral)


def _values_vector(stored: tf.Tensor, skipped: tf.Tensor, spectral: tf.Tensor) -> tf.Tensor:
    """One float32 vector, for one copy to the host: the stored ratios (n), the skipped-step
    marker (1 or 0) and the stored spectral ratios of the variables at `matrices`."""
    return tf.concat([stored, tf.reshape(skipped, [1]), spectral], 0)


def _frobenius_values(
    variables: list[tf.Variable], before: list[tf.Tensor], changes: list[tf.Tensor | None],
) -> tuple[tf.Tensor, tf.Tensor]:
    """The ratios as stored (float32[n]) and the skipped-step marker (float32 1 or 0)."""
    for old, variable in zip(before, variables):
        old.set_shape(variable.shape)  # lost when the snapshot was taken in a conditional
    ratios = update_ratios(before, variables, changes)  # large variables read one at a time
    skipped = tf.cast(metadata.step_was_skipped(ratios, tf.reduce_all, tf.math.equal), tf.float32)
    return to_stored_scalar(ratios), skipped


def _spectral_values(
    variables: list[tf.Variable],
    before: list[tf.Tensor],
    changes: list[tf.Tensor | None],
    matrices: tuple[int, ...],
    vectors: Sequence[tuple[tf.Variable, tf.Variable]],
) -> tf.Tensor:
    """The spectral ratios of the variables at `matrices`, as stored (float32[len(matrices)];
    empty for none)."""
    if not matrices:
        return tf.zeros([0], tf.float32)
    return to_stored_scalar(spectral_ratios(
        [before[i] for i in matrices], [variables[i] for i in matrices],
        [changes[i] for i in matrices], vectors,
    ))


# The writer is an argument, not captured: one trace serves every writer (a new writer per
# `model.fit` call does not retrace); so are the flags saying whether this writer still
# needs the tags' metadata (boolean tensors: one trace for the first write and the others).
_write_ratios_traced = tf.function(_write_ratios, reduce_retracing=True)
_ratio_values_traced = tf.function(_ratio_values, reduce_retracing=True)
_write_ratios_calls = ConcreteCalls(_write_ratios_traced)
_ratio_values_calls = ConcreteCalls(_ratio_values_traced)


def _read_step(step: Any) -> tf.Tensor:
    return tf.cast(tf.identity(step), tf.int64)

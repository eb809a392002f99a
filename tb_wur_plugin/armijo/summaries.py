"""What `StochasticArmijo.minimize` writes: the step's step size, backtracks and losses, as
one event under the reserved line-search tags (`metadata.LINE_SEARCH_TAGS`)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.metadata import LINE_SEARCH_METADATAS
from tb_wur_plugin.tf_write.batched_write import to_stored_scalar, write_scalars
from tb_wur_plugin.tf_write.recording import MetadataOnce, default_writer_resource, static_recording

_CONTEXT = "StochasticArmijo.minimize"


def will_record() -> bool:
    """Whether `log_step` would add summary ops here: a default writer that is not a no-op
    one, and no constant false `tf.summary.record_if`."""
    if static_recording() is False:
        return False
    return default_writer_resource(_CONTEXT) is not None


def log_step(result: Any, step: Any = None) -> bool | tf.Tensor:
    """Write `result` (a `StepResult`) when the default writer records, at `step` (default
    `tf.summary.experimental.get_step()`).

    Without a default writer, or under a constant false `tf.summary.record_if`, it adds no
    op; under a tensor or callable `record_if` condition, one conditional.

    Returns:
      Whether it wrote: a Python bool eagerly, else a boolean tensor (or False when no op was
      added).

    Raises:
      ValueError: summaries are recorded and there is no step.
      RuntimeError: the default writer is closed.
    """
    recording = static_recording()
    if recording is None and tf.executing_eagerly():
        recording = bool(tf.summary.should_record_summaries())
    if recording is False:
        return False
    writer = default_writer_resource(_CONTEXT)
    if writer is None:  # a no-op writer
        return False
    if step is None:
        step = tf.summary.experimental.get_step()
    if step is None:
        raise ValueError(
            f"{_CONTEXT}: no step set to log the line search at; pass step= or call "
            "tf.summary.experimental.set_step()"
        )

    writer_object = tf_private.default_writer()

    def write() -> tf.Tensor:
        # the tags' metadata goes into the writer's file with their first event only
        once = MetadataOnce(writer_object, metadata.LINE_SEARCH_TAGS)
        values = tf.stack([
            to_stored_scalar(result.step_size),
            tf.cast(result.backtracks, tf.float32),
            to_stored_scalar(result.loss),
            to_stored_scalar(result.new_loss),
        ])
        return once.written(write_scalars(
            list(metadata.LINE_SEARCH_TAGS), values, step, LINE_SEARCH_METADATAS, writer,
            once.include,
        ))

    if recording:
        written = write()
    else:  # decided when the graph runs
        written = tf.cond(
            tf.summary.should_record_summaries(), write, lambda: tf.constant(False)
        )
    if tf.executing_eagerly():
        return bool(written)
    return written

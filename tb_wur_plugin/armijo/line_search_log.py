"""`StepLog`: the `StepResult`s of a `LineSearchModel`'s last steps, kept on the device for
`WeightUpdateRatioCallback`, which reads them back in bulk and writes them under the
line-search tags (`metadata.LINE_SEARCH_TAGS`).

Each searched step writes one row, in its traced train function (no host round trip):
row `step % capacity` = [step, step_size, backtracks, loss, new_loss] (float64; the step is
exact below 2^53). The callback reads the rows of the steps made since its last read before
they can be overwritten (at logged steps, epoch and training ends, and at the latest every
`capacity` steps), so a `fit` writes every step's result once, whatever writer was the
default when the train function was traced.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.metadata import LINE_SEARCH_METADATAS
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.tf_write.batched_write import to_stored_scalar, write_scalars

CAPACITY = 1024

class StepLog:
    """A ring of the last `capacity` steps' results, in a float64 `tf.Variable`."""

    def __init__(self, capacity: int | None = None):
        self.capacity = int(CAPACITY if capacity is None else capacity)
        # Column 0 holds the step of the row (-1: none yet), so that a row is never taken
        # for another step's. A plain variable also under a tf.distribute strategy's scope:
        # one row per step, written once (in cross-replica context under MirroredStrategy).
        self.rows = tf_private.local_variable(
            tf.fill([self.capacity, 5], tf.constant(-1.0, tf.float64)), name="armijo_step_log"
        )

    def record(self, step: Any, result: Any) -> Any:
        """In the train function: keep `result` (a `StepResult`) as the row of `step` (the
        number of updates before it)."""
        step = tf.cast(step, tf.int64)
        row = tf.stack([
            tf.cast(step, tf.float64),
            tf.cast(result.step_size, tf.float64),
            tf.cast(result.backtracks, tf.float64),
            tf.cast(result.loss, tf.float64),
            tf.cast(result.new_loss, tf.float64),
        ])
        index = tf.math.floormod(step, self.capacity)
        return self.rows.scatter_nd_update(index[tf.newaxis, tf.newaxis], row[tf.newaxis])

    def read(self, first: int, end: int) -> tuple[np.ndarray, int]:
        """The rows of steps first, ..., end - 1 that are held (in step order), and how many
        of these steps are not (overwritten, or never made by the search)."""
        if end <= first:
            return np.zeros([0, 5]), 0
        rows = self.rows.numpy()
        steps = np.arange(max(first, end - self.capacity), end)
        held = rows[steps % self.capacity]
        held = held[held[:, 0] == steps]
        return held, (end - first) - len(held)


def write_rows(rows: np.ndarray, writer: tf.Tensor) -> None:
    """Write each row of `rows` (as `StepLog.read` gives them) as one event of the four
    line-search series at its step, to the writer resource `writer` (that of the default
    writer), the tags' metadata with the first event written to that writer only."""
    if len(rows):
        from tb_wur_plugin.tf_write.recording import MetadataOnce

        once = MetadataOnce(tf_private.default_writer(), metadata.LINE_SEARCH_TAGS)
        once.written(_write_rows(tf.constant(rows, tf.float64), writer, tf.constant(once.include)))


@tf.function(reduce_retracing=True)
def _write_rows(rows: tf.Tensor, writer: tf.Tensor, include_metadata: tf.Tensor) -> tf.Tensor:
    # The writer is an argument, not captured: one trace serves every writer; so is whether
    # the first row carries the tags' metadata.
    for i in tf.range(tf.shape(rows)[0]):
        row = rows[i]
        values = tf.stack([
            to_stored_scalar(row[1]),
            tf.cast(row[2], tf.float32),
            to_stored_scalar(row[3]),
            to_stored_scalar(row[4]),
        ])
        write_scalars(
            list(metadata.LINE_SEARCH_TAGS), values, tf.cast(row[0], tf.int64),
            LINE_SEARCH_METADATAS, writer, include_metadata & tf.equal(i, 0),
        )
    return tf.constant(True)

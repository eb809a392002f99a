"""The ratios of one step as a serialized `Summary` built in a TF1 graph: what `watch` writes
through a summary writer, for `tf.compat.v1.summary.FileWriter.add_summary` instead.

The values are the packed series `wur_summary.watch` writes (`metadata`'s protocol version
3), under the same tags and summary metadata: per chunk of layers, the ratios as float32
(`batched_write.to_stored_scalar`) followed by the skipped-step marker (1 when no watched
variable changed: `metadata.step_was_skipped`), and with histograms the bucket counts of
each variable's elementwise ratios as varints in a uint8 vector. Each value carries its
metadata, as TF1 summary ops do: `FileWriter.add_summary` keeps it in the first event of
each tag of its file only.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write.batched_write import (
    encode_count_chunks,
    histogram_chunks,
    packed_ratio_values,
    ratio_chunks,
    to_stored_scalar,
)
from tb_wur_plugin.tf_write.variables import WatchedVariable


def ratio_summary(
    watched: Sequence[WatchedVariable],
    ratios: tf.Tensor,
    histogram_counts: tf.Tensor | None = None,
) -> tf.Tensor:
    """A string tensor: the serialized `Summary` of the ratios of `watched`.

    Args:
      watched: the variables, with their tags, in the order of `ratios`.
      ratios: float64[n], their ratios (`ratios.update_ratios`).
      histogram_counts: int64[n, NUM_BUCKETS] (`ratios.histogram_counts`),
        or None.
    """
    tags = tuple(w.tag for w in watched)
    chunks = ratio_chunks(tags, [w.variable for w in watched])
    skipped = tf.cast(metadata.step_was_skipped(ratios, tf.reduce_all, tf.math.equal), tf.float32)
    values = [
        _tensor_summary(chunk.tag, value, chunk.metadata)
        for chunk, value in zip(
            chunks, packed_ratio_values(chunks, to_stored_scalar(ratios), skipped)
        )
    ]
    if histogram_counts is not None:
        chunks = histogram_chunks(tags)
        data, _ = encode_count_chunks(tf.cast(histogram_counts, tf.int64), chunks)
        values.extend(
            _tensor_summary(chunk.tag, tf.io.decode_raw(row, tf.uint8), chunk.metadata)
            for chunk, row in zip(chunks, tf.unstack(data, num=len(chunks)))
        )
    return tf.raw_ops.MergeSummary(inputs=values, name="summary")


def _tensor_summary(tag: str, value: tf.Tensor, summary_metadata) -> tf.Tensor:
    """A `Summary` of one value under exactly `tag` (TF1's `tensor_summary` would make the
    tag unique among the graph's op names)."""
    return tf.raw_ops.TensorSummaryV2(
        tag=tf.constant(tag),
        tensor=value,
        serialized_summary_metadata=tf.constant(summary_metadata.SerializeToString()),
    )

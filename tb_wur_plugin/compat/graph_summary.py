"""The ratios of one step as a serialized `Summary` built in a TF1 graph: what `watch` writes
through a summary writer, for `tf.compat.v1.summary.FileWriter.add_summary` instead.

The values are the ones `wur_summary.watch` writes, under the same tags and summary metadata
(kind, index, data class): each ratio as float32 (`batched_write.to_stored_scalar`), the skipped-step
marker (1 when no watched variable changed), and with histograms the bucket counts of
each variable's elementwise ratios under `metadata.histogram_tag(tag)` (in
`metadata.HISTOGRAM_WRITE_VERSION`: int64, or varints in a uint8 vector). Each value carries
its metadata, as TF1 summary ops do: `FileWriter.add_summary` keeps it in the first event of
each tag of its file only.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write.batched_write import encode_counts, to_stored_scalar
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
    abouts = [
        (w.tag, w.variable.shape.as_list(), w.variable.dtype.base_dtype.name) for w in watched
    ]
    stored = tf.unstack(to_stored_scalar(ratios), num=len(watched))
    values = [
        _tensor_summary(
            w.tag, value,
            metadata.create_summary_metadata(
                metadata.KIND_RATIO, metadata.ratio_description(*about), index,
                shape=about[1] if None not in about[1] else None,
            ),
        )
        for index, (w, value, about) in enumerate(zip(watched, stored, abouts))
    ]
    values.append(_tensor_summary(
        metadata.SKIPPED_STEP_TAG,
        tf.cast(tf.reduce_all(tf.math.equal(ratios, 0)), tf.float32),
        metadata.create_summary_metadata(
            metadata.KIND_SKIPPED_STEP, metadata.SKIPPED_STEP_DESCRIPTION
        ),
    ))
    if histogram_counts is not None:
        version = metadata.HISTOGRAM_WRITE_VERSION
        if version == 1:
            rows = tf.unstack(histogram_counts, num=len(watched))
        else:
            encoded, _ = encode_counts(tf.cast(histogram_counts, tf.int64))
            rows = [tf.io.decode_raw(row, tf.uint8) for row in tf.unstack(encoded, num=len(watched))]
        values.extend(
            _tensor_summary(
                metadata.histogram_tag(w.tag), row,
                metadata.create_summary_metadata(
                    metadata.KIND_HISTOGRAM, metadata.histogram_description(*about),
                    histogram_version=version,
                ),
            )
            for w, row, about in zip(watched, rows, abouts)
        )
    return tf.raw_ops.MergeSummary(inputs=values, name="summary")


def _tensor_summary(tag: str, value: tf.Tensor, summary_metadata) -> tf.Tensor:
    """A `Summary` of one value under exactly `tag` (TF1's `tensor_summary` would make the
    tag unique among the graph's op names: `dense/kernel` would become `dense/kernel_1`)."""
    return tf.raw_ops.TensorSummaryV2(
        tag=tf.constant(tag),
        tensor=value,
        serialized_summary_metadata=tf.constant(summary_metadata.SerializeToString()),
    )

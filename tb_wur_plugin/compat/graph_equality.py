"""The project's ratio math made exact in TF1 graphs, where `tensor == x` is not elementwise.

In a graph built outside `tf.function` (TF1 graph mode), `Tensor.__eq__` is Python identity:
`t == 0` is the bool False, not a tensor. Where the shared ratio code compares with `==`,
its TF1 results differ from its TF2 ones (measured with TensorFlow 2.21):
- `update_ratios`: a variable that is all zeros and does not move gets NaN, not 0;
- `histogram_counts`: elementwise ratios 0 and +inf land in the NaN bucket;
- `to_stored_scalar`: a positive ratio below float32's range is stored as 0.
These functions correct those results and only those: each gives the contract's value
whether or not the shared code compares elementwise (so they stay right once it does).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.ratios import elementwise_ratios, histogram_counts, update_ratios


def graph_update_ratios(before: Sequence[tf.Tensor], after: Sequence[tf.Tensor]) -> tf.Tensor:
    """`update_ratios(before, after)`, 0 for a variable that is 0 before and after. Checked
    only when a ratio is NaN (one conditional; nothing more on other steps)."""
    values = update_ratios(before, after)

    def zero_where_nothing_moved():
        unmoved_zero = tf.stack([
            tf.reduce_all(tf.math.equal(old, 0)) & tf.reduce_all(tf.math.equal(new, old))
            for old, new in zip(before, after)
        ])
        return tf.where(unmoved_zero, tf.zeros_like(values), values)

    return tf.cond(
        tf.reduce_any(tf.math.is_nan(values)), zero_where_nothing_moved, lambda: values
    )


def graph_histogram_counts(before: Sequence[tf.Tensor], after: Sequence[tf.Tensor]) -> tf.Tensor:
    """`histogram_counts(before, after)` with the zero, +inf and NaN buckets counted by
    elementwise comparisons (one more pass over the elementwise ratios); the other buckets
    (positive finite ratios) are the shared code's."""
    counts = histogram_counts(before, after)
    special = (metadata.ZERO_BUCKET, metadata.INF_BUCKET, metadata.NAN_BUCKET)
    total = tf.add_n([counts[:, b] for b in special])  # correct in sum whatever their split
    zeros, infs = [], []
    for old, new in zip(before, after):
        r = elementwise_ratios(old, new)
        zeros.append(tf.math.count_nonzero(tf.math.equal(r, 0), dtype=tf.int64))
        infs.append(tf.math.count_nonzero(tf.math.equal(r, np.inf), dtype=tf.int64))
    zeros, infs = tf.stack(zeros), tf.stack(infs)
    columns = tf.unstack(counts, num=metadata.NUM_BUCKETS, axis=1)
    columns[metadata.ZERO_BUCKET] = zeros
    columns[metadata.INF_BUCKET] = infs
    columns[metadata.NAN_BUCKET] = total - zeros - infs
    return tf.stack(columns, axis=1)


def stored_scalar(value: tf.Tensor) -> tf.Tensor:
    """`value` as the float32 the protocol stores (`batched_write.to_stored_scalar`): a
    positive value too small for float32 becomes its smallest positive value, not 0."""
    stored = tf.cast(value, tf.float32)
    smallest = tf.constant(np.finfo(np.float32).smallest_subnormal, tf.float32)
    return tf.where((value > 0) & tf.math.equal(stored, 0), tf.fill(tf.shape(stored), smallest), stored)

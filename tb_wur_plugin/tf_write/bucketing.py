"""Histogram bucketing: counts of elementwise ratios per bucket of the protocol's fixed
log10 layout (`metadata`), in O(N) time and memory."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata


def bucket_counts(ratios: tf.Tensor) -> tf.Tensor:
    """Counts of `ratios` (any shape) per bucket of the protocol's layout, int64[NUM_BUCKETS].

    O(N) time and memory (see `bucket_counts_by_row`).
    """
    return bucket_counts_by_row(tf.reshape(ratios, [1, -1]))[0]


def bucket_counts_by_row(ratios: tf.Tensor) -> tf.Tensor:
    """`bucket_counts` of each row of `ratios` (shape [k, ...]): int64[k, NUM_BUCKETS].

    Each value's bucket is computed by `_bucket_ids` and counted in one program compiled
    by XLA (`_counted_bucket_ids`), which reads every value once. The values are padded to
    a power of two (at least MIN_PADDED_LENGTH), so that XLA compiles one program per
    power of two, number of rows and dtype. At most MAX_VALUES values per call.
    """
    values = ratios
    if values.dtype not in (tf.float32, tf.float64):
        values = tf.cast(values, tf.float32)
    if values.shape.num_elements() is not None and values.shape.num_elements() > MAX_VALUES:
        raise ValueError(
            f"cannot bucket {values.shape.num_elements()} values at once (at most "
            f"{MAX_VALUES}); split them"
        )
    rows = tf.shape(values)[0]
    # their bits, which XLA passes on as they are (it reads float subnormals as zero)
    int_type = tf.int32 if values.dtype == tf.float32 else tf.int64
    bits = tf.bitcast(tf.reshape(values, [-1]), int_type)
    size = tf.size(bits)
    row_length = tf.maximum(size // tf.maximum(rows, 1), 1)
    padded = tf.pad(bits, [[0, _padded_length(size) - size]])
    total = rows * metadata.NUM_BUCKETS
    counts = tf.reshape(_counted_bucket_ids(padded, size, row_length, total),
                        [rows, metadata.NUM_BUCKETS])
    counts.set_shape([ratios.shape[0], metadata.NUM_BUCKETS])
    return counts


MIN_PADDED_LENGTH = 1 << 10
MAX_VALUES = 1 << 30


def _padded_length(size: tf.Tensor) -> tf.Tensor:
    """The least power of two ≥ `size` and ≥ MIN_PADDED_LENGTH (int32)."""
    exponent = tf.math.ceil(tf.math.log(tf.cast(size, tf.float64)) / np.log(2.0))
    length = tf.cast(tf.pow(tf.constant(2.0, tf.float64), exponent), tf.int32)
    length = tf.where(length // 2 >= size, length // 2, length)  # log rounded up
    return tf.maximum(length, MIN_PADDED_LENGTH)


@tf.function(jit_compile=True, autograph=False)
def _counted_bucket_ids(
    bits: tf.Tensor, size: tf.Tensor, row_length: tf.Tensor, total: tf.Tensor
) -> tf.Tensor:
    """int64[total]: how many of the values (given as their float32 or float64 bits) have
    each id of `_bucket_ids` (the padding's id, `total`, not counted)."""
    ids = _bucket_ids(bits, size, row_length, total)
    return tf.math.unsorted_segment_sum(tf.ones_like(ids, tf.int64), ids, total + 1)[:-1]


def _bucket_ids(
    bits: tf.Tensor, size: tf.Tensor, row_length: tf.Tensor, total: tf.Tensor
) -> tf.Tensor:
    """int32 per value (given as its float32 or float64 bits): its bucket + NUM_BUCKETS ·
    (its index // row_length), its row's first bucket in one count of all rows; `total` for
    the padding (indices ≥ `size`).

    A value x > 0 lies in bin floor(t), t = BINS_PER_DECADE · (log10 x − LOG10_MIN), log10
    taken in the data's precision (at least float32), then moved by one where a comparison
    with that bin's edges (in the data's precision) disagrees: every value lands exactly
    where comparisons with the edges put it (the error of t is far below one bin).
    Classified by their bits: subnormals are positive (TensorFlow's CPU kernels and XLA
    compare them as zero), negative values go to the NaN bucket.
    """
    int_type, inf_bits, dtype = (tf.int32, 0x7F800000, tf.float32) if bits.dtype == tf.int32 \
        else (tf.int64, 0x7FF0000000000000, tf.float64)
    values = tf.bitcast(bits, dtype)
    positive = (bits > 0) & (bits < inf_bits)  # finite, > 0 (subnormals too)
    x = tf.where(positive, values, tf.ones_like(values))
    # position p: 0 below the first edge, k + 1 in bin k, NUM_BINS + 1 at or above the last
    t = (tf.math.log(x) * (metadata.BINS_PER_DECADE / np.log(10.0))
         + (1 - metadata.LOG10_MIN * metadata.BINS_PER_DECADE))
    position = tf.cast(tf.clip_by_value(tf.floor(t), 0, metadata.NUM_BINS + 1), tf.int32)
    edges = metadata.HISTOGRAM_EDGES
    lower = tf.constant(np.concatenate([[-np.inf], edges]), values.dtype)  # of position p
    upper = tf.constant(np.concatenate([edges, [np.inf]]), values.dtype)
    position += tf.cast(x >= tf.gather(upper, position), tf.int32) - tf.cast(
        x < tf.gather(lower, position), tf.int32)
    bucket = tf.where(
        positive,
        position + metadata.UNDERFLOW_BUCKET,
        tf.where(
            tf.math.equal(bits, 0) | tf.math.equal(bits, int_type.min),  # +0, -0
            metadata.ZERO_BUCKET,
            tf.where(tf.math.equal(bits, inf_bits), metadata.INF_BUCKET, metadata.NAN_BUCKET),
        ),
    )
    index = tf.range(tf.size(values))
    return tf.where(index < size, bucket + index // row_length * metadata.NUM_BUCKETS, total)

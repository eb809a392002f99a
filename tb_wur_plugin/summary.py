"""Summary ops of the wur plugin, in the style of `tf.summary`.

Each op writes to the default summary writer at `step` (default:
`tf.summary.experimental.get_step()`), honours `tf.summary.record_if`, works eagerly and
inside `tf.function`, and computes nothing when summaries are not being recorded. Eagerly it
returns a Python bool (True when written); inside a `tf.function`, a boolean tensor.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_summary_ops, summary_ops_v2

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin import metadata


def scalar(name: str, data: Any, step: Any = None, description: str | None = None):
    """Write one layer's weight-update ratio ‖Δw‖₂ / ‖w‖₂ (a float scalar) under tag `name`.

    The tag is `name` exactly (name scopes are not prepended), so that it equals the
    variable path of the layer.
    """
    _check_layer_tag(name)
    value = _float_tensor(data, "wur_summary.scalar", scalar_only=True)
    return write(
        name,
        lambda: to_stored_scalar(value),
        step,
        metadata.create_summary_metadata(metadata.KIND_RATIO, description),
    )


def histogram(name: str, data: Any, step: Any = None, description: str | None = None):
    """Write the distribution of one layer's elementwise ratios |Δw_i| / |w_i|.

    `data` (any shape) is bucketed by `bucket_counts` on the protocol's fixed log10 edges;
    the counts are written under `metadata.histogram_tag(name)`.
    """
    _check_layer_tag(name)
    values = _float_tensor(data, "wur_summary.histogram", scalar_only=False)
    return write(
        metadata.histogram_tag(name),
        lambda: bucket_counts(values),
        step,
        metadata.create_summary_metadata(metadata.KIND_HISTOGRAM, description),
    )


def learning_rate(data: Any, step: Any = None, description: str | None = None):
    """Write the optimizer's learning rate (a float scalar), shown beside the ratios."""
    value = _float_tensor(data, "wur_summary.learning_rate", scalar_only=True)
    return write(
        metadata.LEARNING_RATE_TAG,
        lambda: to_stored_scalar(value),
        step,
        metadata.create_summary_metadata(metadata.KIND_LEARNING_RATE, description),
    )


def write_scalars(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: list, writer: tf.Tensor
) -> tf.Tensor:
    """Write `values[i]` (float32[n]) under `tags[i]` as one event carrying all of them, to
    `writer` (a `default_writer_resource`), whatever `record_if` says.

    One op writes them all, instead of one `tf.summary.write` per tag: the serialized
    `Summary` is the tags' constant prefixes joined with the values' four bytes each. It
    reads exactly as n scalar summaries (a test parses it with protobuf).
    """
    # TensorProto {dtype: DT_FLOAT, tensor_shape: {}, float_val: [x]}, x packed (field 5)
    tensor_fields = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04"
    values = tf.ensure_shape(tf.convert_to_tensor(values, tf.float32), [len(tags)])
    return _write_rows(tags, values, step, metadatas, writer, tensor_fields, 4)


def write_tensors(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: list, writer: tf.Tensor
) -> tf.Tensor:
    """Write row `values[i]` (a tensor of static shape [n, ...]) under `tags[i]`, as one
    event carrying all n tensors, each read back as `values[i]` (its bytes as
    `tensor_content`, as `tf.summary.write` stores them), like `write_scalars`."""
    if values.shape.rank is None or values.shape[0] != len(tags):
        raise ValueError(f"values must have shape [{len(tags)}, ...], got {values.shape}")
    row_shape = values.shape[1:]
    if not row_shape.is_fully_defined():
        raise ValueError(f"the rows of values must have a static shape, got {row_shape}")
    row_bytes = row_shape.num_elements() * values.dtype.size
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in row_shape.as_list()]
    )
    tensor_fields = tensor_pb2.TensorProto(
        dtype=values.dtype.as_datatype_enum, tensor_shape=shape
    ).SerializeToString() + b"\x22" + _varint(row_bytes)  # tensor_content (field 4)
    return _write_rows(tags, values, step, metadatas, writer, tensor_fields, row_bytes)


def _write_rows(tags, values, step, metadatas, writer, tensor_fields: bytes, row_bytes: int):
    """One event: per tag, a constant `Summary.Value` prefix ending in `tensor_fields`, then
    that row's `row_bytes` bytes, cut from the end of the serialized `values` (its data)."""
    prefixes = tf.constant([
        _value_prefix(tag, meta, tensor_fields, row_bytes) for tag, meta in zip(tags, metadatas)
    ])
    count = len(tags)
    serialized = tf.io.serialize_tensor(values)  # ends with the data, row after row
    positions = tf.strings.length(serialized) - row_bytes * (count - tf.range(count))
    rows = tf.strings.substr(serialized, positions, tf.fill([count], row_bytes))
    message = tf.strings.reduce_join(tf.strings.join([prefixes, rows]))
    with tf.device("cpu:0"):
        written = gen_summary_ops.write_raw_proto_summary(
            writer, tf.cast(step, tf.int64), tf.identity(message)
        )
        with tf.control_dependencies([written]):
            return tf.constant(True)


def _value_prefix(tag: str, summary_metadata, tensor_fields: bytes, data_bytes: int) -> bytes:
    """`Summary.value` entry (field 1) with its `tensor` (field 8), without the data bytes
    that end it."""
    head = summary_pb2.Summary.Value(tag=tag, metadata=summary_metadata).SerializeToString()
    tensor_length = len(tensor_fields) + data_bytes
    tensor_header = b"\x42" + _varint(tensor_length)
    value_length = len(head) + len(tensor_header) + tensor_length
    return b"\x0a" + _varint(value_length) + head + tensor_header + tensor_fields


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def to_stored_scalar(value: tf.Tensor) -> tf.Tensor:
    """`value` as the float32 the protocol stores; positive values too small for float32
    become its smallest positive value rather than 0 ("moved a little", not "did not move")."""
    stored = tf.cast(value, tf.float32)
    smallest = tf.constant(np.finfo(np.float32).smallest_subnormal, tf.float32)
    return tf.where((value > 0) & (stored == 0), smallest, stored)


def bucket_counts(ratios: tf.Tensor) -> tf.Tensor:
    """Counts of `ratios` (any shape) per bucket of the protocol's layout, int64[NUM_BUCKETS].

    O(N) time and memory (see `bucket_counts_by_row`).
    """
    return bucket_counts_by_row(tf.reshape(ratios, [1, -1]))[0]


def bucket_counts_by_row(ratios: tf.Tensor) -> tf.Tensor:
    """`bucket_counts` of each row of `ratios` (shape [k, ...]): int64[k, NUM_BUCKETS].

    Each value's bucket is computed by `_bucket_ids`, one program compiled by XLA, which
    reads every value once; then one bincount. The values are padded to a power of two
    (at least MIN_PADDED_LENGTH), so that XLA compiles one program per power of two and
    dtype. At most MAX_VALUES values per call.
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
    ids = _bucket_ids(padded, size, row_length, total)
    # (tf.math.bincount would first take the maximum of the ids: one more pass)
    counts = tf.raw_ops.DenseBincount(input=ids, size=total, weights=tf.constant([], tf.int64))
    counts = tf.reshape(counts, [rows, metadata.NUM_BUCKETS])
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
def _bucket_ids(
    bits: tf.Tensor, size: tf.Tensor, row_length: tf.Tensor, total: tf.Tensor
) -> tf.Tensor:
    """int32 per value (given as its float32 or float64 bits): its bucket + NUM_BUCKETS ·
    (its index // row_length), its row's first bucket in one bincount of all rows; `total`,
    which that bincount ignores, for the padding (indices ≥ `size`).

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
            (bits == 0) | (bits == int_type.min),  # +0, -0
            metadata.ZERO_BUCKET,
            tf.where(bits == inf_bits, metadata.INF_BUCKET, metadata.NAN_BUCKET),
        ),
    )
    index = tf.range(tf.size(values))
    return tf.where(index < size, bucket + index // row_length * metadata.NUM_BUCKETS, total)


def write(tag: str, data: Callable[[], tf.Tensor], step: Any, summary_metadata):
    """`tf.summary.write` of the lazily computed `data`; a Python bool when eager."""
    check_default_writer_open(f"cannot write {tag!r}")
    written = tf.summary.write(tag, data, step=step, metadata=summary_metadata)
    if tf.executing_eagerly():
        return bool(written)
    return written


def default_writer() -> tf.summary.SummaryWriter | None:
    """The default summary writer (TensorFlow has no public accessor for it)."""
    return summary_ops_v2._summary_state.writer


@contextlib.contextmanager
def default_writer_until_exit(writer: tf.summary.SummaryWriter) -> Iterator[None]:
    """`writer` as the default writer inside the block, like `writer.as_default()` but
    without flushing it on exit."""
    state = summary_ops_v2._summary_state
    previous, state.writer = state.writer, writer
    try:
        yield
    finally:
        state.writer = previous


def default_writer_resource(context: str) -> tf.Tensor | None:
    """The resource handle the summary ops of the default writer take; None for no writer or
    a no-op writer. Raises RuntimeError if the writer is closed (`check_default_writer_open`)."""
    check_default_writer_open(context)
    return getattr(default_writer(), "_resource", None)


def static_recording() -> bool | None:
    """Whether summaries are being recorded, when that is known without running a graph:
    False without a default writer, True or False for constant `record_if` conditions,
    None when a condition is a tensor or a callable (`tf.summary.should_record_summaries()`
    then decides at run time). Unlike that function, it adds no op to a graph."""
    state = summary_ops_v2._summary_state
    if state.writer is None:
        return False
    recording = True
    for condition in (state.is_recording, state.is_recording_distribution_strategy):
        if condition is None:
            continue
        if callable(condition):
            return None
        value = tf.get_static_value(condition) if tf.is_tensor(condition) else condition
        if value is None:
            return None
        recording = recording and bool(value)
    return recording


def check_default_writer_open(context: str) -> None:
    """Raise RuntimeError if the default summary writer is closed.

    Without this check a closed writer fails later with an obscure "resource does not
    exist".
    """
    writer = default_writer()
    if writer is not None and getattr(writer, "_closed", False):
        raise RuntimeError(
            f"{context}: the default summary writer is closed "
            "(create a new one with tf.summary.create_file_writer)"
        )


def _check_layer_tag(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError("name must not be empty")
    if metadata.is_reserved_tag(name):
        raise ValueError(
            f"name {name!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which is reserved "
            "for the plugin's own series"
        )


def _float_tensor(data: Any, op: str, *, scalar_only: bool) -> tf.Tensor:
    """`data` as a floating-point tensor, or a TypeError/ValueError naming the problem."""
    if isinstance(data, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{op}: data must be a float, got {type(data).__name__}: {data!r}")
    if isinstance(data, (int, float, np.integer)):
        tensor = tf.constant(float(data), dtype=tf.float64)
    else:
        try:
            tensor = tf.convert_to_tensor(data)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{op}: data must be a float tensor: {e}") from None
        if not tensor.dtype.is_floating:
            raise TypeError(f"{op}: data must be floating-point, got dtype {tensor.dtype.name}")
    if scalar_only:
        rank = tensor.shape.rank
        if rank is not None and rank != 0:
            raise ValueError(f"{op}: data must be a scalar, got shape {tensor.shape}")
        if rank is None:
            tensor = tf.reshape(tensor, [])
    return tensor

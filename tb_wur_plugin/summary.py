"""Summary ops of the wur plugin, in the style of `tf.summary`.

Each op writes to the default summary writer at `step` (default:
`tf.summary.experimental.get_step()`), honours `tf.summary.record_if`, works eagerly and
inside `tf.function`, and computes nothing when summaries are not being recorded. Eagerly it
returns a Python bool (True when written); inside a `tf.function`, a boolean tensor.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2

from tensorboard.compat.proto import summary_pb2

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


def write_scalars(tags: list[str], values: tf.Tensor, step: Any, metadatas: list) -> tf.Tensor:
    """Write `values[i]` (float32[n]) under `tags[i]` as one event carrying all of them.

    One op writes them all, instead of one `tf.summary.write` per tag: the serialized
    `Summary` is the tags' constant prefixes joined with the values' four bytes each. It
    reads exactly as n scalar summaries (a test parses it with protobuf).
    """
    check_default_writer_open(f"cannot write {len(tags)} scalars")
    prefixes = tf.constant([_scalar_value_prefix(t, m) for t, m in zip(tags, metadatas)])
    count = len(tags)
    serialized = tf.io.serialize_tensor(tf.ensure_shape(values, [count]))  # ends with the data
    positions = tf.strings.length(serialized) - 4 * count + 4 * tf.range(count)
    floats = tf.strings.substr(serialized, positions, tf.fill([count], 4))
    message = tf.strings.reduce_join(tf.strings.join([prefixes, floats]))
    return tf.summary.experimental.write_raw_pb(message, step=step)


def _scalar_value_prefix(tag: str, summary_metadata) -> bytes:
    """`Summary.value` entry (field 1) of a float32 scalar, without its four value bytes."""
    head = summary_pb2.Summary.Value(tag=tag, metadata=summary_metadata).SerializeToString()
    # Value.tensor (field 8): TensorProto {dtype: DT_FLOAT, tensor_shape: {}, float_val: [x]}
    tensor = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04"
    value_length = len(head) + 2 + len(tensor) + 4
    return b"\x0a" + _varint(value_length) + head + b"\x42" + bytes([len(tensor) + 4]) + tensor


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

    O(N) time and memory: one binary search over the fixed edges per element, then one
    bincount. Edges are compared in the data's precision (at least float32).
    """
    values = tf.reshape(ratios, [-1])
    if values.dtype not in (tf.float32, tf.float64):
        values = tf.cast(values, tf.float32)
    edges = tf.constant(metadata.HISTOGRAM_EDGES, dtype=values.dtype)
    # 0 below the first edge, NUM_BINS + 1 at or above the last one.
    position = tf.searchsorted(edges[tf.newaxis, :], values[tf.newaxis, :], side="right")
    bucket = tf.reshape(position, [-1]) + metadata.UNDERFLOW_BUCKET
    bucket = tf.where(
        values > 0,
        bucket,
        tf.where(values == 0, metadata.ZERO_BUCKET, metadata.NAN_BUCKET),
    )
    bucket = tf.where(values == np.inf, metadata.INF_BUCKET, bucket)
    return tf.math.bincount(
        bucket,
        minlength=metadata.NUM_BUCKETS,
        maxlength=metadata.NUM_BUCKETS,
        dtype=tf.int64,
    )


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

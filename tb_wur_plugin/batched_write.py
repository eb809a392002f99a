"""One event carrying many summaries: the ratios of all watched variables of a step (and
their histograms) written by one op, instead of one `tf.summary.write` per tag."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin import tf_private


def write_scalars(
    tags: list[str],
    values: tf.Tensor,
    step: Any,
    metadatas: list[summary_pb2.SummaryMetadata],
    writer: tf.Tensor,
) -> tf.Tensor:
    """Write `values[i]` under `tags[i]`, as one event carrying all of them, whatever
    `tf.summary.record_if` says.

    The event reads exactly as n scalar summaries written one by one: the serialized
    `Summary` is the tags' constant prefixes joined with the values' four bytes each.

    Args:
      tags: the n tags.
      values: float32[n], one value per tag.
      step: the event's step (an integer, or an integer tensor).
      metadatas: the `SummaryMetadata` of each tag.
      writer: the resource handle of the writer (`recording.default_writer_resource`).

    Returns:
      A boolean tensor, True once written.
    """
    # TensorProto {dtype: DT_FLOAT, tensor_shape: {}, float_val: [x]}, x packed (field 5)
    tensor_fields = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04"
    values = tf.ensure_shape(tf.convert_to_tensor(values, tf.float32), [len(tags)])
    return _write_rows(tags, values, step, metadatas, writer, tensor_fields, 4)


def write_tensors(
    tags: list[str],
    values: tf.Tensor,
    step: Any,
    metadatas: list[summary_pb2.SummaryMetadata],
    writer: tf.Tensor,
) -> tf.Tensor:
    """Write row `values[i]` under `tags[i]`, as one event carrying all n tensors, each read
    back as `values[i]` (its bytes as `tensor_content`, as `tf.summary.write` stores them).

    Args:
      tags: the n tags.
      values: a tensor of static shape [n, ...], one row per tag.
      step, metadatas, writer: as for `write_scalars`.

    Returns:
      A boolean tensor, True once written.

    Raises:
      ValueError: `values` does not have n rows of a static shape.
    """
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


def _write_rows(
    tags: list[str],
    values: tf.Tensor,
    step: Any,
    metadatas: list[summary_pb2.SummaryMetadata],
    writer: tf.Tensor,
    tensor_fields: bytes,
    row_bytes: int,
) -> tf.Tensor:
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
        written = tf_private.write_raw_proto_summary(
            writer, tf.cast(step, tf.int64), tf.identity(message)
        )
        with tf.control_dependencies([written]):
            return tf.constant(True)


def _value_prefix(
    tag: str, summary_metadata: summary_pb2.SummaryMetadata, tensor_fields: bytes, data_bytes: int
) -> bytes:
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
    return tf.where((value > 0) & tf.math.equal(stored, 0), smallest, stored)

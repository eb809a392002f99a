"""One event carrying many summaries: the ratios of all watched variables of a step (and
their histograms) written by one op, instead of one `tf.summary.write` per tag.

Each writer takes `include_metadata`: whether the tags' `SummaryMetadata` goes into this
event (a Python bool, or a boolean tensor choosing in the graph between the two constant
prefixes of each tag, with and without it); `recording.MetadataOnce` says when (the first
write of the tags to a writer: once per event file)."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.events.event_file import value_prefix, varint

# the tags' `SummaryMetadata`, and whether an event carries it (a bool or boolean tensor)
Metadatas = list[summary_pb2.SummaryMetadata]
Include = bool | tf.Tensor


def write_scalars(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: Metadatas, writer: tf.Tensor,
    include_metadata: Include = True,
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
      include_metadata: write the tags' metadata in this event (a bool or boolean tensor).

    Returns:
      A boolean tensor, True once written.
    """
    # TensorProto {dtype: DT_FLOAT, tensor_shape: {}, float_val: [x]}, x packed (field 5)
    tensor_fields = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04"
    values = tf.ensure_shape(tf.convert_to_tensor(values, tf.float32), [len(tags)])
    return _write_rows(tags, values, step, metadatas, writer, tensor_fields, 4, include_metadata)


def write_tensors(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: Metadatas, writer: tf.Tensor,
    include_metadata: Include = True,
) -> tf.Tensor:
    """Write row `values[i]` under `tags[i]`, as one event carrying all n tensors, each read
    back as `values[i]` (its bytes as `tensor_content`, as `tf.summary.write` stores them).

    Args:
      tags: the n tags.
      values: a tensor of static shape [n, ...], one row per tag.
      step, metadatas, writer, include_metadata: as for `write_scalars`.

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
    ).SerializeToString() + b"\x22" + varint(row_bytes)  # tensor_content (field 4)
    return _write_rows(
        tags, values, step, metadatas, writer, tensor_fields, row_bytes, include_metadata
    )


def write_histograms(
    tags: list[str], counts: tf.Tensor, step: Any, metadatas: Metadatas, writer: tf.Tensor,
    include_metadata: Include = True,
) -> tf.Tensor:
    """Write histogram counts (int64[n, NUM_BUCKETS]) under `tags`, as one event, in the
    version their metadata names (`metadata.histogram_version_of`, the same for all): 1,
    int64 rows (`write_tensors`); 2, each row as its uint8 varints (`encode_counts`).

    Args and returns: as for `write_scalars`.
    """
    versions = {metadata.histogram_version_of(meta) for meta in metadatas}
    if len(versions) != 1:
        raise ValueError(f"histograms of one event are of one version, got {sorted(versions)}")
    counts = tf.cast(counts, tf.int64)
    if versions == {1}:
        return write_tensors(tags, counts, step, metadatas, writer, include_metadata)
    rows, lengths = encode_counts(counts)
    count = len(tags)
    heads = [
        [summary_pb2.Summary.Value(tag=tag, metadata=meta).SerializeToString()
         for tag, meta in zip(tags, metadatas)],
        [summary_pb2.Summary.Value(tag=tag).SerializeToString() for tag in tags],
    ]
    head = _select(include_metadata, *(tf.constant(h, tf.string, [count]) for h in heads))
    head_length = _select(
        include_metadata, *(tf.constant([len(x) for x in h], tf.int32, [count]) for h in heads)
    )
    # TensorProto {dtype: DT_UINT8, tensor_shape: {dim {size: L}}, tensor_content: L bytes}
    length_varint, length_bytes = _varint_strings(lengths)
    dim = tf.strings.join(["\x08", length_varint])
    dim_length = 1 + length_bytes
    shape = tf.strings.join(["\x12", _bytes(dim_length), dim])
    shape_length = 2 + dim_length
    tensor = tf.strings.join([
        "\x08\x04\x12", _bytes(shape_length), shape, "\x22", length_varint, rows
    ])
    tensor_length = 4 + shape_length + 1 + length_bytes + lengths
    tensor_varint, tensor_bytes = _varint_strings(tensor_length)
    value_varint, _ = _varint_strings(head_length + 1 + tensor_bytes + tensor_length)
    message = tf.strings.reduce_join(
        tf.strings.join(["\x0a", value_varint, head, "\x42", tensor_varint, tensor])
    )
    return _write_message(writer, step, message)


def encode_counts(counts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each row of `counts` (int64[n, NUM_BUCKETS], each count below 2^35) as its varints
    (`metadata.encode_histogram`): a string[n] of the bytes and int32[n] of their lengths."""
    groups = 5  # 35 bits
    shifts = tf.constant([7 * k for k in range(groups)], tf.int64)
    c = counts[:, :, tf.newaxis]
    digits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(c, shifts), 0x7F)
    length = 1 + tf.reduce_sum(
        tf.cast(c >= tf.constant([1 << (7 * k) for k in range(1, groups)], tf.int64), tf.int32),
        axis=2,
    )  # [n, NUM_BUCKETS]
    k = tf.range(groups)
    more = k < length[:, :, tf.newaxis] - 1
    digits = tf.bitwise.bitwise_or(digits, tf.where(more, tf.constant(0x80, tf.int64), 0))
    flat = tf.boolean_mask(tf.cast(digits, tf.uint8), k < length[:, :, tf.newaxis])
    lengths = tf.reduce_sum(length, axis=1)
    serialized = tf.io.serialize_tensor(flat)  # ends with the bytes, row after row
    base = tf.strings.length(serialized) - tf.size(flat)
    rows = tf.strings.substr(serialized, base + tf.cumsum(lengths, exclusive=True), lengths)
    return rows, lengths


_BYTE_STRINGS = [bytes([i]) for i in range(256)]


def _bytes(indices: tf.Tensor) -> tf.Tensor:
    """The one-byte string of each of `indices` (int32, 0 ... 255)."""
    return tf.gather(tf.constant(_BYTE_STRINGS), indices)


def _varint_strings(values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each of `values` (int32[n], 0 <= value < 2^28) as a protobuf varint: string[n],
    and their lengths in bytes (int32[n])."""
    v = values[:, tf.newaxis]
    k = tf.range(4)
    digits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(v, 7 * k), 0x7F)
    length = 1 + tf.reduce_sum(
        tf.cast(v >= tf.constant([1 << 7, 1 << 14, 1 << 21]), tf.int32), axis=1
    )
    digits = tf.bitwise.bitwise_or(digits, tf.where(k < length[:, tf.newaxis] - 1, 0x80, 0))
    strings = tf.where(k < length[:, tf.newaxis], _bytes(digits), "")
    return tf.strings.reduce_join(strings, axis=1), length


def _select(include: bool | tf.Tensor, with_metadata: tf.Tensor, without: tf.Tensor) -> tf.Tensor:
    if isinstance(include, (bool, np.bool_)):
        return with_metadata if include else without
    return tf.where(include, with_metadata, without)


def _write_rows(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: Metadatas, writer: tf.Tensor,
    tensor_fields: bytes, row_bytes: int, include_metadata: Include = True,
) -> tf.Tensor:
    """One event: per tag, a constant `Summary.Value` prefix ending in `tensor_fields` (with
    or without the tag's metadata), then that row's `row_bytes` bytes, cut from the end of
    the serialized `values` (its data)."""
    prefixes = _select(
        include_metadata,
        tf.constant([
            value_prefix(tag, meta, tensor_fields, row_bytes)
            for tag, meta in zip(tags, metadatas)
        ]),
        tf.constant([value_prefix(tag, None, tensor_fields, row_bytes) for tag in tags]),
    )
    count = len(tags)
    serialized = tf.io.serialize_tensor(values)  # ends with the data, row after row
    positions = tf.strings.length(serialized) - row_bytes * (count - tf.range(count))
    rows = tf.strings.substr(serialized, positions, tf.fill([count], row_bytes))
    message = tf.strings.reduce_join(tf.strings.join([prefixes, rows]))
    return _write_message(writer, step, message)


def _write_message(writer: tf.Tensor, step: Any, message: tf.Tensor) -> tf.Tensor:
    with tf.device("cpu:0"):
        written = tf_private.write_raw_proto_summary(
            writer, tf.cast(step, tf.int64), tf.identity(message)
        )
        with tf.control_dependencies([written]):
            return tf.constant(True)


def to_stored_scalar(value: tf.Tensor) -> tf.Tensor:
    """`value` as the float32 the protocol stores; positive values too small for float32
    become its smallest positive value rather than 0 ("moved a little", not "did not move")."""
    stored = tf.cast(value, tf.float32)
    smallest = tf.constant(np.finfo(np.float32).smallest_subnormal, tf.float32)
    return tf.where((value > 0) & tf.math.equal(stored, 0), smallest, stored)

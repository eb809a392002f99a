"""One event carrying many summaries, written by one op instead of one `tf.summary.write`
per tag: the packed series of a step (`write_packed_ratios` for the ratios and the spectral
ratios, `write_packed_histograms`: all
watched variables of the step in one tensor per chunk of layers, protocol version 3 in
`metadata`), and the per-tag series of the summary ops and the line search
(`write_scalars`, `write_histograms`).

Each writer takes `include_metadata`: whether the tags' `SummaryMetadata` goes into this
event (a Python bool, or a boolean tensor choosing in the graph between the two constant
prefixes of each tag, with and without it; for the packed writers also one of those per
chunk); `recording.MetadataOnce` says when (the first write of the tags to a writer: once
per event file)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin import metadata
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.event_write.event_file import value_prefix, varint, vector_fields

# the tags' `SummaryMetadata`, and whether an event carries it (a bool or boolean tensor;
# for the packed writers also a sequence of them, or a boolean vector, one per chunk)
Metadatas = list[summary_pb2.SummaryMetadata]
Include = bool | tf.Tensor | Sequence[bool | tf.Tensor]


# --- packed series (protocol version 3) ----------------------------------------------------


class PackedChunk(NamedTuple):
    """One chunk of a packed series: its layers [offset, end) of the step, its tag and its
    `SummaryMetadata` (`metadata.packed_tag`, `metadata.create_packed_metadata`)."""

    offset: int
    end: int
    tag: str
    metadata: summary_pb2.SummaryMetadata


def packed_chunks(kind: str, layers: Sequence[metadata.PackedLayer]) -> tuple[PackedChunk, ...]:
    """The chunks (`metadata.packed_chunks`) a step of `layers` (in model order) is written
    in, as series of `kind` (one of `metadata.PACKED_KINDS`)."""
    layers = list(layers)
    return tuple(
        PackedChunk(
            offset, end, metadata.packed_tag(kind, layers[offset:end], offset),
            metadata.create_packed_metadata(kind, layers[offset:end], offset),
        )
        for offset, end in metadata.packed_chunks(len(layers))
    )


def ratio_layers(tags: Sequence[str], variables: Sequence[Any]) -> list[metadata.PackedLayer]:
    """The layers of the packed ratios of `variables` under `tags`: each with its variable's
    shape (None when a dimension is not known) and the description
    `metadata.ratio_description(tag, shape, dtype name)` (without the shape and dtype when the
    shape is not fully known)."""
    return [_ratio_layer(tag, *_about(variable)) for tag, variable in zip(tags, variables)]


def ratio_chunks(tags: Sequence[str], variables: Sequence[Any]) -> tuple[PackedChunk, ...]:
    """`packed_chunks` of the packed ratios of `variables` under `tags` (`ratio_layers`),
    cached by the tags, shapes and dtypes: their metadata objects are shared, not to be
    modified."""
    return _ratio_chunks(tuple(tags), tuple(_about(variable) for variable in variables))


def spectral_chunks(tags: Sequence[str], variables: Sequence[Any]) -> tuple[PackedChunk, ...]:
    """`packed_chunks` of the packed spectral ratios (`metadata.KIND_PACKED_SPECTRAL`) of
    `variables` under `tags`: their layers as `ratio_layers`, described by
    `metadata.spectral_description`; cached as `ratio_chunks`."""
    return _spectral_chunks(tuple(tags), tuple(_about(variable) for variable in variables))


@functools.lru_cache(maxsize=256)
def histogram_chunks(tags: tuple[str, ...]) -> tuple[PackedChunk, ...]:
    """`packed_chunks` of the packed histograms of `tags` (their layers are their tags only),
    cached as `ratio_chunks`."""
    return packed_chunks(
        metadata.KIND_PACKED_HISTOGRAMS, [metadata.PackedLayer(tag) for tag in tags]
    )


def _about(variable: Any) -> tuple[tuple[int, ...] | None, str]:
    """(the variable's shape, None when not fully known; its dtype's name)."""
    shape = variable.shape
    dims = tuple(shape.as_list()) if shape.is_fully_defined() else None
    return dims, variable.dtype.base_dtype.name


def _ratio_layer(tag: str, dims: tuple[int, ...] | None, dtype: str) -> metadata.PackedLayer:
    return metadata.PackedLayer(
        tag, dims, metadata.ratio_description(tag, dims, dtype if dims is not None else None)
    )


@functools.lru_cache(maxsize=256)
def _ratio_chunks(
    tags: tuple[str, ...], abouts: tuple[tuple[tuple[int, ...] | None, str], ...]
) -> tuple[PackedChunk, ...]:
    return packed_chunks(
        metadata.KIND_PACKED_RATIOS,
        [_ratio_layer(tag, *about) for tag, about in zip(tags, abouts)],
    )


@functools.lru_cache(maxsize=256)
def _spectral_chunks(
    tags: tuple[str, ...], abouts: tuple[tuple[tuple[int, ...] | None, str], ...]
) -> tuple[PackedChunk, ...]:
    return packed_chunks(
        metadata.KIND_PACKED_SPECTRAL,
        [
            metadata.PackedLayer(tag, dims, metadata.spectral_description(tag, dims, dtype))
            for tag, (dims, dtype) in zip(tags, abouts)
        ],
    )


def packed_ratio_values(
    chunks: Sequence[PackedChunk], ratios: tf.Tensor, skipped: tf.Tensor
) -> list[tf.Tensor]:
    """The value of each chunk of a step's packed ratios: float32[end - offset + 1], the
    chunk's `ratios` (float32[n], as stored: `to_stored_scalar`) and the step's skipped-step
    marker `skipped` (a float32 scalar, 1 or 0)."""
    ratios, marker = _ratios_and_marker(chunks, ratios, skipped)
    return [tf.concat([ratios[c.offset:c.end], marker], 0) for c in chunks]


def _ratios_and_marker(
    chunks: Sequence[PackedChunk], ratios: tf.Tensor, skipped: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    ratios = tf.ensure_shape(tf.convert_to_tensor(ratios, tf.float32), [chunks[-1].end])
    return ratios, tf.reshape(tf.cast(skipped, tf.float32), [1])


def write_packed_ratios(
    chunks: Sequence[PackedChunk], ratios: tf.Tensor, skipped: tf.Tensor, step: Any,
    writer: tf.Tensor, include_metadata: Include = True,
) -> tf.Tensor:
    """Write one step of packed ratios (`packed_ratio_values`), all chunks in one event, each
    as `SummaryWriter.add_ratios` writes it: a float32 vector under the chunk's tag, its bytes
    as `tensor_content` after a constant prefix (with or without the chunk's metadata).
    Spectral ratios are written the same way, under their own chunks.

    Args:
      chunks: `packed_chunks(metadata.KIND_PACKED_RATIOS, layers)` (`ratio_chunks`), or
        those of `metadata.KIND_PACKED_SPECTRAL` (`spectral_chunks`).
      ratios: float32[n], the stored ratio of each layer.
      skipped: the step's skipped-step marker, a float32 scalar (1 or 0).
      step, writer: as for `write_scalars`.
      include_metadata: write the chunks' metadata in this event: one bool or boolean tensor
        for all, or one per chunk (a sequence, or a boolean vector).

    Returns:
      A boolean tensor, True once written.
    """
    ratios, marker = _ratios_and_marker(chunks, ratios, skipped)
    if len(chunks) == 1:  # the common case: no slice
        values = tf.concat([ratios, marker], 0)
    else:
        values = tf.concat([part for c in chunks for part in (ratios[c.offset:c.end], marker)], 0)
    lengths = [4 * (c.end - c.offset + 1) for c in chunks]
    prefixes = []
    for include in (True, False):
        prefixes.append([
            value_prefix(c.tag, c.metadata if include else None,
                         vector_fields(tf.float32.as_datatype_enum, length // 4, length), length)
            for c, length in zip(chunks, lengths)
        ])
    serialized = tf.io.serialize_tensor(values)  # ends with the data
    starts = np.cumsum([0, *lengths[:-1]]).tolist()
    positions = tf.strings.length(serialized) - sum(lengths) + tf.constant(starts, tf.int32)
    rows = tf.strings.substr(serialized, positions, tf.constant(lengths, tf.int32))
    head = _choose(include_metadata, *prefixes)
    return _write_message(writer, step, tf.strings.reduce_join(tf.strings.join([head, rows])))


def write_packed_histograms(
    chunks: Sequence[PackedChunk], counts: tf.Tensor, step: Any, writer: tf.Tensor,
    include_metadata: Include = True,
) -> tf.Tensor:
    """Write one step of packed histograms, all chunks in one event: per chunk, the counts
    of its layers (`counts`: int64[n, NUM_BUCKETS], each count below 2^35) as their varints
    (`metadata.encode_packed_histograms`), a uint8 vector under the chunk's tag.

    Args:
      chunks: `packed_chunks(metadata.KIND_PACKED_HISTOGRAMS, layers)`.
      counts, step, writer, include_metadata: as for `write_packed_ratios`.

    Returns:
      A boolean tensor, True once written.
    """
    data, lengths = encode_count_chunks(tf.cast(counts, tf.int64), chunks)
    return _write_uint8_vectors(
        [c.tag for c in chunks], [c.metadata for c in chunks], data, lengths, step, writer,
        include_metadata,
    )


# --- per-tag series ------------------------------------------------------------------------


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
    return _write_uint8_vectors(tags, metadatas, rows, lengths, step, writer, include_metadata)


def encode_counts(counts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each row of `counts` (int64[n, NUM_BUCKETS], each count below 2^35) as its varints
    (`metadata.encode_histogram`): a string[n] of the bytes and int32[n] of their lengths."""
    serialized, base, lengths = _varint_bytes(counts)
    rows = tf.strings.substr(serialized, base + tf.cumsum(lengths, exclusive=True), lengths)
    return rows, lengths


def encode_count_chunks(
    counts: tf.Tensor, chunks: Sequence[PackedChunk]
) -> tuple[tf.Tensor, tf.Tensor]:
    """The rows [offset, end) of `counts` (as for `encode_counts`) of each of `chunks` as
    their varints, layer after layer (`metadata.encode_packed_histograms`): a string[c] of
    the bytes and int32[c] of their lengths."""
    serialized, base, lengths = _varint_bytes(counts)
    ends = tf.concat([[0], tf.cumsum(lengths)], 0)  # ends[i]: the bytes of rows [0, i)
    first = tf.gather(ends, [c.offset for c in chunks])
    sizes = tf.gather(ends, [c.end for c in chunks]) - first
    return tf.strings.substr(serialized, base + first, sizes), sizes


def _varint_bytes(counts: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The varints of `counts` (int64[n, NUM_BUCKETS], each below 2^35), row after row: a
    string holding them from position `base` on, `base` (int32) and each row's length in
    bytes (int32[n])."""
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
    serialized = tf.io.serialize_tensor(flat)  # ends with the bytes, row after row
    base = tf.strings.length(serialized) - tf.size(flat)
    return serialized, base, tf.reduce_sum(length, axis=1)


def _write_uint8_vectors(
    tags: list[str], metadatas: Metadatas, data: tf.Tensor, lengths: tf.Tensor, step: Any,
    writer: tf.Tensor, include_metadata: Include,
) -> tf.Tensor:
    """One event: per tag, a uint8 vector of `lengths[i]` bytes `data[i]` (its
    `tensor_content`), after the tag's `Summary.Value` head (with or without its metadata)."""
    heads = [
        [summary_pb2.Summary.Value(tag=tag, metadata=meta).SerializeToString()
         for tag, meta in zip(tags, metadatas)],
        [summary_pb2.Summary.Value(tag=tag).SerializeToString() for tag in tags],
    ]
    head = _choose(include_metadata, *heads)
    head_length = _choose(include_metadata, *([len(x) for x in h] for h in heads), tf.int32)
    # TensorProto {dtype: DT_UINT8, tensor_shape: {dim {size: L}}, tensor_content: L bytes}
    length_varint, length_bytes = _varint_strings(lengths)
    dim = tf.strings.join(["\x08", length_varint])
    dim_length = 1 + length_bytes
    shape = tf.strings.join(["\x12", _bytes(dim_length), dim])
    shape_length = 2 + dim_length
    tensor = tf.strings.join([
        "\x08\x04\x12", _bytes(shape_length), shape, "\x22", length_varint, data
    ])
    tensor_length = 4 + shape_length + 1 + length_bytes + lengths
    tensor_varint, tensor_bytes = _varint_strings(tensor_length)
    value_varint, _ = _varint_strings(head_length + 1 + tensor_bytes + tensor_length)
    message = tf.strings.reduce_join(
        tf.strings.join(["\x0a", value_varint, head, "\x42", tensor_varint, tensor])
    )
    return _write_message(writer, step, message)


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


def _choose(
    include: Include, with_metadata: list, without: list, dtype: tf.DType = tf.string
) -> tf.Tensor:
    """A constant vector: element i of `with_metadata` where `include` (one flag for all, or
    one per element: a sequence, or a boolean vector) says so, else of `without`. Chosen when
    traced for Python bools, in the graph for tensors."""
    count = len(with_metadata)
    if isinstance(include, (list, tuple)):
        if len(include) != count:
            raise ValueError(f"include_metadata has {len(include)} flags for {count} values")
        if not all(isinstance(flag, (bool, np.bool_)) for flag in include):
            include = tf.stack([tf.convert_to_tensor(flag, tf.bool) for flag in include])
    if isinstance(include, (bool, np.bool_)):
        include = [include] * count
    if isinstance(include, (list, tuple)):
        return tf.constant(
            [w if flag else o for flag, w, o in zip(include, with_metadata, without)], dtype, [count]
        )
    return tf.where(
        include, tf.constant(with_metadata, dtype, [count]), tf.constant(without, dtype, [count])
    )


def _write_rows(
    tags: list[str], values: tf.Tensor, step: Any, metadatas: Metadatas, writer: tf.Tensor,
    tensor_fields: bytes, row_bytes: int, include_metadata: Include = True,
) -> tf.Tensor:
    """One event: per tag, a constant `Summary.Value` prefix ending in `tensor_fields` (with
    or without the tag's metadata), then that row's `row_bytes` bytes, cut from the end of
    the serialized `values` (its data)."""
    prefixes = _choose(
        include_metadata,
        [value_prefix(tag, meta, tensor_fields, row_bytes) for tag, meta in zip(tags, metadatas)],
        [value_prefix(tag, None, tensor_fields, row_bytes) for tag in tags],
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

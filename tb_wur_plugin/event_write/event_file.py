"""The bytes of event files, without TensorFlow: the masked CRC-32C of TFRecord framing
(`metadata.masked_crc32c`: the protocol's, which the read side checks too) and the protobuf
pieces of a `Summary.value` that the writers assemble by hand (the TensorFlow-free
`SummaryWriter` and TensorFlow's batched writes, `tf_write/batched_write.py`).

The checksum itself is `google_crc32c`'s (Google's C library). TensorBoard's own
implementation without TensorFlow
(`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`) is a Python loop over
the bytes, too slow for an event of a few hundred ratios written at every logged step.
"""

from __future__ import annotations

import functools

from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin.metadata import masked_crc32c

__all__ = ["masked_crc32c", "varint", "value_prefix", "vector_fields"]


def varint(value: int) -> bytes:
    """`value` (a non-negative int) as a protobuf varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def value_prefix(
    tag: str,
    summary_metadata: summary_pb2.SummaryMetadata | None,
    tensor_fields: bytes,
    data_bytes: int,
) -> bytes:
    """`Summary.value` entry (field 1) with its `tensor` (field 8), without the data bytes
    that end it; without metadata when `summary_metadata` is None."""
    head = summary_pb2.Summary.Value(tag=tag, metadata=summary_metadata).SerializeToString()
    tensor_length = len(tensor_fields) + data_bytes
    tensor_header = b"\x42" + varint(tensor_length)
    value_length = len(head) + len(tensor_header) + tensor_length
    return b"\x0a" + varint(value_length) + head + tensor_header + tensor_fields


@functools.lru_cache(maxsize=4096)
def vector_fields(dtype: int, length: int, data_bytes: int) -> bytes:
    """The fields of a `TensorProto` {dtype, tensor_shape [length]} and the header of its
    `tensor_content` (field 4) of `data_bytes` bytes, which follow: a vector as the
    writers write one.

    Args:
      dtype: the `DataType` enum value (1: DT_FLOAT, 4: DT_UINT8).
      length: the vector's number of elements.
      data_bytes: the number of bytes of its `tensor_content`.
    """
    return tensor_pb2.TensorProto(
        dtype=dtype,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=length)]
        ),
    ).SerializeToString() + b"\x22" + varint(data_bytes)

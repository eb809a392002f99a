"""What the TensorFlow writers (`batched_write`, `summary`, `watched`, the line search) and
the TensorFlow-free `writer.SummaryWriter` and Keras JAX/PyTorch backend share: the bytes
of a `Summary.value` entry, the checks of layer tags, the unique tags of variables, and the
line-search series' metadata. Imports no TensorFlow module."""

from __future__ import annotations

from typing import Any, Iterable

from tensorboard.compat.proto import summary_pb2

from tb_wur_plugin import metadata


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


def check_layer_tag(tag: Any, what: str = "tag", article: str = "a ") -> None:
    """Raise a TypeError unless `tag` is a str, a ValueError if it is empty or in the
    plugin's reserved namespace; the messages call it `what` ("a tag must be a str")."""
    if not isinstance(tag, str):
        raise TypeError(f"{article}{what} must be a str, got {type(tag).__name__}: {tag!r}")
    if not tag:
        raise ValueError(f"{article}{what} must not be empty")
    if metadata.is_reserved_tag(tag):
        raise ValueError(
            f"{what} {tag!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which is reserved "
            "for the plugin's own series"
        )


def unique_tags(paths: Iterable[str]) -> list[str]:
    """A unique tag for each of `paths` (variable paths, in order): the path, or, for a path
    taken by an earlier one, the first suffix '_1', '_2', ... that is no path of `paths`.

    Raises:
      ValueError: a path is in the plugin's reserved namespace.
    """
    paths = list(paths)
    every_path = set(paths)
    taken: set[str] = set()
    tags = []
    for path in paths:
        if metadata.is_reserved_tag(path):
            raise ValueError(
                f"variable path {path!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which "
                "is reserved for the plugin's own series; rename the layer or variable"
            )
        tag, suffix = path, 0
        while tag in taken or (suffix and tag in every_path):  # keep other paths free
            suffix += 1
            tag = f"{path}_{suffix}"
        taken.add(tag)
        tags.append(tag)
    return tags


_LINE_SEARCH_DESCRIPTIONS = {
    metadata.LINE_SEARCH_STEP_SIZE: "Armijo line search: the step size applied",
    metadata.LINE_SEARCH_BACKTRACKS: "Armijo line search: the rejected trials",
    metadata.LINE_SEARCH_LOSS: "Armijo line search: the batch loss before the step",
    metadata.LINE_SEARCH_NEW_LOSS: "Armijo line search: the batch loss at the accepted trial",
}
# The `SummaryMetadata` of each of `metadata.LINE_SEARCH_TAGS`, in that order.
LINE_SEARCH_METADATAS = [
    metadata.create_summary_metadata(
        metadata.KIND_LINE_SEARCH, _LINE_SEARCH_DESCRIPTIONS[series], series=series
    )
    for series in metadata.LINE_SEARCH_SERIES
]

"""The default summary writer and whether it records: what the summary ops and `watch`
ask before they write, built on `tf_private`."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import tensorflow as tf

from tb_wur_plugin import tf_private


def write(tag: str, data: Callable[[], tf.Tensor], step: Any, summary_metadata: Any) -> bool | tf.Tensor:
    """`tf.summary.write` of the lazily computed `data`; a Python bool when eager.

    Raises:
      RuntimeError: the default writer is closed (`check_default_writer_open`).
    """
    check_default_writer_open(f"cannot write {tag!r}")
    written = tf.summary.write(tag, data, step=step, metadata=summary_metadata)
    if tf.executing_eagerly():
        return bool(written)
    return written


@contextlib.contextmanager
def default_writer_until_exit(writer: tf.summary.SummaryWriter) -> Iterator[None]:
    """`writer` as the default writer inside the block, like `writer.as_default()` but
    without flushing it on exit."""
    previous = tf_private.default_writer()
    tf_private.set_default_writer(writer)
    try:
        yield
    finally:
        tf_private.set_default_writer(previous)


def default_writer_resource(context: str) -> tf.Tensor | None:
    """The resource handle the summary ops of the default writer take; None for no writer or
    a no-op writer.

    Raises:
      RuntimeError: the default writer is closed (`check_default_writer_open`).
    """
    check_default_writer_open(context)
    return tf_private.writer_resource(tf_private.default_writer())


def static_recording() -> bool | None:
    """Whether summaries are being recorded, when that is known without running a graph:
    False without a default writer, True or False for constant `record_if` conditions,
    None when a condition is a tensor or a callable (`tf.summary.should_record_summaries()`
    then decides at run time). Unlike that function, it adds no op to a graph."""
    if tf_private.default_writer() is None:
        return False
    recording = True
    for condition in tf_private.recording_conditions():
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
    if tf_private.writer_closed(tf_private.default_writer()):
        raise RuntimeError(
            f"{context}: the default summary writer is closed "
            "(create a new one with tf.summary.create_file_writer)"
        )


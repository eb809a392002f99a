"""The default summary writer and whether it records: what the summary ops and `watch`
ask before they write, built on `tf_private`."""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator

import tensorflow as tf

from tb_wur_plugin.tf_write import tf_private


def write(
    tag: str,
    data: Callable[[], tf.Tensor],
    step: Any,
    write_fn: Callable[[tf.Tensor, tf.Tensor, tf.Tensor, "bool | tf.Tensor"], tf.Tensor],
) -> bool | tf.Tensor:
    """As `tf.summary.write` of the lazily computed `data` (honours `record_if`, computes
    nothing when not recording), but through `write_fn(value, step, writer_resource,
    include_metadata)` (a `batched_write` writer), which writes `tag`'s metadata only the
    first time the tag goes to this writer (`MetadataOnce`). A Python bool when eager.

    Raises:
      RuntimeError: the default writer is closed (`check_default_writer_open`).
      ValueError: recording, and no step given or set.
    """
    check_default_writer_open(f"cannot write {tag!r}")
    writer = tf_private.default_writer()
    resource = tf_private.writer_resource(writer)
    if resource is None:  # no writer, or a no-op writer
        return False if tf.executing_eagerly() else tf.constant(False)
    if step is None:
        step = tf.summary.experimental.get_step()

    def record() -> tf.Tensor:
        if step is None:
            raise ValueError(
                "No step set. Please specify one either through the `step` argument or "
                "through tf.summary.experimental.set_step()"
            )
        once = MetadataOnce(writer, (tag,))
        with tf.device("cpu:0"):
            value = data()
        return once.written(write_fn(value, step, resource, once.include))

    written = tf.__internal__.smart_cond.smart_cond(
        tf.summary.should_record_summaries(), record, lambda: tf.constant(False)
    )
    if tf.executing_eagerly():
        return bool(written)
    return written


class MetadataOnce:
    """Whether a write of the tags `key` (a tuple) to `writer` carries their metadata: only
    the first one to that writer, i.e. once per event file (a TensorFlow writer writes one
    file: it cannot be reopened once closed).

    The state is kept per writer object (held weakly) and key: eagerly, a Python flag,
    and `include` is a Python bool; in a `tf.function` (whose outermost context is eager),
    a boolean variable made for that writer and key, and `include` is a tensor reading it,
    so that one trace writes the metadata at its first run only (the first event) and never
    retraces. In a TF1 graph `include` is always True.

    Functions that take the writer's resource as an argument (one trace for every writer)
    must take `include` as an argument too: eagerly, pass `tf.constant(once.include)`.
    """

    _lock = threading.Lock()
    _states: "weakref.WeakKeyDictionary[Any, dict[tuple, Any]]" = weakref.WeakKeyDictionary()

    def __init__(self, writer: Any, key: tuple) -> None:
        self._writer = writer
        self._key = key
        self._variable = None
        with self._lock:
            states = self._states.setdefault(writer, {})
            state = states.get(key)
            if tf.executing_eagerly():
                self.include = state is None or (
                    isinstance(state, tf.Variable) and not bool(state.numpy())
                )
                return
            if not tf.compat.v1.executing_eagerly_outside_functions():
                self.include = True
                return
            if not isinstance(state, tf.Variable):
                with tf.init_scope(), tf.device("cpu:0"):
                    variable = tf_private.local_variable(
                        state is not None, name="wur_metadata_written"
                    )
                states[key] = state = variable
        self._variable = state
        self.include = tf.logical_not(state.read_value())

    def written(self, written: tf.Tensor | bool) -> tf.Tensor | bool:
        """Mark the metadata written once `written` (what the write returned) is; returns
        `written`."""
        if tf.executing_eagerly():
            if bool(written):
                with self._lock:
                    state = self._states.setdefault(self._writer, {}).get(self._key)
                    if isinstance(state, tf.Variable):
                        state.assign(True)
                    else:
                        self._states[self._writer][self._key] = True
            return written
        if self._variable is None:
            return written
        with tf.control_dependencies([written]):
            assigned = self._variable.assign(True, read_value=False)
        with tf.control_dependencies([assigned]):
            return tf.identity(written)


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


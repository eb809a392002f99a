"""A summary writer for the wur plugin that needs no TensorFlow: it builds the plugin's
summaries from plain numbers and numpy arrays and appends them to an event file with
TensorBoard's own record writer, for training in PyTorch, JAX or anything else.

What it writes reads exactly as what `wur_summary.watch` writes: the same tags, summary
metadata (`metadata.create_summary_metadata`, with the ratios' order as `index`), float32
ratios, int64 histogram counts on the protocol's edges, and the skipped-step marker.

    with SummaryWriter("logs/run1") as writer:
        writer.add_ratios({"fc1/weight": 1.2e-3, "fc1/bias": 3e-4}, step=100)
        writer.add_histograms({"fc1/weight": elementwise_ratios}, step=100)
        writer.add_learning_rate(1e-3, step=100)
"""

from __future__ import annotations

import itertools
import numbers
import operator
import os
import socket
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tb_wur_plugin import metadata
from tb_wur_plugin.numpy_bucketing import bucket_counts

__all__ = [
    "SummaryWriter", "Counts", "ratios_from_norms", "ratio_description", "histogram_description",
    "to_stored_scalar",
]

SKIPPED_STEP_DESCRIPTION = "1 where no watched variable changed (the optimizer skipped the step)"

_file_numbers = itertools.count()


def ratio_description(tag: str, shape: Sequence[int], dtype: str) -> str:
    """The description `watch` gives the ratio series of a variable of this shape and dtype
    name (e.g. "float32"), shown in the tab."""
    return f"Weight-update ratio of {tag}: shape {[int(d) for d in shape]}, {dtype}"


def histogram_description(tag: str, shape: Sequence[int], dtype: str) -> str:
    """The description `watch` gives the histogram series of such a variable."""
    return f"Elementwise update ratios of {tag}: shape {[int(d) for d in shape]}, {dtype}"


def ratios_from_norms(update_norms: Any, weight_norms: Any) -> np.ndarray:
    """‖Δw‖ / ‖w‖ of each pair of norms, float64, with the protocol's conventions: 0 when
    ‖Δw‖ = 0, +inf when ‖w‖ = 0 < ‖Δw‖, NaN when a norm is not finite (the weights or the
    update were not)."""
    update = np.asarray(update_norms, np.float64)
    weight = np.asarray(weight_norms, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(update == 0, 0.0, update / weight)
    return np.where(np.isfinite(update) & np.isfinite(weight), ratio, np.nan)


def to_stored_scalar(value: float) -> np.float32:
    """`value` as the float32 the protocol stores; a positive value too small for float32
    becomes its smallest positive value rather than 0 ("moved a little", not "did not
    move"), one too large +inf."""
    with np.errstate(over="ignore"):
        stored = np.float32(value)
    if stored == 0 and value > 0:
        return np.finfo(np.float32).smallest_subnormal
    return stored


class SummaryWriter:
    """Writes wur summaries into a new event file in `logdir` (created if missing).

    Local logdirs: each `add_*` call is one event, handed to the operating system before
    the call returns (a crash of the training process loses nothing already added).
    Logdirs given as URLs (`gs://...`, `s3://...`) go through TensorBoard's `gfile` (the one
    of TensorFlow where it is installed, else TensorBoard's own): events are written there at
    `flush()` and `close()`.

    Not thread-hostile: calls from several threads are serialized.

    Args:
      logdir: the run's directory (a str or path-like).
      filename_suffix: appended to the event file's name.
    """

    def __init__(self, logdir: str | os.PathLike, filename_suffix: str = "") -> None:
        logdir = os.fspath(logdir)
        if not isinstance(logdir, str) or not logdir:
            raise TypeError(f"logdir must be a non-empty str or path, got {logdir!r}")
        self._logdir = logdir
        self._lock = threading.Lock()
        self._local = "://" not in logdir
        file, self._path = _open_event_file(logdir, filename_suffix, self._local)
        self._file = file
        self._records = RecordWriter(file)
        self._write_event(
            event_pb2.Event(
                wall_time=time.time(),
                file_version="brain.Event:2",
                source_metadata=event_pb2.SourceMetadata(writer="tb_wur_plugin.writer"),
            )
        )

    @classmethod
    def _writing_events_to(
        cls, add_event: Callable[[event_pb2.Event], None], flush: Callable[[], None], logdir: str
    ) -> "SummaryWriter":
        """A writer whose events go to `add_event` (another writer's event file), flushed by
        `flush`; its `close()` only flushes."""
        self = cls.__new__(cls)
        self._logdir = logdir
        self._lock = threading.Lock()
        self._local = False
        self._file = None
        self._path = None
        self._records = None
        self._add_event = add_event
        self._flush_events = flush
        return self

    # --- the public surface -------------------------------------------------------------

    @property
    def logdir(self) -> str:
        return self._logdir

    @property
    def path(self) -> str | None:
        """The event file written (None when writing into another writer's file)."""
        return self._path

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def add_ratios(
        self,
        ratios: Mapping[str, Any],
        step: int,
        *,
        skipped: bool | None = None,
        descriptions: Mapping[str, str] | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Write one step's weight-update ratios ‖Δw‖₂ / ‖w‖₂, one per layer, and the
        skipped-step marker, as one event (as `watch` writes them).

        Each ratio is stored as float32 (`to_stored_scalar`); the layers' order in `ratios`
        is their order in the tab (model order).

        Args:
          ratios: {tag: ratio}: the layer's tag (its parameter path, e.g. "fc1/weight") and
            its ratio, a real number (Python or numpy scalar, 0-d array or tensor).
          step: the step (an integer), for `watch` the number of updates before this one.
          skipped: the skipped-step marker: True when the optimizer skipped this update;
            None (default) as `watch` decides it: True when every ratio is 0.
          descriptions: optional {tag: description} shown with the series; default
            "Weight-update ratio of TAG" (`ratio_description` gives the text of `watch`).
          wall_time: the event's time (seconds since the epoch); default now.

        Raises:
          TypeError: a tag is not a str, a ratio not a real number, `step` not an integer.
          ValueError: `ratios` is empty, a tag is empty or reserved (starts with "_wur/"),
            a ratio is not a scalar.
          RuntimeError: the writer is closed.
        """
        step = _check_step(step)
        items = _check_mapping(ratios, "ratios")
        values = [(tag, _real_scalar(value, f"ratio of {tag!r}")) for tag, value in items]
        if skipped is None:
            skipped = all(value == 0 for _, value in values)
        elif not isinstance(skipped, (bool, np.bool_)):
            raise TypeError(f"skipped must be None or a bool, got {skipped!r}")
        describe = _describer(descriptions, lambda tag: f"Weight-update ratio of {tag}")
        summary = summary_pb2.Summary(
            value=[
                _scalar_value(
                    tag, to_stored_scalar(value),
                    metadata.create_summary_metadata(metadata.KIND_RATIO, describe(tag), index),
                )
                for index, (tag, value) in enumerate(values)
            ]
            + [
                _scalar_value(
                    metadata.SKIPPED_STEP_TAG,
                    np.float32(1.0 if skipped else 0.0),
                    metadata.create_summary_metadata(
                        metadata.KIND_SKIPPED_STEP, SKIPPED_STEP_DESCRIPTION
                    ),
                )
            ]
        )
        self._write_summary(summary, step, wall_time)

    def add_histograms(
        self,
        histograms: Mapping[str, Any],
        step: int,
        *,
        descriptions: Mapping[str, str] | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Write one step's distributions of elementwise ratios |Δw_i| / |w_i|, one per
        layer, as one event: each bucketed on the protocol's fixed log10 edges, in numpy
        (`numpy_bucketing.bucket_counts`, the counts the TensorFlow path computes).

        Args:
          histograms: {tag: ratios}: the layer's tag (as for `add_ratios`) and its raw
            elementwise ratios, a floating-point array of any shape (or a sequence of
            floats), or already bucketed counts given as `Counts(...)`.
          step, descriptions, wall_time: as for `add_ratios` (default description
            "Elementwise update ratios of TAG").

        Raises:
          TypeError: a tag is not a str, the ratios are not floating-point, `step` is not an
            integer.
          ValueError: `histograms` is empty, a tag is empty or reserved.
          RuntimeError: the writer is closed.
        """
        step = _check_step(step)
        items = _check_mapping(histograms, "histograms")
        describe = _describer(descriptions, lambda tag: f"Elementwise update ratios of {tag}")
        values = []
        for tag, data in items:
            counts = data.counts if isinstance(data, Counts) else bucket_counts(
                _float_array(data, f"histogram of {tag!r}")
            )
            values.append(
                summary_pb2.Summary.Value(
                    tag=metadata.histogram_tag(tag),
                    metadata=metadata.create_summary_metadata(
                        metadata.KIND_HISTOGRAM, describe(tag)
                    ),
                    tensor=_counts_tensor(counts),
                )
            )
        self._write_summary(summary_pb2.Summary(value=values), step, wall_time)

    def add_learning_rate(
        self,
        value: Any,
        step: int,
        *,
        description: str | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Write the optimizer's learning rate at `step` (float32), shown beside the ratios.

        Raises:
          TypeError: `value` is not a real number, `step` not an integer.
          ValueError: `value` is not a scalar.
          RuntimeError: the writer is closed.
        """
        step = _check_step(step)
        rate = _real_scalar(value, "learning rate")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"description must be a str, got {description!r}")
        summary = summary_pb2.Summary(
            value=[
                _scalar_value(
                    metadata.LEARNING_RATE_TAG,
                    to_stored_scalar(rate),
                    metadata.create_summary_metadata(metadata.KIND_LEARNING_RATE, description),
                )
            ]
        )
        self._write_summary(summary, step, wall_time)

    def flush(self) -> None:
        """Hand everything written so far to the file system (for URLs: upload it)."""
        with self._lock:
            if self.closed:
                return
            if self._records is None:
                self._flush_events()
            else:
                self._records.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent). A writer writing into another
        writer's file is flushed, and that file left open."""
        with self._lock:
            if self.closed:
                return
            self._closed = True
            if self._records is None:
                self._flush_events()
            else:
                self._records.flush()
                self._records.close()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SummaryWriter({self._logdir!r}{', closed' if self.closed else ''})"

    # --- internals ----------------------------------------------------------------------

    def _write_summary(self, summary: summary_pb2.Summary, step: int, wall_time: float | None):
        if wall_time is not None:
            wall_time = float(_real_scalar(wall_time, "wall_time"))
        self._write_event(
            event_pb2.Event(
                wall_time=time.time() if wall_time is None else wall_time,
                step=step,
                summary=summary,
            )
        )

    def _write_event(self, event: event_pb2.Event) -> None:
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{self!r}: cannot write, the writer is closed")
            if self._records is None:
                self._add_event(event)
                return
            self._records.write(event.SerializeToString())
            if self._local:
                self._records.flush()


class Counts:
    """Histogram counts already bucketed on the protocol's layout (int64[NUM_BUCKETS]), to
    pass to `SummaryWriter.add_histograms` in place of raw ratios (as the PyTorch path does,
    which buckets on the parameters' device)."""

    __slots__ = ("counts",)

    def __init__(self, counts: Any) -> None:
        counts = np.asarray(counts)
        if counts.shape != (metadata.NUM_BUCKETS,) or not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(
                f"counts must be integers of shape [{metadata.NUM_BUCKETS}], got "
                f"{counts.dtype} {list(counts.shape)}"
            )
        self.counts = counts.astype(np.int64)


def _open_event_file(logdir: str, suffix: str, local: bool):
    """A new event file in `logdir`, named as TensorBoard's writers name theirs (with
    '.wur' before `suffix`, so that it never takes the name of another writer's file)."""
    if not isinstance(suffix, str):
        raise TypeError(f"filename_suffix must be a str, got {suffix!r}")
    if local:
        os.makedirs(logdir, exist_ok=True)
    else:
        from tensorboard.compat import tf  # TensorFlow's gfile where installed

        tf.io.gfile.makedirs(logdir)
    while True:
        name = "events.out.tfevents.%010d.%s.%s.%s.wur%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_file_numbers), suffix
        )
        path = os.path.join(logdir, name)
        if not local:
            return tf.io.gfile.GFile(path, "wb"), path
        try:
            return open(path, "xb"), path
        except FileExistsError:  # another process of this host and pid (a container)
            continue


def _scalar_value(tag: str, value: np.float32, summary_metadata) -> summary_pb2.Summary.Value:
    """A float32 scalar as `watch` writes it: TensorProto {DT_FLOAT, shape [], float_val}."""
    return summary_pb2.Summary.Value(
        tag=tag,
        metadata=summary_metadata,
        tensor=tensor_pb2.TensorProto(
            dtype=_DT_FLOAT,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
            float_val=[float(value)],
        ),
    )


def _counts_tensor(counts: np.ndarray) -> tensor_pb2.TensorProto:
    """int64[NUM_BUCKETS] as `watch` writes it: its bytes as `tensor_content`."""
    return tensor_pb2.TensorProto(
        dtype=_DT_INT64,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=metadata.NUM_BUCKETS)]
        ),
        tensor_content=np.ascontiguousarray(counts, dtype="<i8").tobytes(),
    )


_DT_FLOAT = 1  # types_pb2.DT_FLOAT
_DT_INT64 = 9  # types_pb2.DT_INT64


def _check_step(step: Any) -> int:
    """`step` as an int: any integer, numpy or 0-d tensor integer (not a bool)."""
    if isinstance(step, (bool, np.bool_)):
        raise TypeError(f"step must be an integer, got {step!r}")
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {type(step).__name__}: {step!r:.80}") from None
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"step {value} does not fit in int64")
    return value


def _check_mapping(mapping: Any, what: str) -> list[tuple[str, Any]]:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a mapping {{tag: value}}, got {type(mapping).__name__}")
    if not mapping:
        raise ValueError(f"{what} is empty: nothing to write")
    items = list(mapping.items())
    for tag, _ in items:
        _check_layer_tag(tag)
    return items


def _check_layer_tag(tag: Any) -> None:
    if not isinstance(tag, str):
        raise TypeError(f"a tag must be a str, got {type(tag).__name__}: {tag!r}")
    if not tag:
        raise ValueError("a tag must not be empty")
    if metadata.is_reserved_tag(tag):
        raise ValueError(
            f"tag {tag!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which is reserved for "
            "the plugin's own series"
        )


def _describer(descriptions: Mapping[str, str] | None, default: Callable[[str], str]):
    if descriptions is None:
        return default
    if not isinstance(descriptions, Mapping):
        raise TypeError(f"descriptions must be a mapping {{tag: str}}, got {descriptions!r}")

    def describe(tag: str) -> str:
        text = descriptions.get(tag)
        if text is None:
            return default(tag)
        if not isinstance(text, str):
            raise TypeError(f"the description of {tag!r} must be a str, got {text!r}")
        return text

    return describe


def _real_scalar(value: Any, what: str) -> float:
    """`value` as a Python float, or a TypeError/ValueError naming the problem."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"the {what} must be a real number, got {type(value).__name__}: {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    try:
        array = np.asarray(value)
    except Exception:  # e.g. a tensor on an accelerator: ask it for its number
        array = None
    if array is None or array.dtype == object:
        try:
            return _real_scalar(value.item(), what)
        except Exception:
            raise TypeError(
                f"the {what} must be a real number, got {type(value).__name__}: {value!r:.80}"
            ) from None
    if array.dtype.kind not in "fiu":
        raise TypeError(f"the {what} must be a real number, got dtype {array.dtype}")
    if array.ndim != 0:
        raise ValueError(f"the {what} must be a scalar, got shape {list(array.shape)}")
    return float(array)


def _float_array(data: Any, what: str) -> np.ndarray:
    if isinstance(data, (bool, np.bool_, str, bytes, numbers.Number)) or data is None:
        raise TypeError(f"the {what} must be a floating-point array, got {type(data).__name__}")
    try:
        array = np.asarray(data)
    except Exception as e:
        raise TypeError(f"the {what} must be a floating-point array: {e}") from None
    if array.dtype.kind != "f":
        raise TypeError(f"the {what} must be floating-point, got dtype {array.dtype}")
    return array


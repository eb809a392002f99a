"""The TensorFlow-free `SummaryWriter` (public as `tb_wur_plugin.writer.SummaryWriter`): the
plugin's summaries built from plain numbers and numpy arrays, their events assembled here
(`event_file`: the checksums and the protobuf framing) and appended to a new event file.

What it writes reads exactly as what `wur_summary.watch` writes: a step's ratios and its
skipped-step marker as one packed float32 tensor per chunk of layers, its histograms as one
packed tensor of varint counts per chunk (`metadata`'s packed kinds; each tag's metadata in
the first event of it in the file only), the learning rate as a float32 scalar.
"""

from __future__ import annotations

import itertools
import numbers
import operator
import os
import socket
import struct
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays.numpy_math import bucket_counts
from tb_wur_plugin.event_write.event_file import masked_crc32c, value_prefix, varint, vector_fields
from tb_wur_plugin.event_write.training_judgement import TrainingJudgement
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE
from tb_wur_plugin.metadata import check_layer_tag

__all__ = ["SummaryWriter", "Counts", "to_stored_scalar"]

_file_numbers = itertools.count()


def to_stored_scalar(value: float) -> np.float32:
    """`value` as the float32 the protocol stores; a positive value too small for float32
    becomes its smallest positive value rather than 0 ("moved a little", not "did not
    move"), one too large +inf."""
    with np.errstate(over="ignore"):
        stored = np.float32(value)
    if stored == 0 and value > 0:
        return np.finfo(np.float32).smallest_subnormal
    return stored


def _to_stored_scalars(raw: np.ndarray) -> np.ndarray:
    """`to_stored_scalar` of each of `raw` (float64), as one float32 array."""
    with np.errstate(over="ignore"):
        stored = raw.astype(np.float32)
    stored[(stored == 0) & (raw > 0)] = np.finfo(np.float32).smallest_subnormal
    return stored


class SummaryWriter:
    """Writes wur summaries into a new event file in `logdir` (created if missing).

    Local logdirs: each `add_*` call is one event, handed to the operating system before
    the call returns (a crash of the training process loses nothing already added).
    Logdirs given as URLs (`gs://...`, `s3://...`) go through TensorBoard's `gfile` (the one
    of TensorFlow where it is installed, else TensorBoard's own): events are written there at
    `flush()` and `close()`.

    Thread-safe: calls from several threads are serialized by a lock.

    Args:
      logdir: the run's directory (a str or path-like).
      filename_suffix: appended to the event file's name.
      packed: True (default): each step's ratios and histograms as packed tensors (protocol
        version 3). False: one scalar per layer and step, and one histogram per layer
        (`metadata.HISTOGRAM_WRITE_VERSION`), as protocol version 2 wrote them, for readers
        older than tb-wur-plugin's protocol version 3 (and for comparisons).
      on_flag, stop_on, patience, low, high: the judgement while training
        (`TrainingJudgement`): every `add_ratios` call is judged as it is written, as
        `tb-wur report` judges the run with the same `patience`, `low` and `high`; each flag
        that fires is logged once (logger `tb_wur_plugin`, WARNING), passed to `on_flag`,
        and listed in `flags`; `should_stop` becomes True once a flag whose reason is in
        `stop_on` fires.

    Example:
      >>> writer = SummaryWriter("logs/run1", stop_on={"nan", "not_moving"})
      >>> writer.add_ratios({"fc1/weight": 1.2e-3, "fc1/bias": 8e-4}, step=0,
      ...                   shapes={"fc1/weight": (64, 32), "fc1/bias": (64,)})
      >>> writer.should_stop, writer.flags
      (False, [])
    """

    def __init__(
        self, logdir: str | os.PathLike, filename_suffix: str = "", *, packed: bool = True,
        on_flag: Callable[[Flag], Any] | None = None, stop_on: Iterable[str] = (),
        patience: int = DEFAULT_PATIENCE, low: float | None = None, high: float | None = None,
    ) -> None:
        self._judgement = TrainingJudgement(on_flag, stop_on, patience, low, high)
        self._judging = threading.Lock()
        logdir = os.fspath(logdir)
        if not isinstance(logdir, str) or not logdir:
            raise TypeError(f"logdir must be a non-empty str or path, got {logdir!r}")
        if not isinstance(packed, bool):
            raise TypeError(f"packed must be a bool, got {packed!r}")
        self._packed = packed
        self._logdir = logdir
        self._lock = threading.Lock()
        self._local = "://" not in logdir
        self._prefixes: dict[tuple, bytes] = {}
        self._packed_tags: dict[tuple, str] = {}
        self._described: set[str] = set()  # tags whose metadata this file holds
        # per kind of ratios, the last `add_ratios` call's layers: (what named them, their
        # shapes and descriptions)
        self._last_layers: dict[str, tuple] = {}
        self._file, self._path = _open_event_file(logdir, filename_suffix, self._local)
        self._add_event = None
        self._write_event(
            event_pb2.Event(
                wall_time=time.time(),
                file_version="brain.Event:2",
                source_metadata=event_pb2.SourceMetadata(writer="tb_wur_plugin.writer"),
            ).SerializeToString()
        )

    @classmethod
    def writing_events_to(
        cls, add_event: Callable[[event_pb2.Event], None], flush: Callable[[], None], logdir: str,
        judgement: TrainingJudgement | None = None,
    ) -> "SummaryWriter":
        """A writer whose events go to `add_event` (another writer's event file), flushed by
        `flush`; its `close()` only flushes. `judgement`: its judgement while training
        (default: `TrainingJudgement()`)."""
        self = cls.__new__(cls)
        self._judgement = TrainingJudgement() if judgement is None else judgement
        self._judging = threading.Lock()
        self._packed = True
        self._logdir = logdir
        self._lock = threading.Lock()
        self._local = False
        self._prefixes = {}
        self._packed_tags = {}
        self._described = set()
        self._last_layers = {}
        self._file = None
        self._path = None
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

    @property
    def judgement(self) -> TrainingJudgement:
        """The judgement while training of the ratios written (class docstring)."""
        return self._judgement

    @property
    def flags(self) -> list[Flag]:
        """Every flag fired so far, in order."""
        return self._judgement.flags

    @property
    def should_stop(self) -> bool:
        """True once a flag whose reason is in `stop_on` has fired."""
        return self._judgement.should_stop

    def add_ratios(
        self,
        ratios: Mapping[str, Any],
        step: int,
        *,
        skipped: bool | None = None,
        descriptions: Mapping[str, str] | None = None,
        wall_time: float | None = None,
        shapes: Mapping[str, Any] | None = None,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> None:
        """Write one step's weight-update ratios ‖Δw‖₂ / ‖w‖₂, one per layer, and the
        skipped-step marker, as one event (as `watch` writes them).

        Each ratio is stored as float32 (`to_stored_scalar`); the layers' order in `ratios`
        is their order in the tab (model order). With ``metric="spectral"`` the ratios are
        spectral update ratios ‖ΔW‖₂ / ‖W‖₂ (of the layers of two or more dimensions), kept
        apart from the Frobenius ratios (always in the packed layout).

        Args:
          ratios: {tag: ratio}: the layer's tag (its parameter path, e.g. "fc1/weight") and
            its ratio, a real number (Python or numpy scalar, 0-d array or tensor).
          step: the step (an integer), for `watch` the number of updates before this one.
          skipped: the skipped-step marker: True when the optimizer skipped this update;
            None (default) as `watch` decides it: True when every ratio is 0.
          descriptions: optional {tag: description} shown with the series; default
            `metadata.ratio_description(tag)`.
          wall_time: the event's time (seconds since the epoch); default now.
          shapes: optional {tag: the variable's shape (a sequence of ints)}, written in the
            series' metadata (`metadata.create_summary_metadata`'s `shape`): the report and
            the tab compare a layer with the run's other layers of its kind (matrices,
            vectors); a layer without one is of unknown kind.
          metric: ``metadata.METRIC_FROBENIUS`` (default) or ``metadata.METRIC_SPECTRAL``;
            the descriptions default to `metadata.spectral_description` for the latter.

        Raises:
          TypeError: a tag is not a str, a ratio not a real number, `step` not an integer,
            `shapes` not a mapping of sequences of ints.
          ValueError: `ratios` is empty, a tag is empty or reserved (starts with "_wur/"),
            a ratio is not a scalar, a shape has a negative dimension, `metric` is not one
            of `metadata.METRICS`.
          RuntimeError: the writer is closed.

        The step is then judged (`judgement`): the flags that fire are told; `on_flag`'s
        exceptions propagate, after the step is written.
        """
        kind = metadata.packed_ratio_kind(metric)
        step = _check_step(step)
        items = _items(ratios, "ratios")
        values = [(tag, value if type(value) is float else _real_scalar(value, f"ratio of {tag!r}"))
                  for tag, value in items]
        raw = np.array([value for _, value in values], np.float64)
        if skipped is None:
            skipped = bool(metadata.step_was_skipped(raw))
        elif not isinstance(skipped, (bool, np.bool_)):
            raise TypeError(f"skipped must be None or a bool, got {skipped!r}")
        stored = _to_stored_scalars(raw)
        names = tuple(tag for tag, _ in values)
        layer_shapes, described = self._described_layers(
            kind, names, shapes, descriptions,
            metadata.spectral_description if kind == metadata.KIND_PACKED_SPECTRAL
            else metadata.ratio_description,
        )
        if self._packed or kind == metadata.KIND_PACKED_SPECTRAL:
            about = (layer_shapes, described)
            parts, tags = [], []
            for offset, end in metadata.packed_chunks(len(names)):
                tag, part = self._packed_value(
                    kind, names, about, offset, end, _DT_FLOAT,
                    metadata.encode_packed_ratios(stored[offset:end], skipped),
                )
                parts.append(part)
                tags.append(tag)
            self._write_summary(b"".join(parts), step, wall_time, tags)
        else:
            self._write_scalars(values, stored, skipped, described, layer_shapes, step, wall_time)
        with self._judging:  # after the writing: a judgement never costs a written step
            self._judgement.observe(step, names, layer_shapes, stored, skipped, metric)

    def _described_layers(
        self, kind: str, names: tuple[str, ...], shapes: Mapping[str, Any] | None,
        descriptions: Mapping[str, str] | None, default: Callable[[str], str],
    ) -> tuple[tuple[tuple[int, ...] | None, ...], tuple[str, ...]]:
        """(each layer's shape, checked, or None; its description) of the layers `names`,
        their tags checked, from `shapes` and `descriptions` as `add_ratios` takes them
        (`default`, the one of this `kind` of ratios, describes a layer `descriptions` does
        not). A face writes the same layers at every step: where the tags, and tag by tag
        the shapes (equal to the last call's checked ones, of int dimensions: a list changed
        in place, or 2.0 for 2, is checked again) and the descriptions are those of the last
        call for this `kind`, its answer again, without checking them again."""
        shape_of, describe = _shapes(shapes), _describer(descriptions, default)
        given = (names,
                 None if shapes is None else tuple(map(shapes.get, names)),
                 None if descriptions is None else tuple(map(descriptions.get, names)))
        last = self._last_layers.get(kind)
        if last is not None and _equal(last[0], given) and (
                shapes is None
                or all(type(d) is int for shape in given[1] if shape is not None for d in shape)):
            return last[1]
        for tag in names:
            check_layer_tag(tag)
        layers = (tuple(shape_of(t) for t in names), tuple(describe(t) for t in names))
        self._last_layers[kind] = (
            (names, None if shapes is None else layers[0], given[2]), layers)
        return layers

    def _write_scalars(self, values, stored, skipped, described, layer_shapes, step, wall_time):
        """The ratios of one step as protocol version 2 wrote them: a scalar per layer."""
        parts = [
            self._scalar(tag, metadata.KIND_RATIO, description, index, value, shape)
            for index, ((tag, _), value, shape, description)
            in enumerate(zip(values, stored, layer_shapes, described))
        ]
        parts.append(self._scalar(
            metadata.SKIPPED_STEP_TAG, metadata.KIND_SKIPPED_STEP, metadata.SKIPPED_STEP_DESCRIPTION,
            None, np.float32(1.0 if skipped else 0.0),
        ))
        self._write_summary(
            b"".join(parts), step, wall_time, [tag for tag, _ in values] + [metadata.SKIPPED_STEP_TAG]
        )

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
            `metadata.histogram_description(tag)`).

        Raises:
          TypeError: a tag is not a str, the ratios are not floating-point, `step` is not an
            integer.
          ValueError: `histograms` is empty, a tag is empty or reserved.
          RuntimeError: the writer is closed.
        """
        step = _check_step(step)
        items = _check_mapping(histograms, "histograms")
        describe = _describer(descriptions, metadata.histogram_description)
        counts = [
            data.counts if isinstance(data, Counts)
            else bucket_counts(_float_array(data, f"histogram of {tag!r}"))
            for tag, data in items
        ]
        if self._packed:
            names = tuple(tag for tag, _ in items)
            stacked = np.stack(counts)
            parts, tags = [], []
            for offset, end in metadata.packed_chunks(len(names)):
                tag, part = self._packed_value(
                    metadata.KIND_PACKED_HISTOGRAMS, names, None, offset, end, _DT_UINT8,
                    metadata.encode_packed_histograms(stacked[offset:end]),
                )
                parts.append(part)
                tags.append(tag)
            self._write_summary(b"".join(parts), step, wall_time, tags)
            return
        parts = [self._counts(tag, describe(tag), c) for (tag, _), c in zip(items, counts)]
        self._write_summary(
            b"".join(parts), step, wall_time, [metadata.histogram_tag(tag) for tag, _ in items]
        )

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
        part = self._scalar(
            metadata.LEARNING_RATE_TAG, metadata.KIND_LEARNING_RATE, description, None,
            to_stored_scalar(rate),
        )
        self._write_summary(part, step, wall_time, [metadata.LEARNING_RATE_TAG])

    def flush(self) -> None:
        """Hand everything written so far to the file system (for URLs: upload it)."""
        with self._lock:
            if self.closed:
                return
            if self._add_event is None:
                self._file.flush()
            else:
                self._flush_events()

    def close(self) -> None:
        """Flush and close the event file (idempotent). A writer writing into another
        writer's file is flushed, and that file left open."""
        with self._lock:
            if self.closed:
                return
            self._closed = True
            if self._add_event is None:
                self._file.flush()
                self._file.close()
            else:
                self._flush_events()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SummaryWriter({self._logdir!r}{', closed' if self.closed else ''})"

    # --- internals ----------------------------------------------------------------------

    def _packed_value(
        self, kind: str, names: tuple[str, ...], about: tuple | None, offset: int, end: int,
        dtype: int, data: bytes,
    ) -> tuple[str, bytes]:
        """(tag, the `Summary.value` entry) of the chunk [offset, end) of a packed series of
        the layers `names` (`about`: their shapes and descriptions, for ratios): a vector of
        `dtype` whose bytes are `data` as `tensor_content`, with the tag's metadata the
        first time this file holds the tag. The tag and its constant head are cached by the
        layers' names, shapes and descriptions."""
        key = (kind, offset, end, names, about)
        tag = self._packed_tags.get(key)
        if tag is None:
            if len(self._packed_tags) > 10_000:  # layer sets that change at every step
                self._packed_tags.clear()
            tag = metadata.packed_tag(kind, self._layers(names, about, offset, end), offset)
            self._packed_tags[key] = tag
        first = tag not in self._described
        head = self._prefixes.get((tag, first))
        if head is None:
            summary_metadata = metadata.create_packed_metadata(
                kind, self._layers(names, about, offset, end), offset
            ) if first else None
            head = self._cache((tag, first), summary_pb2.Summary.Value(
                tag=tag, metadata=summary_metadata).SerializeToString())
        fields = vector_fields(dtype, len(data) // _ITEM_BYTES[dtype], len(data))
        return tag, _entry(head, fields, data)

    @staticmethod
    def _layers(
        names: tuple[str, ...], about: tuple | None, offset: int, end: int
    ) -> list[metadata.PackedLayer]:
        if about is None:
            return [metadata.PackedLayer(name) for name in names[offset:end]]
        shapes, descriptions = about
        return [
            metadata.PackedLayer(names[i], shapes[i], descriptions[i]) for i in range(offset, end)
        ]

    def _scalar(self, tag: str, kind: str, description: str | None, index: int | None,
                value: np.float32, shape: tuple[int, ...] | None = None) -> bytes:
        """The `Summary.value` entry of a float32 scalar, as `watch` writes it: TensorProto
        {DT_FLOAT, shape [], float_val [value]} (its constant prefix cached by tag), with
        the tag's metadata the first time this file holds the tag."""
        first = tag not in self._described
        key = (tag, kind, description, index, first, shape)
        prefix = self._prefixes.get(key)
        if prefix is None:
            summary_metadata = (
                metadata.create_summary_metadata(kind, description, index, shape=shape)
                if first else None
            )
            prefix = self._cache(key, value_prefix(tag, summary_metadata, _SCALAR_FIELDS, 4))
        return prefix + struct.pack("<f", value)

    def _counts(self, tag: str, description: str, counts: np.ndarray) -> bytes:
        """The `Summary.value` entry of a histogram, as `watch` writes it, in
        `metadata.HISTOGRAM_WRITE_VERSION`: 1, int64[NUM_BUCKETS] as `tensor_content`; 2,
        its varints as a uint8 vector (`metadata.encode_histogram`)."""
        histogram_tag = metadata.histogram_tag(tag)
        first = histogram_tag not in self._described
        version = metadata.HISTOGRAM_WRITE_VERSION
        key = (histogram_tag, metadata.KIND_HISTOGRAM, description, version, first)
        head = self._prefixes.get(key)
        if head is None:
            summary_metadata = metadata.create_summary_metadata(
                metadata.KIND_HISTOGRAM, description, histogram_version=version
            ) if first else None
            head = self._cache(key, summary_pb2.Summary.Value(
                tag=histogram_tag, metadata=summary_metadata).SerializeToString())
        if version == 1:
            return _entry(head, _COUNTS_FIELDS, np.ascontiguousarray(counts, dtype="<i8").tobytes())
        data = metadata.encode_histogram(counts)
        fields = vector_fields(_DT_UINT8, len(data), len(data))
        return _entry(head, fields, data)

    def _cache(self, key: tuple, prefix: bytes) -> bytes:
        if len(self._prefixes) > 100_000:  # descriptions that change at every step
            self._prefixes.clear()
        self._prefixes[key] = prefix
        return prefix

    def _write_summary(
        self, summary: bytes, step: int, wall_time: float | None, tags: Sequence[str]
    ) -> None:
        """One `Event` {wall_time, step, summary} from the serialized `Summary`, which holds
        `tags` (with their metadata when first written: now this file holds it)."""
        if wall_time is not None:
            wall_time = float(_real_scalar(wall_time, "wall_time"))
        self._write_event(
            b"\x09" + struct.pack("<d", time.time() if wall_time is None else wall_time)
            + b"\x10" + varint(step & 0xFFFFFFFFFFFFFFFF)
            + b"\x2a" + varint(len(summary)) + summary
        )
        self._described.update(tags)

    def _write_event(self, event: bytes) -> None:
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{self!r}: cannot write, the writer is closed")
            if self._add_event is not None:
                self._add_event(event_pb2.Event.FromString(event))
                return
            # a TFRecord: length, its checksum, the data, its checksum
            header = struct.pack("<Q", len(event))
            self._file.write(
                header + struct.pack("<I", masked_crc32c(header)) + event
                + struct.pack("<I", masked_crc32c(event))
            )
            if self._local:
                self._file.flush()


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
    '.wur' before `suffix`, so that it never takes the name of another writer's file). The
    process's file number is zero-padded: TensorBoard's loaders read a run's files in name
    order, so a file opened later in the same second must sort later (a run restarted into a
    new file would otherwise lose its later steps to the earlier file's)."""
    if not isinstance(suffix, str):
        raise TypeError(f"filename_suffix must be a str, got {suffix!r}")
    if local:
        os.makedirs(logdir, exist_ok=True)
    else:
        from tensorboard.compat import tf  # TensorFlow's gfile where installed

        tf.io.gfile.makedirs(logdir)
    while True:
        name = "events.out.tfevents.%010d.%s.%s.%06d.wur%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_file_numbers), suffix
        )
        path = os.path.join(logdir, name)
        if not local:
            return tf.io.gfile.GFile(path, "wb"), path
        try:
            return open(path, "xb"), path
        except FileExistsError:  # another process of this host and pid (a container)
            continue


def _entry(head: bytes, tensor_fields: bytes, data: bytes) -> bytes:
    """`Summary.value` entry (field 1): `head` (the serialized Value's tag and metadata),
    then its `tensor` (field 8): `tensor_fields` followed by `data`."""
    tensor_length = len(tensor_fields) + len(data)
    tensor_header = b"\x42" + varint(tensor_length)
    return (b"\x0a" + varint(len(head) + len(tensor_header) + tensor_length) + head
            + tensor_header + tensor_fields + data)


_DT_FLOAT, _DT_UINT8 = 1, 4
_ITEM_BYTES = {_DT_FLOAT: 4, _DT_UINT8: 1}


# TensorProto {dtype: DT_FLOAT, tensor_shape: {}, float_val: [x]}, x packed (field 5)
_SCALAR_FIELDS = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04"
_COUNTS_BYTES = metadata.NUM_BUCKETS * 8
# TensorProto {dtype: DT_INT64, tensor_shape: [NUM_BUCKETS]} and the tensor_content header
_COUNTS_FIELDS = tensor_pb2.TensorProto(
    dtype=9,  # DT_INT64
    tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=metadata.NUM_BUCKETS)]
    ),
).SerializeToString() + b"\x22" + varint(_COUNTS_BYTES)


def _check_step(step: Any) -> int:
    """`step` as an int: any integer, numpy or 0-d tensor integer (not a bool)."""
    if isinstance(step, (bool, np.bool_)):
        raise TypeError(f"step must be an integer, got {step!r}")
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(
            f"step must be an integer, got {type(step).__name__}: {step!r:.80}"
        ) from None
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"step {value} does not fit in int64")
    return value


def _check_mapping(mapping: Any, what: str) -> list[tuple[str, Any]]:
    """`_items` of `mapping`, its tags checked (`check_layer_tag`)."""
    items = _items(mapping, what)
    for tag, _ in items:
        check_layer_tag(tag)
    return items


def _items(mapping: Any, what: str) -> list[tuple[str, Any]]:
    """The (tag, value) items of a non-empty mapping, or a TypeError/ValueError naming it."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a mapping {{tag: value}}, got {type(mapping).__name__}")
    if not mapping:
        raise ValueError(f"{what} is empty: nothing to write")
    return list(mapping.items())


def _equal(a: Any, b: Any) -> bool:
    """a == b, False where comparing them raises (e.g. numpy arrays given as shapes, which
    compare elementwise)."""
    try:
        return bool(a == b)
    except Exception:
        return False


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


def _shapes(shapes: Mapping[str, Any] | None) -> Callable[[str], tuple[int, ...] | None]:
    """{tag: shape} checked, as a lookup (None for a tag it does not name)."""
    if shapes is None:
        return lambda tag: None
    if not isinstance(shapes, Mapping):
        raise TypeError(f"shapes must be a mapping {{tag: shape}}, got {shapes!r}")

    checked: dict[str, tuple[int, ...] | None] = {}  # each tag's checked once

    def shape_of(tag: str) -> tuple[int, ...] | None:
        if tag in checked:
            return checked[tag]
        shape = shapes.get(tag)
        if shape is not None:
            try:
                shape = tuple(metadata.checked_shape(shape))
            except (TypeError, ValueError) as e:
                raise type(e)(f"the shape of {tag!r}: {e}") from None
        checked[tag] = shape
        return shape

    return shape_of


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


"""Damaged event files: each event file of a run directory checked record by record (its
TFRecord framing, `metadata.RECORD_HEADER_BYTES`), every unreadable stretch found, and the
readable records after one read here, because TensorBoard's loaders do not read them.

What TensorBoard does with a damaged file (read in TensorBoard 2.21 and its data server 0.7,
and tested in tests/read/test_damaged_files.py):
- the fast loader (`--load_fast=true`, the Rust data server: `tf_record.rs`, `event_file.rs`,
  `run.rs`) reads a file's records until the first that fails: a length whose checksum fails,
  data that is no `Event` and fails its checksum, or an event with a NaN wall time mark the
  whole file dead (a warning in the data server's log only); a record cut short waits for the
  rest of it. Data that parses is not checked (the data server's default, `--no-checksum`):
  a record whose data fails its checksum but parses is read, wrong values and all, and the
  file read on.
- the Python loader (`--load_fast=false`: `event_file_loader.RawEventFileLoader` over
  TensorFlow's `tf_record_iterator`, or without TensorFlow the stub's `PyRecordReader_New`)
  stops at the first record that fails its checksums or is cut short (a `DataLossError`,
  logged at debug level) and tries the same record again at every reload, forever.
Neither looks for the next valid record: every record after the first damaged one of a file is
lost to both, silently. Other files of the run are read.

Here: a stretch is unreadable from the first byte of a record that fails (its length's or its
data's checksum) up to the next offset where a valid record starts (a length whose checksum
checks and data whose checksum checks), or to the end of the file. A file that ends inside a
record (its length checks, its data runs past the end; or fewer bytes than a length and its
checksum) ends in a stretch that is `cut_short`: the one record a crash, or a write in
progress, leaves. A file cut exactly between two records reads as whole: nothing in its bytes
says that more was to come.

The readable records after a file's first stretch (the ones both loaders skip) are read here:
the values of their summaries (`RunDamage.recovered`) join the run's points (run_data). The
values of a record whose data fails its checksum, which the fast loader may have read, are
left out (`RunDamage.untrusted`), so that both loaders show the same points.

Cost: a file is read once, then again only from where its last scan ended when it grew (event
files are appended to), and from its start when it was replaced or changed otherwise; a
request costs a `stat` per event file. Only local directories are scanned.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import os
import struct
import threading
from typing import BinaryIO

import numpy as np
from google.protobuf import message
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_wur_plugin import metadata
from tb_wur_plugin.read.lru_cache import LruCache

logger = logging.getLogger(__name__)

# What both TensorBoard loaders take for an event file: a name that contains it.
EVENT_FILE_MARK = "tfevents"
# Bytes read from a file at a time (a record longer than this is read whole).
_CHUNK_BYTES = 1 << 22
# Offsets tried at a time when looking for the next valid record after a failing one.
_SEARCH_WINDOW = 1 << 16
# No record is this long (a protobuf message stops at 2 GiB): longer lengths are not tried.
_MAX_RECORD_BYTES = 1 << 32
# The tensor types of the wur series (float32 ratios and markers, histograms' uint8 varints or
# int64 counts); other values in a recovered record (images, text) are not kept.
_RECOVERED_DTYPES = frozenset(
    {types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE, types_pb2.DT_UINT8, types_pb2.DT_INT64}
)
# Bytes at the start of a file and before where its scan ended that must be unchanged for the
# next scan to go on from there (event files are appended to).
_CHECKED_BYTES = 64
# Event files and runs whose scans are kept.
_KEPT_FILES = 65_536
_KEPT_RUNS = 4096


@dataclasses.dataclass(frozen=True)
class Stretch:
    """One unreadable stretch of an event file.

    Attributes:
        file: the file's name in its run directory.
        offset: the stretch's first byte in the file.
        unread_bytes: its length.
        after_step: the step of the last readable record before it in the file; None when
            there is none but the file's version header (the stretch is at its start).
        cut_short: the file ends inside this stretch's record: the last record, cut short
            (as a crash leaves it) or still being written.
    """

    file: str
    offset: int
    unread_bytes: int
    after_step: int | None
    cut_short: bool

    def as_json(self) -> dict:
        """{"file", "unread_bytes", "after_step", "offset", "cut_short"} (http_api.md)."""
        return {
            "file": self.file,
            "unread_bytes": self.unread_bytes,
            "after_step": self.after_step,
            "offset": self.offset,
            "cut_short": self.cut_short,
        }

    def describe(self) -> str:
        """The stretch in words: "N bytes unreadable from offset O (after step S)", and for
        a cut-short last record what that means."""
        where = "before any step" if self.after_step is None else f"after step {self.after_step}"
        text = f"{self.unread_bytes} bytes unreadable from offset {self.offset} ({where})"
        if self.cut_short:
            text += (": the file ends inside its last record, one record cut short "
                     "(normal after a crash; or the record is still being written)")
        return text


@dataclasses.dataclass(frozen=True)
class RecoveredSeries:
    """The points of one tag read from the records after a file's unreadable stretch (which
    TensorBoard's loaders do not read), in the order written.

    Attributes:
        metadata: the tag's `SummaryMetadata` as its first recovered value carries it; None
            when none does (a writer writes it once per file: it may be before the stretch).
        steps, wall_times: int64 and float64 columns.
        values: each point's value as an array (`tensor_util.make_ndarray`).
    """

    metadata: summary_pb2.SummaryMetadata | None
    steps: np.ndarray
    wall_times: np.ndarray
    values: tuple[np.ndarray, ...]


@dataclasses.dataclass(frozen=True)
class RunDamage:
    """What the scan of a run directory's event files found: every unreadable stretch (files
    by name, then by offset), the points read beyond them by tag (files by name), and the
    (step, wall time) of the points of records whose data fails its checksum, by tag (which
    TensorBoard's fast loader reads when their data parses: not to be shown)."""

    stretches: tuple[Stretch, ...]
    recovered: dict[str, RecoveredSeries]
    untrusted: dict[str, frozenset[tuple[int, float]]] = dataclasses.field(default_factory=dict)


class DamageScanner:
    """The damage of the runs of one local logdir: each run's event files scanned as this
    module's docstring says, kept, and scanned again only where they changed; thread-safe.

    Args:
        logdir: the logdir (a local path; `for_logdir` says which are).
    """

    def __init__(self, logdir: str):
        self._root = os.path.abspath(os.path.expanduser(logdir))
        self._files: LruCache[_FileScan] = LruCache(max_entries=_KEPT_FILES)
        self._runs: LruCache[RunDamage] = LruCache(max_entries=_KEPT_RUNS)
        self._lock = threading.Lock()

    @classmethod
    def for_logdir(cls, logdir: str | None) -> "DamageScanner | None":
        """A scanner of `logdir`; None when it is not a local directory (a URL such as
        gs://..., or none: TensorBoard's --logdir_spec), whose files are not scanned."""
        if not logdir or "://" in logdir:
            return None
        return cls(logdir)

    def scan(self, run: str) -> RunDamage:
        """The damage of run `run` (a run name as TensorBoard gives it: its directory relative
        to the logdir, "." for the logdir itself). A run whose directory is outside the logdir
        or gone has none."""
        directory = self._directory(run)
        files = _event_files(directory) if directory is not None else []
        signature = tuple((name, *_identity(stat)) for name, _, stat in files)
        with self._lock:
            found = self._runs.get(run, signature)
            if found is None:
                scans = [self._scan_file(path, name, stat) for name, path, stat in files]
                found = _run_damage(scans)
                self._runs.put(run, signature, found)
        return found

    def _directory(self, run: str) -> str | None:
        """The directory of `run`; None when the name leads outside the logdir."""
        if run == ".":
            return self._root
        if os.path.isabs(run) or ".." in run.replace("\\", "/").split("/"):
            return None
        directory = os.path.normpath(os.path.join(self._root, run))
        inside = directory != self._root and os.path.commonpath([self._root, directory]) == self._root
        return directory if inside else None

    def _scan_file(self, path: str, name: str, stat: os.stat_result) -> "_FileScan":
        """The scan of one event file, continued from where the last one ended when the file
        only grew; from its start when it is new, replaced, shrunk or rewritten."""
        scan = self._files.get(path, None)
        if scan is not None and (scan.size, scan.mtime_ns) == (stat.st_size, stat.st_mtime_ns) \
                and scan.identity == (stat.st_dev, stat.st_ino):
            return scan
        identity = (stat.st_dev, stat.st_ino)
        if scan is None or scan.identity != identity or stat.st_size <= scan.size:
            scan = _FileScan(name, identity)
        try:
            with open(path, "rb") as f:
                if not scan.grew(f):
                    scan = _FileScan(name, identity)
                opened = os.fstat(f.fileno())
                scan.advance(f, opened.st_size)
                scan.mtime_ns = opened.st_mtime_ns
        except OSError as e:  # gone or unreadable since it was listed: TensorBoard cannot read it either
            logger.warning("cannot check the event file %s: %s", path, e)
            return _FileScan(name, identity)
        self._files.put(path, None, scan)
        return scan


def _event_files(directory: str) -> list[tuple[str, str, os.stat_result]]:
    """(name, path, stat) of each event file directly in `directory`, by name (the order in
    which both loaders read them); none when it is gone."""
    found = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        if EVENT_FILE_MARK not in entry.name:
            continue
        try:
            if entry.is_file():
                found.append((entry.name, entry.path, entry.stat()))
        except OSError:
            continue
    return sorted(found, key=lambda f: f[0])


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _run_damage(scans: list["_FileScan"]) -> RunDamage:
    """A run's damage from the scans of its files (by name)."""
    stretches = tuple(s for scan in scans for s in scan.stretches())
    parts: dict[str, list[_Points]] = {}
    for scan in scans:
        for tag, points in scan.points.items():
            if points.steps and not points.foreign:
                parts.setdefault(tag, []).append(points)
    recovered = {}
    for tag, tag_parts in parts.items():
        recovered[tag] = RecoveredSeries(
            next((p.metadata for p in tag_parts if p.metadata is not None), None),
            np.array([s for p in tag_parts for s in p.steps], np.int64),
            np.array([w for p in tag_parts for w in p.wall_times], np.float64),
            tuple(v for p in tag_parts for v in p.values),
        )
    untrusted: dict[str, set[tuple[int, float]]] = {}
    for scan in scans:
        for tag, points in scan.untrusted.items():
            untrusted.setdefault(tag, set()).update(points)
    return RunDamage(stretches, recovered, {t: frozenset(p) for t, p in untrusted.items()})


# --- one file -------------------------------------------------------------------------------


class _Record(enum.Enum):
    """What starts at an offset of an event file."""

    READABLE = "readable"  # a whole record whose checksums check
    CUT_SHORT = "cut_short"  # a record the end of the file cuts (or too few bytes to tell)
    FAILING = "failing"  # a length whose checksum fails
    FAILING_DATA = "failing_data"  # a whole record (its length checks) whose data's checksum fails


@dataclasses.dataclass
class _Points:
    """One tag's recovered points in one file, as they are read (lists); `foreign`: its
    metadata names another plugin (its points are not kept)."""

    metadata: summary_pb2.SummaryMetadata | None = None
    foreign: bool = False
    steps: list[int] = dataclasses.field(default_factory=list)
    wall_times: list[float] = dataclasses.field(default_factory=list)
    values: list[np.ndarray] = dataclasses.field(default_factory=list)


class _FileScan:
    """The scan of one event file so far: the stretches closed by a readable record after
    them, the stretch the file ends in (if any), the points recovered after its first
    stretch, and where the next scan starts (`resume`: the end of the last readable record,
    or the start of the stretch the file ends in, which more bytes may complete)."""

    def __init__(self, name: str, identity: tuple[int, int]):
        self.name = name
        self.identity = identity
        self.size = 0
        self.mtime_ns: int | None = None
        self.resume = 0
        self.closed: list[Stretch] = []
        self.tail: Stretch | None = None
        self.points: dict[str, _Points] = {}
        self.untrusted: dict[str, set[tuple[int, float]]] = {}
        self._last_record: tuple[int, int] | None = None  # (offset, end)
        self._last_step: tuple[tuple[int, int] | None, int | None] = (None, None)
        self._checked = b""

    def stretches(self) -> list[Stretch]:
        return self.closed + ([self.tail] if self.tail is not None else [])

    def grew(self, f: BinaryIO) -> bool:
        """Whether `f` still holds the bytes this scan began and ended on (`_checked`): the
        file was appended to, not rewritten (by another writer: its first record, the
        version header, holds its own wall time)."""
        return self._checked == _ends(f, self.resume)

    def advance(self, f: BinaryIO, size: int) -> None:
        """Scans `f` (this file, `size` bytes long) from `resume` to its end."""
        data = _FileBytes(f, size)
        pos = self.resume
        self.tail = None
        while pos < data.size:
            status, end = _record_at(data, pos)
            if status is _Record.READABLE:
                if self.closed:  # the loaders stopped at the first stretch
                    self._recover(data.get(pos + metadata.RECORD_HEADER_BYTES,
                                           end - pos - metadata.RECORD_HEADER_BYTES
                                           - metadata.RECORD_FOOTER_BYTES))
                self._last_record = (pos, end)
                pos = end
                continue
            after = self._after_step(data)
            if status is _Record.CUT_SHORT:
                self.tail = Stretch(self.name, pos, data.size - pos, after, True)
                break
            start = pos
            while status is _Record.FAILING_DATA:  # the records the fast loader may read
                self._distrust(data.get(pos + metadata.RECORD_HEADER_BYTES,
                                        end - pos - metadata.RECORD_HEADER_BYTES
                                        - metadata.RECORD_FOOTER_BYTES))
                pos = end
                status, end = _record_at(data, pos) if pos < data.size else (None, 0)
            if status is _Record.FAILING:
                pos, status = _next_record(data, pos + 1)
            if status is None:
                self.tail = Stretch(self.name, start, data.size - start, after, False)
                break
            self.closed.append(Stretch(self.name, start, pos - start, after, False))
            if status is _Record.CUT_SHORT:
                self.tail = Stretch(self.name, pos, data.size - pos, after, True)
                break
        self.resume = self.tail.offset if self.tail is not None else pos
        self.size = data.size
        self._checked = _ends(f, self.resume)

    def _after_step(self, data: "_FileBytes") -> int | None:
        """The step of the last readable record so far (None: none, or the file's version
        header), read once per record."""
        record = self._last_record
        if self._last_step[0] != record:
            step = None
            if record is not None:
                offset, end = record
                event = _event(data.get(offset + metadata.RECORD_HEADER_BYTES,
                                        end - offset - metadata.RECORD_HEADER_BYTES
                                        - metadata.RECORD_FOOTER_BYTES))
                if event is not None and not event.HasField("file_version"):
                    step = event.step
            self._last_step = (record, step)
        return self._last_step[1]

    def _distrust(self, record: bytes) -> None:
        """Notes the values of the event in `record`, a record whose data fails its
        checksum, by tag: TensorBoard's fast loader reads such a record when its data parses
        (its data server checks a record's checksum only when its data does not parse: its
        default `--no-checksum`), and then goes on with the file; its values may be wrong."""
        event = _event(record)
        if event is not None:
            for value in event.summary.value:
                self.untrusted.setdefault(value.tag, set()).add((event.step, event.wall_time))

    def _recover(self, record: bytes) -> None:
        """Keeps the tensor values of the event in `record` (the points a wur series may
        hold), as TensorBoard's loaders would read them: not of an event with a NaN wall time."""
        event = _event(record)
        if event is None or not event.HasField("summary") or math.isnan(event.wall_time):
            return
        for value in event.summary.value:
            points = self.points.get(value.tag)
            if points is None:
                points = self.points[value.tag] = _Points()
            if value.HasField("metadata") and points.metadata is None:
                points.metadata = summary_pb2.SummaryMetadata()
                points.metadata.CopyFrom(value.metadata)
                points.foreign = value.metadata.plugin_data.plugin_name != metadata.PLUGIN_NAME
            if points.foreign or value.WhichOneof("value") != "tensor" or (
                value.tensor.dtype not in _RECOVERED_DTYPES
            ):
                continue
            try:
                array = tensor_util.make_ndarray(value.tensor)
            except (ValueError, TypeError):  # a malformed tensor: TensorBoard's read fails too
                continue
            points.steps.append(event.step)
            points.wall_times.append(event.wall_time)
            points.values.append(array)


def _ends(f: BinaryIO, length: int) -> bytes:
    """The first and the last `_CHECKED_BYTES` of the first `length` bytes of `f`."""
    f.seek(0)
    head = f.read(min(length, _CHECKED_BYTES))
    start = max(0, length - _CHECKED_BYTES)
    f.seek(start)
    return head + f.read(length - start)


def _event(record: bytes) -> event_pb2.Event | None:
    """The `Event` in a record's data; None when it holds none."""
    try:
        return event_pb2.Event.FromString(record)
    except message.DecodeError:
        return None


class _FileBytes:
    """Reads of an open file, `_CHUNK_BYTES` at a time. `size`: the file's length (smaller
    once a read finds the file shrunk)."""

    def __init__(self, f: BinaryIO, size: int):
        self._f = f
        self.size = size
        self._base = 0
        self._data = b""

    def get(self, offset: int, length: int) -> bytes:
        """The `length` bytes at `offset`; fewer at the end of the file."""
        end = offset + length
        if self._base <= offset and end <= self._base + len(self._data):
            return self._data[offset - self._base:end - self._base]
        self._f.seek(offset)
        self._data = self._f.read(max(length, _CHUNK_BYTES))
        self._base = offset
        if len(self._data) < min(length, self.size - offset):  # shrunk meanwhile
            self.size = offset + len(self._data)
        return self._data[:length]


_LENGTH = struct.Struct("<QI")
_CRC = struct.Struct("<I")


def _record_at(data: _FileBytes, offset: int) -> tuple[_Record, int]:
    """What starts at `offset`, and where a whole record there (readable, or its data
    failing) ends."""
    header = data.get(offset, metadata.RECORD_HEADER_BYTES)
    if len(header) < metadata.RECORD_HEADER_BYTES:
        return _Record.CUT_SHORT, 0
    length, length_crc = _LENGTH.unpack(header)
    if metadata.masked_crc32c(header[:8]) != length_crc:
        return _Record.FAILING, 0
    end = offset + metadata.RECORD_HEADER_BYTES + length + metadata.RECORD_FOOTER_BYTES
    if end > data.size:
        return _Record.CUT_SHORT, 0
    body = data.get(offset + metadata.RECORD_HEADER_BYTES, length + metadata.RECORD_FOOTER_BYTES)
    if len(body) < length + metadata.RECORD_FOOTER_BYTES:
        return _Record.CUT_SHORT, 0
    if metadata.masked_crc32c(body[:length]) != _CRC.unpack_from(body, length)[0]:
        return _Record.FAILING_DATA, end
    return _Record.READABLE, end


def _next_record(data: _FileBytes, start: int) -> tuple[int | None, _Record | None]:
    """The first offset from `start` where a readable record starts, or a record that the
    end of the file cuts (its length's checksum checks), and which of the two; (None, None)
    when there is neither.

    The offsets of a window are tried at once: their lengths and length checksums as numpy
    columns (unaligned views of the bytes), the checksum computed once per distinct length
    below `_MAX_RECORD_BYTES` (a zero-filled block has one), then each offset whose length
    checks is read as `_record_at` reads it.
    """
    header = metadata.RECORD_HEADER_BYTES
    window_start = start
    while window_start + header <= data.size:
        count = min(_SEARCH_WINDOW, data.size - header + 1 - window_start)
        raw = data.get(window_start, count + header - 1)
        count = min(count, len(raw) - header + 1)
        if count <= 0:
            break
        lengths = np.ndarray((count,), "<u8", raw, 0, (1,))
        crcs = np.ndarray((count,), "<u4", raw, 8, (1,)).astype(np.uint64)
        plausible = np.flatnonzero(lengths < _MAX_RECORD_BYTES)
        if len(plausible):
            distinct, position = np.unique(lengths[plausible], return_inverse=True)
            expected = np.array(
                [metadata.masked_crc32c(struct.pack("<Q", int(n))) for n in distinct], np.uint64
            )
            for index in plausible[expected[position] == crcs[plausible]]:
                offset = window_start + int(index)
                status, _ = _record_at(data, offset)
                if status in (_Record.READABLE, _Record.CUT_SHORT):
                    return offset, status
        window_start += count
    return None, None

"""Test helpers: an independent reader of event files and numpy reference ratios.

Imports no TensorFlow (nor Keras): the tests of the TensorFlow-free writers use it too. Event
files are read as TensorBoard's `EventFileLoader` reads them, without TensorFlow; only a logdir
on another filesystem than the local one (e.g. `ram://...`) is reached through `tf.io.gfile`.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import json
import os
import struct
from typing import Iterator

import google_crc32c
import numpy as np
from tensorboard import data_compat, dataclass_compat
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.util import tensor_util

from tb_wur_plugin import metadata


def event_files(logdir: str) -> list[str]:
    """The event files directly in `logdir`, in write order (`write_order`): a local folder
    listed by the standard library, any other path `tf.io.gfile` reads through TensorFlow."""
    pattern = os.path.join(logdir, "events.out.tfevents.*")
    if "://" not in logdir:
        return sorted(glob.glob(pattern), key=write_order)
    import tensorflow as tf

    return sorted(tf.io.gfile.glob(pattern), key=write_order)


def write_order(path: str) -> tuple:
    """A sort key of event file paths in the order they were created: the fields of the name
    after "tfevents." (seconds, host, pid, the process's writer count, suffix), numbers
    compared as numbers. TensorFlow does not pad the writer count, so by name alone a
    process's 10th file of a second sorts before its 9th."""
    fields = os.path.basename(path).split("tfevents.", 1)[-1].split(".")
    return tuple((0, int(f), "") if f.isdigit() else (1, 0, f) for f in fields)


def _masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C of TFRecord framing."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _records(data: bytes) -> Iterator[bytes]:
    """The payloads of the TFRecord bytes `data` up to the first record that is truncated or
    fails a CRC (where TensorFlow's reader raises DataLossError, on which TensorBoard's
    loader stops reading the file)."""
    position = 0
    while position + 12 <= len(data):
        header = data[position:position + 8]
        if struct.unpack("<I", data[position + 8:position + 12])[0] != _masked_crc32c(header):
            return
        (length,) = struct.unpack("<Q", header)
        end = position + 12 + length + 4
        payload = data[position + 12:end - 4]
        if end > len(data) or struct.unpack("<I", data[end - 4:end])[0] != _masked_crc32c(payload):
            return
        yield payload
        position = end


def load_events(path: str) -> Iterator[event_pb2.Event]:
    """The events of the event file `path` as TensorBoard's `EventFileLoader` gives them:
    through its read-time compatibility layers (`data_compat`, `dataclass_compat`)."""
    if "://" in path:
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "rb") as file:
            data = file.read()
    else:
        with open(path, "rb") as file:
            data = file.read()
    initial_metadata: dict[str, summary_pb2.SummaryMetadata] = {}
    for record in _records(data):
        event = data_compat.migrate_event(event_pb2.Event.FromString(record))
        yield from dataclass_compat.migrate_event(event, initial_metadata)


def read_events(logdir: str) -> dict[str, list[tuple[int, np.ndarray, dict]]]:
    """tag -> [(step, value, plugin content)] of the wur series in the event files of `logdir`
    (any path `tf.io.gfile` reads, e.g. `ram://...`), the packed series (protocol version 3)
    read as the per-tag series they hold: each layer's ratio under its tag (content: kind
    ``ratio``, its ``index`` and ``shape``, and ``packed``: the packed tag), the marker under
    `metadata.SKIPPED_STEP_TAG` (from the chunk at offset 0), each layer's histogram counts
    under `metadata.histogram_tag(tag)`. `read_raw_events` gives the series as stored."""
    series = collections.defaultdict(list)
    for tag, points in read_raw_events(logdir).items():
        for step, stored, content in points:
            if content["kind"] == metadata.KIND_PACKED_RATIOS:
                layers = metadata.packed_layers(content)
                ratios, skipped = metadata.decode_packed_ratios(stored, len(layers))
                for i, layer in enumerate(layers):
                    series[layer.tag].append((step, ratios[0, i], {
                        "kind": metadata.KIND_RATIO, "index": content["offset"] + i,
                        "shape": list(layer.shape) if layer.shape is not None else None,
                        "description": layer.described(), "packed": tag,
                    }))
                if content["offset"] == 0:
                    series[metadata.SKIPPED_STEP_TAG].append((
                        step, np.float32(skipped[0]),
                        {"kind": metadata.KIND_SKIPPED_STEP, "packed": tag},
                    ))
            elif content["kind"] == metadata.KIND_PACKED_HISTOGRAMS:
                layers = metadata.packed_layers(content)
                counts = metadata.decode_packed_histograms(stored, len(layers))
                for i, layer in enumerate(layers):
                    series[metadata.histogram_tag(layer.tag)].append((step, counts[i], {
                        "kind": metadata.KIND_HISTOGRAM, "packed": tag,
                    }))
            else:
                series[tag].append((step, stored, content))
    return dict(series)


def read_raw_events(logdir: str) -> dict[str, list[tuple[int, np.ndarray, dict]]]:
    """tag -> [(step, value, plugin content)] of the wur series in the event files of
    `logdir` as stored (histograms of version 1 and 2 decoded to their counts)."""
    series = collections.defaultdict(list)
    contents = {}
    for path in event_files(logdir):
        for event in load_events(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    contents[value.tag] = value.metadata
                meta = contents.get(value.tag)
                if meta is None or meta.plugin_data.plugin_name != metadata.PLUGIN_NAME:
                    continue
                content = json.loads(meta.plugin_data.content)
                stored = tensor_util.make_ndarray(value.tensor)
                if content["kind"] == metadata.KIND_HISTOGRAM:
                    stored = metadata.decode_histogram(stored)
                series[value.tag].append((event.step, stored, content))
    return dict(series)


def ratio_series(logdir: str) -> dict[str, dict[int, float]]:
    """tag -> {step: ratio} of the ratio series in `logdir`: the per-tag ones and the
    layers of the packed ones (`read_events` reads both)."""
    return {
        tag: {step: float(value) for step, value, _ in points}
        for tag, points in read_events(logdir).items()
        if points[0][2]["kind"] == metadata.KIND_RATIO
    }


@dataclasses.dataclass
class PackedRun:
    """The packed series (protocol version 3) of the event files of a logdir, per layer."""

    # layer tag -> [(step, float32 ratio)], in the order written
    ratios: dict[str, list[tuple[int, np.float32]]]
    # [(step, marker)]: the skipped-step marker of each event of packed ratios
    skipped: list[tuple[int, float]]
    # layer tag -> [(step, int64[NUM_BUCKETS] counts)]
    histograms: dict[str, list[tuple[int, np.ndarray]]]
    # layer tag -> (its position among the step's layers: offset + i, its PackedLayer)
    layers: dict[str, tuple[int, metadata.PackedLayer]]
    # packed tag -> its parsed plugin content
    contents: dict[str, dict]
    # per event with packed values: (step, [packed tags in the event's order])
    events: list[tuple[int, list[str]]]
    # layer tag -> [(step, float32 spectral ratio)], in the order written
    spectral: dict[str, list[tuple[int, np.float32]]] = dataclasses.field(default_factory=dict)


def read_packed(logdir: str, metadata_once: bool = True) -> PackedRun:
    """The packed series in the event files of `logdir` (any path `tf.io.gfile` reads),
    decoded per layer with `metadata`'s own decoders, checking as it reads: each packed
    value decodes for its tag's layers; the chunks of one event hold distinct layers at
    contiguous offsets from 0 (ratios: with one skipped-step marker); with `metadata_once`,
    each tag's metadata is in its first value of each file and in no other."""
    run = PackedRun({}, [], {}, {}, {}, [])
    for path in event_files(logdir):
        described: set[str] = set()
        for event in load_events(path):
            chunks = {kind: [] for kind in metadata.PACKED_KINDS}
            in_event = {kind: [] for kind in chunks}  # the layers of its chunks
            tags = []
            for value in event.summary.value:
                plugin = value.metadata.plugin_data
                if value.HasField("metadata") and plugin.plugin_name == metadata.PLUGIN_NAME:
                    content = metadata.parse_plugin_content(plugin.content)
                    if content["kind"] in metadata.PACKED_KINDS:
                        assert value.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
                        previous = run.contents.setdefault(value.tag, content)
                        assert previous == content, f"{value.tag}: its content changed"
                        assert not (metadata_once and value.tag in described), (
                            f"{path}: {value.tag} described again at step {event.step}")
                        described.add(value.tag)
                content = run.contents.get(value.tag)
                if content is None:
                    continue
                assert not metadata_once or value.tag in described, (
                    f"{path}: {value.tag} first written without its metadata")
                tags.append(value.tag)
                layers = metadata.packed_layers(content)
                stored = tensor_util.make_ndarray(value.tensor)
                chunks[content["kind"]].append((content["offset"], len(layers)))
                in_event[content["kind"]].extend(layer.tag for layer in layers)
                for i, layer in enumerate(layers):
                    if content["kind"] == metadata.KIND_PACKED_RATIOS or layer.tag not in run.layers:
                        run.layers[layer.tag] = (content["offset"] + i, layer)
                if content["kind"] in (metadata.KIND_PACKED_RATIOS, metadata.KIND_PACKED_SPECTRAL):
                    ratios, skipped = metadata.decode_packed_ratios(stored, len(layers))
                    chunks[content["kind"]][-1] += (bool(skipped[0]),)
                    into = (run.ratios if content["kind"] == metadata.KIND_PACKED_RATIOS
                            else run.spectral)
                    for layer, ratio in zip(layers, ratios[0]):
                        into.setdefault(layer.tag, []).append((event.step, ratio))
                else:
                    counts = metadata.decode_packed_histograms(stored, len(layers))
                    for layer, row in zip(layers, counts):
                        run.histograms.setdefault(layer.tag, []).append((event.step, row))
            for kind, parts in chunks.items():
                if not parts:
                    continue
                assert len(set(in_event[kind])) == len(in_event[kind]), in_event[kind]
                offsets = [part[0] for part in parts]
                assert offsets == list(np.cumsum([0] + [p[1] for p in parts[:-1]])), offsets
                if kind != metadata.KIND_PACKED_HISTOGRAMS:
                    (marker,) = {part[2] for part in parts}  # the same in every chunk
                if kind == metadata.KIND_PACKED_RATIOS:
                    run.skipped.append((event.step, 1.0 if marker else 0.0))
            if tags:
                run.events.append((event.step, tags))
    return run


def reference_ratio(before: np.ndarray, after: np.ndarray) -> float:
    """‖after − before‖ / ‖before‖ in float64, with the contract's special values."""
    old = np.asarray(before, dtype=np.float64)
    new = np.asarray(after, dtype=np.float64)
    if not (np.all(np.isfinite(old)) and np.all(np.isfinite(new))):
        return float("nan")
    weight = np.sqrt(np.sum(old**2))
    update = np.sqrt(np.sum((new - old) ** 2))
    if update == 0:
        return 0.0
    if weight == 0:
        return float("inf")
    return float(update / weight)


def reference_buckets(values: np.ndarray) -> np.ndarray:
    """Bucket counts by the protocol's rules, computed with float64 log10 (no searchsorted)."""
    counts = np.zeros(metadata.NUM_BUCKETS, dtype=np.int64)
    for x in np.asarray(values, dtype=np.float64).ravel():
        if np.isnan(x) or x < 0:
            counts[metadata.NAN_BUCKET] += 1
        elif x == 0:
            counts[metadata.ZERO_BUCKET] += 1
        elif np.isinf(x):
            counts[metadata.INF_BUCKET] += 1
        elif x < 10.0**metadata.LOG10_MIN:
            counts[metadata.UNDERFLOW_BUCKET] += 1
        elif x >= 10.0**metadata.LOG10_MAX:
            counts[metadata.OVERFLOW_BUCKET] += 1
        else:
            k = int(np.floor((np.log10(x) - metadata.LOG10_MIN) * metadata.BINS_PER_DECADE))
            counts[metadata.FIRST_BIN + k] += 1
    return counts


def assert_ratios_close(actual: dict, expected: dict, rtol: float) -> None:
    """Compare {key: ratio} dicts, where inf must match inf and NaN must match NaN.

    Ratios are summed in float32 (relative error about 1e-7) and stored as float32 (6e-8):
    rtol=5e-7 allows both."""
    assert set(actual) == set(expected), (sorted(actual), sorted(expected))
    for key, want in expected.items():
        got = actual[key]
        if np.isnan(want) or np.isinf(want):
            assert np.isnan(got) if np.isnan(want) else got == want, (key, got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, err_msg=str(key))

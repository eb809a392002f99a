"""The on-disk protocol of the wur plugin: plugin name, summary metadata, histogram edges.

Everything a writer and a reader must agree on lives here and nowhere else.

Series kinds (``kind`` in the plugin content, a JSON object):
- ``ratio``: one layer's weight-update ratio ‖Δw‖₂ / ‖w‖₂, a float32 scalar per step
  (``DATA_CLASS_SCALAR``). Its tag is the layer's tag (the variable path). ``index``, when
  present, is the layer's position among the variables written together (model order).
  ``shape``, when present, is the variable's shape, a list of non-negative ints (``[]`` for
  a scalar): the reader's judgement compares a layer with the run's other layers of the same
  kind (`layer_kind`: matrices, with two or more dimensions, and vectors). Optional, so that
  the ratio kind is still written as version 1 and older readers read it; a series without it
  (written before it existed) falls back to the shape in its description
  (`shape_from_description`), else its kind is unknown.
- ``histogram``: the layer's elementwise ratios |Δw_i| / |w_i| bucketed on the fixed
  edges below, ``NUM_BUCKETS`` counts per step (``DATA_CLASS_TENSOR``), stored as either
  (each step's tensor says which, by its dtype; `decode_histogram` reads both):
  version 1: an int64 vector of the ``NUM_BUCKETS`` counts;
  version 2 (``"encoding": "varint"`` in the plugin content): a uint8 vector, the
  ``NUM_BUCKETS`` counts one after the other as protobuf varints (LEB128: 7 bits a byte,
  low first, the high bit set on every byte but a count's last): one byte for a count
  below 128, so 53 to about 150 bytes instead of 424 (`encode_histogram`).
  Its tag is ``histogram_tag(layer_tag)``.
- ``learning_rate``: the optimizer's learning rate, a float32 scalar per step
  (``DATA_CLASS_SCALAR``), tag ``LEARNING_RATE_TAG``.
- ``skipped_step``: written with the ratios at every step `watch` and the callback log, a
  float32 scalar (``DATA_CLASS_SCALAR``), tag ``SKIPPED_STEP_TAG``: 1 when no watched
  variable changed at that step (all ratios are 0: the optimizer skipped the update, as a
  ``LossScaleOptimizer`` does on non-finite gradients), else 0.
- ``line_search``: one series of the stochastic Armijo line search (`tb_wur_plugin.armijo`),
  a float32 scalar per step (``DATA_CLASS_SCALAR``, so that both TensorBoard loaders read
  it). The plugin content names the series (``"series"``, one of ``LINE_SEARCH_SERIES``) and
  its tag is ``line_search_tag(series)``, i.e. one of ``LINE_SEARCH_TAGS``:

  ====================  ==============================  =====================================
  series                tag                             value at step t
  ====================  ==============================  =====================================
  ``step_size``         ``_wur/line_search/step_size``  the step applied: the accepted step
                                                        size, 1e-6 when no trial was accepted,
                                                        0 when the gradient was too small
  ``backtracks``        ``_wur/line_search/backtracks`` rejected trials (an integer, exact in
                                                        float32)
  ``loss``              ``_wur/line_search/loss``       the batch loss before the step (f)
  ``new_loss``          ``_wur/line_search/new_loss``   the batch loss at the accepted trial
                                                        (f'; the last rejected trial's when
                                                        none was accepted; f when nothing
                                                        moved)
  ====================  ==============================  =====================================

  The four series of a step are written as one event, at the step of the update (the number
  of updates before it). Step sizes are computed in float64 and stored as float32 (a
  positive value below float32's range as its smallest positive value).

Scalars are float32 because TensorBoard's fast loader reads no other scalar type; a positive
value below float32's range is stored as its smallest positive value, never as 0.

Packed series (protocol version 3): the writers of whole steps (`watch`, the callback,
`SummaryWriter.add_ratios` / `add_histograms`, PyTorch `watch`, JAX `log_update_ratios`, TF1
`compat.v1`) write all the layers of a logged step as one tensor per chunk of at most
``MAX_PACKED_LAYERS`` layers (``DATA_CLASS_TENSOR``), instead of one scalar per layer: a
data server keeps one record per (tag, step), so a step then costs one record per chunk.
- ``packed_ratios``: tag ``packed_ratios_tag(layers, offset)`` (``_wur/ratios/`` and a
  digest of the chunk's layers and offset: a new tag whenever the set of layers changes).
  The plugin content names the chunk's layers in order (``"layers"``: ``{"tag", "shape",
  "description"}`` each, ``shape`` optional) and ``"offset"``, the position of its first
  layer among all layers of the step (model order: ``offset + i``). Each step's value is a
  float32 vector of ``len(layers) + 1``: the layers' ratios in that order, then the
  skipped-step marker of the step (1 or 0, as ``skipped_step`` below).
- ``packed_histograms``: tag ``packed_histograms_tag(layers, offset)``
  (``_wur/histograms/``), the same content (layers' tags only) plus the histogram layout;
  each step's value is a uint8 vector: the ``len(layers) × NUM_BUCKETS`` counts, layer after
  layer, as the varints of a version-2 histogram (`encode_packed_histograms`).
TensorBoard reads a tag's metadata from its first event only, so the layers of a packed tag
never change; the reader reads packed and per-tag series of one run side by side.

Metadata once: a writer writes a tag's `SummaryMetadata` with the tag's first value in
each event file only (as TF1's `FileWriter.add_summary` does); TensorBoard takes a series'
metadata from its first occurrence. Readers still accept files that repeat it at every
step (all files written before protocol version 2).

Tags the project chooses itself start with ``RESERVED_TAG_PREFIX``; no ratio tag does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Iterable, Sequence

import google_crc32c
import numpy as np
from tensorboard.compat.proto import summary_pb2

PLUGIN_NAME = "wur"

# Version 1: JSON plugin content, histogram layout below, int64 counts.
# Version 2: histograms' counts as varints in a uint8 vector (`encode_histogram`); the
# other kinds are still written as version 1 (unchanged), so that older readers read them.
# Version 3: the packed kinds (a step's layers in one tensor per chunk); the per-tag kinds
# that `wur_summary.scalar` / `histogram` still write keep their versions.
PROTOCOL_VERSION = 3
PACKED_VERSION = 3
# The histogram version writers write (1 or 2). Readers read both whatever this says.
HISTOGRAM_WRITE_VERSION = 2
HISTOGRAM_ENCODING_VARINT = "varint"

KIND_RATIO = "ratio"
KIND_HISTOGRAM = "histogram"
KIND_LEARNING_RATE = "learning_rate"
KIND_SKIPPED_STEP = "skipped_step"
KIND_LINE_SEARCH = "line_search"
KIND_PACKED_RATIOS = "packed_ratios"
KIND_PACKED_HISTOGRAMS = "packed_histograms"
# Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ (operator norms), stored as the packed ratios are;
# readers of version 3 that predate the kind skip it as an unknown kind.
KIND_PACKED_SPECTRAL = "packed_spectral"
PACKED_KINDS = (KIND_PACKED_RATIOS, KIND_PACKED_HISTOGRAMS, KIND_PACKED_SPECTRAL)
KINDS = (KIND_RATIO, KIND_HISTOGRAM, KIND_LEARNING_RATE, KIND_SKIPPED_STEP, KIND_LINE_SEARCH,
         *PACKED_KINDS)
# The most layers one packed tensor holds: a step of more layers is written as several
# chunks, so that one tag's points (all its steps are read in one gRPC answer of at most
# 256 MiB in TensorBoard's fast loader) stay within ~100 MiB for 100,000 steps.
MAX_PACKED_LAYERS = 256

RESERVED_TAG_PREFIX = "_wur/"
LEARNING_RATE_TAG = RESERVED_TAG_PREFIX + "learning_rate"
SKIPPED_STEP_TAG = RESERVED_TAG_PREFIX + "skipped_step"
_HISTOGRAM_TAG_PREFIX = RESERVED_TAG_PREFIX + "histogram/"
_PACKED_RATIOS_TAG_PREFIX = RESERVED_TAG_PREFIX + "ratios/"
_PACKED_HISTOGRAMS_TAG_PREFIX = RESERVED_TAG_PREFIX + "histograms/"
_PACKED_SPECTRAL_TAG_PREFIX = RESERVED_TAG_PREFIX + "spectral/"
_PACKED_TAG_PREFIXES = {
    KIND_PACKED_RATIOS: _PACKED_RATIOS_TAG_PREFIX,
    KIND_PACKED_HISTOGRAMS: _PACKED_HISTOGRAMS_TAG_PREFIX,
    KIND_PACKED_SPECTRAL: _PACKED_SPECTRAL_TAG_PREFIX,
}

# The ratio a series holds: the Frobenius ratio ‖Δw‖₂ / ‖w‖₂ of the flattened parameter (the
# ratios, the default everywhere), or the spectral ratio ‖ΔW‖₂ / ‖W‖₂ of the parameter viewed
# as a matrix (its largest singular values; parameters of two or more dimensions only).
METRIC_FROBENIUS = "frobenius"
METRIC_SPECTRAL = "spectral"
METRICS = (METRIC_FROBENIUS, METRIC_SPECTRAL)
_RATIO_KINDS = {METRIC_FROBENIUS: KIND_PACKED_RATIOS, METRIC_SPECTRAL: KIND_PACKED_SPECTRAL}


def packed_ratio_kind(metric: str) -> str:
    """The packed kind holding the ratios of `metric` (one of ``METRICS``).

    Raises:
      ValueError: `metric` is not one of ``METRICS``.
    """
    kind = _RATIO_KINDS.get(metric) if isinstance(metric, str) else None
    if kind is None:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return kind

# The series of the line search (kind KIND_LINE_SEARCH), in the order they are written.
LINE_SEARCH_STEP_SIZE = "step_size"
LINE_SEARCH_BACKTRACKS = "backtracks"
LINE_SEARCH_LOSS = "loss"
LINE_SEARCH_NEW_LOSS = "new_loss"
LINE_SEARCH_SERIES = (
    LINE_SEARCH_STEP_SIZE, LINE_SEARCH_BACKTRACKS, LINE_SEARCH_LOSS, LINE_SEARCH_NEW_LOSS
)
_LINE_SEARCH_TAG_PREFIX = RESERVED_TAG_PREFIX + "line_search/"
LINE_SEARCH_STEP_SIZE_TAG = _LINE_SEARCH_TAG_PREFIX + LINE_SEARCH_STEP_SIZE
LINE_SEARCH_BACKTRACKS_TAG = _LINE_SEARCH_TAG_PREFIX + LINE_SEARCH_BACKTRACKS
LINE_SEARCH_LOSS_TAG = _LINE_SEARCH_TAG_PREFIX + LINE_SEARCH_LOSS
LINE_SEARCH_NEW_LOSS_TAG = _LINE_SEARCH_TAG_PREFIX + LINE_SEARCH_NEW_LOSS
LINE_SEARCH_TAGS = (
    LINE_SEARCH_STEP_SIZE_TAG, LINE_SEARCH_BACKTRACKS_TAG, LINE_SEARCH_LOSS_TAG,
    LINE_SEARCH_NEW_LOSS_TAG,
)

# Histogram edges: 10**LOG10_MIN ... 10**LOG10_MAX, BINS_PER_DECADE bins per decade.
LOG10_MIN = -10
LOG10_MAX = 2
BINS_PER_DECADE = 4
NUM_BINS = (LOG10_MAX - LOG10_MIN) * BINS_PER_DECADE
# HISTOGRAM_EDGES[k] = 10 ** (LOG10_MIN + k / BINS_PER_DECADE), k = 0 .. NUM_BINS.
HISTOGRAM_EDGES: np.ndarray = 10.0 ** (
    LOG10_MIN + np.arange(NUM_BINS + 1, dtype=np.float64) / BINS_PER_DECADE
)

# Bucket layout of a histogram's counts vector (length NUM_BUCKETS):
#   ZERO_BUCKET       ratio == 0
#   UNDERFLOW_BUCKET  0 < ratio < HISTOGRAM_EDGES[0]
#   FIRST_BIN + k     HISTOGRAM_EDGES[k] <= ratio < HISTOGRAM_EDGES[k + 1]
#   OVERFLOW_BUCKET   HISTOGRAM_EDGES[-1] <= ratio < +inf
#   INF_BUCKET        ratio == +inf (the weight was 0 and moved)
#   NAN_BUCKET        NaN, or negative (not a ratio)
ZERO_BUCKET = 0
UNDERFLOW_BUCKET = 1
FIRST_BIN = 2
OVERFLOW_BUCKET = FIRST_BIN + NUM_BINS
INF_BUCKET = OVERFLOW_BUCKET + 1
NAN_BUCKET = INF_BUCKET + 1
NUM_BUCKETS = NAN_BUCKET + 1


def histogram_tag(layer_tag: str) -> str:
    """The tag under which the histograms of `layer_tag` are written."""
    return _HISTOGRAM_TAG_PREFIX + layer_tag


def layer_of_histogram_tag(tag: str) -> str | None:
    """Inverse of `histogram_tag`; None for a tag that is not a histogram tag."""
    if tag.startswith(_HISTOGRAM_TAG_PREFIX):
        return tag[len(_HISTOGRAM_TAG_PREFIX):]
    return None


def line_search_tag(series: str) -> str:
    """The tag of a line-search series (one of `LINE_SEARCH_SERIES`)."""
    if series not in LINE_SEARCH_SERIES:
        raise ValueError(
            f"unknown line-search series {series!r}; expected one of {LINE_SEARCH_SERIES}"
        )
    return _LINE_SEARCH_TAG_PREFIX + series


def is_reserved_tag(tag: str) -> bool:
    """Whether `tag` is in the namespace of the series the project names itself."""
    return tag.startswith(RESERVED_TAG_PREFIX)


def check_layer_tag(tag: Any, what: str = "tag", article: str = "a ") -> None:
    """Raise a TypeError unless `tag` is a str, a ValueError if it is empty or in the
    plugin's reserved namespace; the messages call it `what` ("a tag must be a str")."""
    if type(tag) is str and tag and not tag.startswith(RESERVED_TAG_PREFIX):
        return  # the usual tag, without the generic checks
    if not isinstance(tag, str):
        raise TypeError(f"{article}{what} must be a str, got {type(tag).__name__}: {tag!r}")
    if not tag:
        raise ValueError(f"{article}{what} must not be empty")
    if is_reserved_tag(tag):
        raise ValueError(
            f"{what} {tag!r} starts with {RESERVED_TAG_PREFIX!r}, which is reserved "
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
        if is_reserved_tag(path):
            raise ValueError(
                f"variable path {path!r} starts with {RESERVED_TAG_PREFIX!r}, which "
                "is reserved for the plugin's own series; rename the layer or variable"
            )
        tag, suffix = path, 0
        while tag in taken or (suffix and tag in every_path):  # keep other paths free
            suffix += 1
            tag = f"{path}_{suffix}"
        taken.add(tag)
        tags.append(tag)
    return tags


def create_summary_metadata(
    kind: str,
    description: str | None = None,
    index: int | None = None,
    series: str | None = None,
    histogram_version: int | None = None,
    shape: Sequence[int] | None = None,
) -> summary_pb2.SummaryMetadata:
    """A `SummaryMetadata` for a series of the given kind, with its data class set.

    `index`: the layer's position among the variables written together (model order).
    `shape`: for ``KIND_RATIO`` (refused elsewhere), the variable's shape (non-negative ints).
    `series`: for ``KIND_LINE_SEARCH`` (required there, refused elsewhere), which one of
    `LINE_SEARCH_SERIES`.
    `histogram_version`: for ``KIND_HISTOGRAM``, the version its values are written in (1:
    int64 counts, 2: varints); default `HISTOGRAM_WRITE_VERSION`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown wur series kind {kind!r}; expected one of {KINDS}")
    version = 1
    if kind == KIND_HISTOGRAM:
        version = HISTOGRAM_WRITE_VERSION if histogram_version is None else histogram_version
        if version not in (1, 2):
            raise ValueError(f"histogram_version must be 1 or 2, got {version!r}")
    content: dict[str, Any] = {"version": version, "kind": kind}
    if index is not None:
        content["index"] = index
    if shape is not None:
        if kind != KIND_RATIO:
            raise ValueError(f"shape= is only for kind {KIND_RATIO!r}, not {kind!r}")
        content["shape"] = checked_shape(shape)
    if kind == KIND_LINE_SEARCH:
        if series not in LINE_SEARCH_SERIES:
            raise ValueError(
                f"a line-search series needs series= one of {LINE_SEARCH_SERIES}, got {series!r}"
            )
        content["series"] = series
    elif series is not None:
        raise ValueError(f"series= is only for kind {KIND_LINE_SEARCH!r}, not {kind!r}")
    if kind == KIND_HISTOGRAM:
        content.update(
            log10_min=LOG10_MIN, log10_max=LOG10_MAX, bins_per_decade=BINS_PER_DECADE
        )
        if version == 2:
            content["encoding"] = HISTOGRAM_ENCODING_VARINT
    data_class = (
        summary_pb2.DATA_CLASS_TENSOR
        if kind == KIND_HISTOGRAM
        else summary_pb2.DATA_CLASS_SCALAR
    )
    return summary_pb2.SummaryMetadata(
        summary_description=description or "",
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME,
            content=json.dumps(content, sort_keys=True).encode("utf-8"),
        ),
        data_class=data_class,
    )


def parse_plugin_content(content: bytes) -> dict[str, Any]:
    """Decode and check the plugin content written by `create_summary_metadata`.

    Raises ValueError for content this version cannot read.
    """
    try:
        parsed = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"wur plugin content is not JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise ValueError("wur plugin content is not a JSON object")
    version = parsed.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"wur plugin content has no valid version: {version!r}")
    if version > PROTOCOL_VERSION:
        raise ValueError(
            f"wur data of protocol version {version} needs a newer tb-wur-plugin "
            f"(this one reads up to {PROTOCOL_VERSION})"
        )
    if parsed.get("kind") not in KINDS:
        raise ValueError(f"unknown wur series kind {parsed.get('kind')!r}")
    index = parsed.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise ValueError(f"wur plugin content has a bad index: {index!r}")
    if parsed.get("shape") is not None:
        try:
            parsed["shape"] = checked_shape(parsed["shape"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"wur plugin content has a bad shape: {e}") from None
    if parsed["kind"] == KIND_LINE_SEARCH and parsed.get("series") not in LINE_SEARCH_SERIES:
        raise ValueError(f"wur line-search content has a bad series: {parsed.get('series')!r}")
    if parsed["kind"] in PACKED_KINDS:
        _check_packed_content(parsed)
    return parsed


def _check_packed_content(parsed: dict[str, Any]) -> None:
    """Raise a ValueError unless `parsed` is a packed series' content as written."""
    if parsed["version"] < PACKED_VERSION:
        raise ValueError(f"a packed series has version {PACKED_VERSION}, got {parsed['version']}")
    offset, layers = parsed.get("offset"), parsed.get("layers")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"wur packed content has a bad offset: {offset!r}")
    if not isinstance(layers, list) or not 1 <= len(layers) <= MAX_PACKED_LAYERS:
        raise ValueError(f"wur packed content lists no valid layers: {layers!r:.80}")
    for entry in layers:
        if not isinstance(entry, dict) or not isinstance(entry.get("tag"), str) or not entry["tag"]:
            raise ValueError(f"wur packed content has a bad layer: {entry!r:.80}")
        if entry.get("shape") is not None:
            try:
                entry["shape"] = checked_shape(entry["shape"])
            except (TypeError, ValueError) as e:
                raise ValueError(f"wur packed content has a bad shape: {e}") from None
        if not isinstance(entry.get("description", ""), str):
            raise ValueError(f"wur packed content has a bad description: {entry!r:.80}")


def checked_shape(shape: Any) -> list[int]:
    """`shape` (a sequence of non-negative ints) as a list of Python ints.

    Raises:
      TypeError: `shape` is not a sequence of integers.
      ValueError: a dimension is negative.
    """
    if type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape):
        return list(shape)  # the usual case, without the checks' generic isinstance
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        try:
            shape = list(shape)  # e.g. a torch.Size, a TensorShape's as_list()
        except TypeError:
            raise TypeError(f"a shape is a sequence of ints, got {shape!r}") from None
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"a shape's dimensions are ints, got {d!r} in {list(shape)!r}")
        if d < 0:
            raise ValueError(f"a shape's dimensions are non-negative, got {list(shape)!r}")
        dims.append(int(d))
    return dims


# A layer's kind for the reader's judgement: its peers are the run's layers of the same kind.
LAYER_MATRIX = "matrix"  # two or more dimensions: kernels, embeddings, convolutions
LAYER_VECTOR = "vector"  # fewer: biases, normalization scales and offsets
LAYER_UNKNOWN = "unknown"  # no shape known (a run written without one)
LAYER_KINDS = (LAYER_MATRIX, LAYER_VECTOR, LAYER_UNKNOWN)


def layer_kind(shape: Sequence[int] | None) -> str:
    """`LAYER_MATRIX` for a shape of two or more dimensions, `LAYER_VECTOR` for fewer,
    `LAYER_UNKNOWN` for None."""
    if shape is None:
        return LAYER_UNKNOWN
    return LAYER_MATRIX if len(shape) >= 2 else LAYER_VECTOR


def histogram_version_of(summary_metadata: summary_pb2.SummaryMetadata) -> int:
    """The version (1 or 2) a histogram series' values are written in, from its metadata."""
    content = parse_plugin_content(summary_metadata.plugin_data.content)
    return 2 if content.get("encoding") == HISTOGRAM_ENCODING_VARINT else 1


def encode_histogram(counts: Any) -> bytes:
    """The version-2 stored form of `counts` (``NUM_BUCKETS`` non-negative integers): each
    count as a protobuf varint, in bucket order; the bytes of a uint8 tensor."""
    c = np.asarray(counts)
    if c.shape != (NUM_BUCKETS,) or not (np.issubdtype(c.dtype, np.integer)):
        raise ValueError(f"counts must be integers of shape [{NUM_BUCKETS}], got {c.dtype} {c.shape}")
    return _varints(c)


def decode_histogram(stored: Any) -> np.ndarray:
    """The counts of one stored histogram value, int64[NUM_BUCKETS], of either version.

    Args:
      stored: the value as the data provider gives it (`TensorDatum.numpy`): version 1, an
        integer vector of NUM_BUCKETS counts (int64); version 2, a uint8 vector of varints
        (`encode_histogram`). The dtype tells them apart, so that a series whose files mix
        both versions (a run logged before and after an upgrade) reads whole.

    Raises:
      ValueError: `stored` is neither (wrong dtype, length, or a truncated varint).
    """
    array = np.asarray(stored)
    if array.ndim != 1:
        raise ValueError(f"a stored histogram is a vector, got shape {array.shape}")
    if array.dtype == np.uint8:
        return _decode_varints(array, NUM_BUCKETS, "a version-2 histogram")
    if np.issubdtype(array.dtype, np.integer) and len(array) == NUM_BUCKETS:
        return array.astype(np.int64)
    raise ValueError(
        f"a stored histogram is int64[{NUM_BUCKETS}] (version 1) or uint8 varints "
        f"(version 2), got {array.dtype} of length {len(array)}"
    )


def _varints(counts: np.ndarray) -> bytes:
    """Each of `counts` (non-negative integers, any shape, in C order) as a protobuf varint."""
    c = counts.reshape(-1).astype(np.uint64)
    # as many 7-bit groups as the largest count needs (at most 10 for 64 bits)
    width = max(1, -(-int(c.max(initial=0)).bit_length() // 7))
    k = np.arange(width, dtype=np.uint64)
    groups = (c[:, None] >> (np.uint64(7) * k)) & np.uint64(0x7F)
    length = 1 + np.sum((c[:, None] >> (np.uint64(7) * k[1:])) > 0, axis=1)
    groups |= np.where(k < (length[:, None] - 1), np.uint64(0x80), np.uint64(0))
    return groups[k < length[:, None]].astype(np.uint8).tobytes()


def _decode_varints(stored: np.ndarray, count: int, what: str) -> np.ndarray:
    """The `count` varints of the uint8 vector `stored`, int64[count]."""
    b = stored.astype(np.int64)
    ends = np.flatnonzero(b < 0x80)
    if len(ends) != count or (count and ends[-1] != len(b) - 1) or (not count and len(b)):
        raise ValueError(f"{what} holds {count} varints, got {len(ends)} in {len(b)} bytes")
    if not count:
        return np.zeros(0, np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1])
    position = np.arange(len(b)) - np.repeat(starts, ends - starts + 1)
    if position.max() > 8:
        raise ValueError(f"{what} holds a count of more than 63 bits")
    return np.add.reduceat((b & 0x7F) << (7 * position), starts).astype(np.int64)


# --- packed series (protocol version 3) ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PackedLayer:
    """One layer of a packed series: its tag, its variable's shape (None: not known) and
    the description of its ratio series (None: `ratio_description(tag)`)."""

    tag: str
    shape: tuple[int, ...] | None = None
    description: str | None = None

    def described(self) -> str:
        """The description shown with the layer's ratios."""
        return self.description if self.description is not None else ratio_description(self.tag)


def packed_chunks(count: int) -> list[tuple[int, int]]:
    """[(offset, end)] of the chunks a step of `count` layers is written in, in order: at
    most ``MAX_PACKED_LAYERS`` layers each, layers [offset, end)."""
    return [(o, min(o + MAX_PACKED_LAYERS, count)) for o in range(0, count, MAX_PACKED_LAYERS)]


def _packed_content(kind: str, layers: Sequence[PackedLayer], offset: int) -> dict[str, Any]:
    if kind not in PACKED_KINDS:
        raise ValueError(f"not a packed kind: {kind!r}; expected one of {PACKED_KINDS}")
    if not layers or len(layers) > MAX_PACKED_LAYERS:
        raise ValueError(
            f"a packed series holds 1 to {MAX_PACKED_LAYERS} layers, got {len(layers)}"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"a packed series' offset is a non-negative int, got {offset!r}")
    entries = []
    for layer in layers:
        check_layer_tag(layer.tag)
        entry: dict[str, Any] = {"tag": layer.tag}
        if kind != KIND_PACKED_HISTOGRAMS:
            if layer.shape is not None:
                entry["shape"] = checked_shape(layer.shape)
            entry["description"] = layer.described()
        entries.append(entry)
    content: dict[str, Any] = {
        "version": PACKED_VERSION, "kind": kind, "offset": offset, "layers": entries,
    }
    if kind == KIND_PACKED_HISTOGRAMS:
        content.update(
            log10_min=LOG10_MIN, log10_max=LOG10_MAX, bins_per_decade=BINS_PER_DECADE,
            encoding=HISTOGRAM_ENCODING_VARINT,
        )
    return content


def packed_tag(kind: str, layers: Sequence[PackedLayer], offset: int) -> str:
    """The tag of a packed series (`kind`: one of ``PACKED_KINDS``) of `layers` starting at
    `offset`: ``_wur/ratios/``, ``_wur/histograms/`` or ``_wur/spectral/`` and a digest of
    its plugin content, so that another set of layers (or shapes, or descriptions) gets
    another tag."""
    content = _packed_content(kind, layers, offset)
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()
    return _PACKED_TAG_PREFIXES[kind] + digest[:20]


def create_packed_metadata(
    kind: str, layers: Sequence[PackedLayer], offset: int
) -> summary_pb2.SummaryMetadata:
    """The `SummaryMetadata` of a packed series (see `packed_tag`), ``DATA_CLASS_TENSOR``.

    Raises:
      ValueError: `kind` is not packed, `layers` is empty or longer than
        ``MAX_PACKED_LAYERS``, a tag is empty or reserved, `offset` is negative.
      TypeError: a tag is not a str or a shape not a sequence of ints.
    """
    content = _packed_content(kind, layers, offset)
    return summary_pb2.SummaryMetadata(
        summary_description=f"tb-wur-plugin: {len(layers)} layers from layer {offset} ({kind})",
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME,
            content=json.dumps(content, sort_keys=True).encode("utf-8"),
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def packed_layers(content: dict[str, Any]) -> list[PackedLayer]:
    """The layers a packed series' parsed plugin content (`parse_plugin_content`) names."""
    return [
        PackedLayer(
            entry["tag"],
            tuple(entry["shape"]) if entry.get("shape") is not None else None,
            entry.get("description"),
        )
        for entry in content["layers"]
    ]


def step_was_skipped(ratios: Any, reduce_all: Any = np.all, equal: Any = np.equal) -> Any:
    """The skipped-step rule: a logged step whose ratios are all 0 (no watched variable
    changed) was skipped by the optimizer, and its skipped-step marker (``skipped_step``, the
    last value of each packed ratios chunk) is 1; the ratios are written as they are (all 0).
    Every writer that decides the marker from the ratios decides it here.

    Args:
      ratios: the step's ratios, one per layer (an array of any array library).
      reduce_all, equal: that library's `all` and elementwise `equal` (default numpy's;
        TensorFlow's `tf.reduce_all` and `tf.math.equal` in a graph).

    Returns:
      `reduce_all(equal(ratios, 0))`: with numpy a numpy bool; in TensorFlow a boolean
      tensor.
    """
    return reduce_all(equal(ratios, 0))


def encode_packed_ratios(ratios: Any, skipped: bool) -> bytes:
    """The stored value of one step of a ``packed_ratios`` (or ``packed_spectral``) series:
    `ratios` (float32, one
    per layer of the chunk) and the skipped-step marker, as the bytes of a float32 vector
    (little-endian: a `TensorProto`'s ``tensor_content``)."""
    values = np.asarray(ratios, dtype=np.float32).reshape(-1)
    return np.append(values, np.float32(1.0 if skipped else 0.0)).astype("<f4").tobytes()


def decode_packed_ratios(stored: Any, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """(ratios float32[S, layers], skipped bool[S]) of `stored`: one step's value
    (float32[layers + 1]) or S steps' values stacked (float32[S, layers + 1]).

    Raises:
      ValueError: `stored` is not float32 values of that length.
    """
    array = np.asarray(stored)
    if array.dtype != np.float32 or array.ndim not in (1, 2) or array.shape[-1] != layers + 1:
        raise ValueError(
            f"a packed ratios value of {layers} layers is float32[{layers + 1}], got "
            f"{array.dtype}{list(array.shape)}"
        )
    array = array.reshape(-1, layers + 1)
    return array[:, :layers], array[:, layers] >= 0.5


def encode_packed_histograms(counts: Any) -> bytes:
    """The stored value of one step of a ``packed_histograms`` series: `counts` (integers
    [layers, NUM_BUCKETS]) as varints, layer after layer (the bytes of a uint8 vector)."""
    c = np.asarray(counts)
    if c.ndim != 2 or c.shape[1] != NUM_BUCKETS or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(
            f"counts must be integers of shape [layers, {NUM_BUCKETS}], got {c.dtype} {c.shape}"
        )
    return _varints(c)


def decode_packed_histograms(stored: Any, layers: int) -> np.ndarray:
    """The counts int64[layers, NUM_BUCKETS] of one step of a ``packed_histograms`` series.

    Raises:
      ValueError: `stored` is not a uint8 vector of that many varints.
    """
    array = np.asarray(stored)
    if array.dtype != np.uint8 or array.ndim != 1:
        raise ValueError(f"a packed histograms value is a uint8 vector, got {array.dtype}{list(array.shape)}")
    counts = _decode_varints(array, layers * NUM_BUCKETS, f"a packed histogram of {layers} layers")
    return counts.reshape(layers, NUM_BUCKETS)


# --- the descriptions writers give their series (shown in TensorBoard) ---------------------

SKIPPED_STEP_DESCRIPTION = "1 where no watched variable changed (the optimizer skipped the step)"


def ratio_description(tag: str, shape: Sequence[int] | None = None, dtype: str | None = None) -> str:
    """The description of a layer's ratio series, shown in TensorBoard: with the variable's
    shape and dtype name (e.g. "float32") when they are given."""
    return f"Weight-update ratio of {tag}{_about(shape, dtype)}"


def spectral_description(
    tag: str, shape: Sequence[int] | None = None, dtype: str | None = None
) -> str:
    """The description of a layer's spectral-ratio series (as `ratio_description`)."""
    return f"Spectral update ratio of {tag}{_about(shape, dtype)}"


def histogram_description(
    tag: str, shape: Sequence[int] | None = None, dtype: str | None = None
) -> str:
    """The description of a layer's histogram series (as `ratio_description`)."""
    return f"Elementwise update ratios of {tag}{_about(shape, dtype)}"


def _about(shape: Sequence[int] | None, dtype: str | None) -> str:
    return "" if shape is None else f": shape {[int(d) for d in shape]}, {dtype}"


_DESCRIBED_SHAPE = re.compile(r": shape \[((?:\d+(?:, )?)*)\], [^,]*$")


def shape_from_description(description: str | None) -> list[int] | None:
    """The shape a `ratio_description` names (the only place writers before the plugin
    content's ``shape`` put it); None when the description names none."""
    if not description:
        return None
    match = _DESCRIBED_SHAPE.search(description)
    if match is None:
        return None
    return [int(d) for d in match.group(1).split(", ") if d]


_LINE_SEARCH_DESCRIPTIONS = {
    LINE_SEARCH_STEP_SIZE: "Armijo line search: the step size applied",
    LINE_SEARCH_BACKTRACKS: "Armijo line search: the rejected trials",
    LINE_SEARCH_LOSS: "Armijo line search: the batch loss before the step",
    LINE_SEARCH_NEW_LOSS: "Armijo line search: the batch loss at the accepted trial",
}
# The `SummaryMetadata` of each of `LINE_SEARCH_TAGS`, in that order.
LINE_SEARCH_METADATAS = [
    create_summary_metadata(KIND_LINE_SEARCH, _LINE_SEARCH_DESCRIPTIONS[series], series=series)
    for series in LINE_SEARCH_SERIES
]


# --- event-file framing ---------------------------------------------------------------------
# Event files are TFRecord streams: each record is its data's length (u64, little-endian), the
# masked CRC-32C of those 8 bytes (u32), the data (a serialized `Event`), the masked CRC-32C of
# the data (u32). Writers frame their events with it; readers check it (read/damage.py).
RECORD_HEADER_BYTES = 12
RECORD_FOOTER_BYTES = 4
_CRC_MASK = 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of `data` (`google_crc32c`'s: Google's C library)."""
    return google_crc32c.value(data)


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C that TFRecord framing stores after a record's length and data."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & _CRC_MASK

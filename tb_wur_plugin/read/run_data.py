"""A run's wur data, read through TensorBoard's data provider: which series it lists, their
points, and its ratios in model order, as a matrix (all values) and as a step index (which
steps each layer logged, taken from the matrix), each cached per run until the run's data
changes.

Model order: layers sorted by the first step they logged, then by the position `watch` gave
them (`index` in the plugin content), then by the time of their first write, then by tag.

Layouts: a layer's ratios come from per-tag scalar series (`wur_summary.scalar`, and every
writer before protocol version 3) and from packed series (all layers of a step in one tensor
per chunk, `metadata`'s protocol version 3), in any mix: a run written before and after an
upgrade, or whose set of layers changed midway (a new packed tag), reads as one series per
layer, the points of all its sources merged in the order written (by wall time).

Skipped steps: a step is skipped when the last value of the run's skipped-step marker
written at it is 1 and some ratio was logged at it. The marker is read with the ratios (a
packed series carries its own), so the same steps survive TensorBoard's sampling.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import threading
from typing import Any, Callable, Hashable, TypeVar

import numpy as np
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as multiplexer_provider
from tensorboard.data import provider

from tb_wur_plugin.read import heatmap, point_columns, tb_private
from tb_wur_plugin import metadata
from tb_wur_plugin.read.argument_values import shown

logger = logging.getLogger(__name__)

# Tags read per data-provider call when a run's matrix is read (bounds the points held).
_READ_BATCH_TAGS = 32
# Steps of a packed series transposed into a matrix at a time (fits a CPU cache).
_TRANSPOSED_STEPS = 256
# Scalar listings kept (by experiment and runs asked for) with the Python loader.
_KEPT_LISTINGS = 64

# A data provider's listing of one series (provider.ScalarTimeSeries or TensorTimeSeries).
Series = Any
Method = TypeVar("Method", bound=Callable)


# --- series classification ----------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _parse_content(content: bytes) -> dict | None:
    """Parsed once per distinct content: every request classifies and orders every series."""
    try:
        return metadata.parse_plugin_content(content)
    except ValueError as e:
        logger.warning("skipping a wur series: %s", e)
        return None


def kind(series: Series) -> str | None:
    """The series' kind (one of metadata.KINDS); None when its plugin content is unreadable
    (the series is then ignored, with a warning logged once per distinct content)."""
    content = _parse_content(series.plugin_content)
    return content["kind"] if content else None


def model_index(series: Series) -> float:
    """The position `watch` gave the layer among the variables written together; +inf when
    the series has none."""
    content = _parse_content(series.plugin_content)
    index = content.get("index") if content else None
    return math.inf if index is None else index


def layer_shape(series: Series) -> list[int] | None:
    """The shape of a ratio series' variable: the plugin content's ``shape``; for a series
    written without one, the shape its description names (metadata.shape_from_description);
    None when neither says."""
    content = _parse_content(series.plugin_content)
    shape = content.get("shape") if content else None
    if shape is not None:
        return shape
    return metadata.shape_from_description(getattr(series, "description", None))


def layer_kinds(listing: "RunListing", tags: tuple[str, ...] | list[str]) -> list[str]:
    """The layer kind (metadata.layer_kind: matrix, vector, unknown) of each of `tags`, the
    ratio tags of `listing` (a tag it does not list: unknown)."""
    return [metadata.layer_kind(listing.shape(tag)) for tag in tags]


def of_kind(series_by_tag: dict[str, Series], series_kind: str) -> dict[str, Series]:
    """The series of `series_by_tag` of kind `series_kind`, by tag."""
    return {tag: s for tag, s in series_by_tag.items() if kind(s) == series_kind}


def line_search_series(series_by_tag: dict[str, Series]) -> dict[str, str]:
    """The line-search series of `series_by_tag`: {series name (one of
    metadata.LINE_SEARCH_SERIES, from the plugin content): tag}."""
    found = {}
    for tag, series in series_by_tag.items():
        content = _parse_content(series.plugin_content)
        if content and content["kind"] == metadata.KIND_LINE_SEARCH:
            found[content["series"]] = tag
    return found


def marker_of(series_by_tag: dict[str, Series]) -> Series | None:
    """The run's skipped-step marker series, or None."""
    series = series_by_tag.get(metadata.SKIPPED_STEP_TAG)
    return series if series is not None and kind(series) == metadata.KIND_SKIPPED_STEP else None


def with_ratios(
    listing: "RunListing", run: str, metric: str = metadata.METRIC_FROBENIUS
) -> "RunListing":
    """`listing`, the listing of `run`'s `metric` ratios.

    Raises:
        errors.NotFoundError: the run lists no ratio series (per-tag or packed) of `metric`.
    """
    if not listing.has_ratios():
        what = "wur ratios" if metric == metadata.METRIC_FROBENIUS else f"{metric} wur ratios"
        raise errors.NotFoundError(f"no {what} in run {shown(run)}")
    return listing


def by_step(points: list) -> list:
    """`points` sorted by step; points of the same step stay in the order they were written."""
    return sorted(points, key=lambda p: p.step)


# --- what is read and cached per run ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepIndex:
    """One run's logged steps, without their values: `tags` in model order and, per tag,
    its first and last logged step and how many steps it logged."""

    tags: tuple[str, ...]
    first_step: np.ndarray  # int64[L]
    last_step: np.ndarray  # int64[L]
    logged_steps: np.ndarray  # int64[L]: distinct steps
    steps: np.ndarray  # int64[S]: the steps some tag logged, ascending
    skipped_at: np.ndarray  # int64[K]: those of `steps` that are skipped steps, ascending

    @classmethod
    def from_matrix(cls, matrix: heatmap.RunMatrix) -> "StepIndex":
        """The index of a run's matrix (whose every row logged some step)."""
        present = matrix.present
        if not matrix.tags:  # argmax has nothing to reduce
            first = last = np.zeros(0, np.intp)
        else:
            first = present.argmax(axis=1)
            last = present.shape[1] - 1 - present[:, ::-1].argmax(axis=1)
        return cls(
            matrix.tags,
            matrix.steps[first],
            matrix.steps[last],
            present.sum(axis=1).astype(np.int64),
            matrix.steps,
            matrix.steps[matrix.skipped_mask],
        )

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return sum(
            a.nbytes
            for a in (self.first_step, self.last_step, self.logged_steps, self.steps, self.skipped_at)
        )


@dataclasses.dataclass(frozen=True)
class PackedSource:
    """One packed series of a run: its listing, its layers (in the order of its values) and
    the model position of its first layer."""

    series: Series
    layers: tuple[metadata.PackedLayer, ...]
    offset: int


@dataclasses.dataclass(frozen=True)
class RunListing:
    """What a run's listing says of its ratios: the per-tag ratio series by tag, its
    skipped-step marker series (None: it has none), its packed ratio and histogram series by
    tag, and which of them hold each layer."""

    ratios: dict[str, Series]
    marker: Series | None
    packed: dict[str, PackedSource] = dataclasses.field(default_factory=dict)
    packed_histograms: dict[str, PackedSource] = dataclasses.field(default_factory=dict)
    metric: str = metadata.METRIC_FROBENIUS
    metrics: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, scalars: dict[str, Series], tensors: dict[str, Series] | None = None,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> "RunListing":
        """The listing of a run's wur scalar and tensor series, each by tag, holding the
        ratios of `metric` (one of metadata.METRICS): Frobenius ratios are the per-tag
        ratio series and the packed ratios, spectral ratios the packed spectral series.
        `metrics` names the metrics the run has ratios of, in metadata.METRICS order.

        Raises:
            ValueError: `metric` is not one of metadata.METRICS.
        """
        kind_wanted = metadata.packed_ratio_kind(metric)
        tensors = tensors or {}
        per_tag = of_kind(scalars, metadata.KIND_RATIO)
        frobenius = _packed_sources(tensors, metadata.KIND_PACKED_RATIOS)
        spectral = _packed_sources(tensors, metadata.KIND_PACKED_SPECTRAL)
        metrics = tuple(
            m for m, present in (
                (metadata.METRIC_FROBENIUS, bool(per_tag) or bool(frobenius)),
                (metadata.METRIC_SPECTRAL, bool(spectral)),
            ) if present
        )
        return cls(
            per_tag if metric == metadata.METRIC_FROBENIUS else {},
            marker_of(scalars),
            frobenius if kind_wanted == metadata.KIND_PACKED_RATIOS else spectral,
            _packed_sources(tensors, metadata.KIND_PACKED_HISTOGRAMS),
            metric,
            metrics,
        )

    @functools.cached_property
    def layers(self) -> dict[str, tuple[float, list[str]]]:
        """{layer tag: (its model position, [the tags of the series holding its ratios])}
        of every layer: the per-tag series first, then the packed series by tag."""
        found: dict[str, tuple[float, list[str]]] = {}
        for tag, series in self.ratios.items():
            found[tag] = (model_index(series), [tag])
        for packed_tag in sorted(self.packed):
            source = self.packed[packed_tag]
            for i, layer in enumerate(source.layers):
                entry = found.setdefault(layer.tag, (source.offset + i, []))
                entry[1].append(packed_tag)
        return found

    def has_ratios(self) -> bool:
        return bool(self.ratios) or bool(self.packed)

    def description(self, tag: str) -> str:
        """The description of layer `tag`'s ratios (of its per-tag series, else of the last
        packed series, by tag, that holds it)."""
        series = self.ratios.get(tag)
        if series is not None:
            return series.description
        for packed_tag in reversed(self.layers[tag][1]):
            for layer in self.packed[packed_tag].layers:
                if layer.tag == tag:
                    return layer.described()
        return ""

    def shape(self, tag: str) -> list[int] | None:
        """The shape of layer `tag`'s variable (None: not known), as `layer_shape`."""
        series = self.ratios.get(tag)
        if series is not None:
            shape = layer_shape(series)
            if shape is not None:
                return shape
        for packed_tag in self.layers.get(tag, (0, []))[1]:
            if packed_tag in self.packed:
                for layer in self.packed[packed_tag].layers:
                    if layer.tag == tag:
                        if layer.shape is not None:
                            return list(layer.shape)
                        described = metadata.shape_from_description(layer.description)
                        if described is not None:
                            return described
        return None

    def histogram_layers(self) -> dict[str, list[str]]:
        """{layer tag: [the packed histogram tags holding it]}."""
        found: dict[str, list[str]] = {}
        for packed_tag in sorted(self.packed_histograms):
            for layer in self.packed_histograms[packed_tag].layers:
                found.setdefault(layer.tag, []).append(packed_tag)
        return found

    @property
    def signature(self) -> tuple:
        """Changes whenever a series gains a later step or a later write."""
        marker = self.marker
        return tuple(
            sorted((tag, s.max_step, s.max_wall_time) for tag, s in self.ratios.items())
        ) + ((marker.max_step, marker.max_wall_time) if marker is not None else (None,)) + tuple(
            sorted((tag, p.series.max_step, p.series.max_wall_time) for tag, p in self.packed.items())
        )


def _packed_sources(tensors: dict[str, Series], kind_wanted: str) -> dict[str, PackedSource]:
    """The packed series of kind `kind_wanted` among a run's tensor series, by tag."""
    found = {}
    for tag, series in tensors.items():
        content = _parse_content(series.plugin_content)
        if content and content["kind"] == kind_wanted:
            found[tag] = PackedSource(
                series, tuple(metadata.packed_layers(content)), content["offset"]
            )
    return found


def _one_call_per_run(method: Method) -> Method:
    """`method` of RunData, one call at a time per (experiment, run): of many requests that
    find a run missing from the cache, one reads it and the others then find it cached,
    instead of each reading the whole run again."""

    @functools.wraps(method)
    def wrapper(self, ctx, experiment, run, *args, **kwargs):
        with self._run_locks.lock((experiment, run)):
            return method(self, ctx, experiment, run, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class RunData:
    """Reads the wur series of an experiment's runs through a data provider.

    Args:
        data_provider: TensorBoard's data provider.
        downsample: the most points read per series.
        matrix_bytes: memory the cached matrices may hold together (the least recently used
            are dropped beyond it; the last one is always kept).
        index_bytes: the same for the cached step indexes.
    """

    def __init__(
        self, data_provider: provider.DataProvider, downsample: int, matrix_bytes: int,
        index_bytes: int,
    ):
        self._provider = data_provider
        self._downsample = downsample
        self._matrices = _RunCache(matrix_bytes)
        self._indexes = _RunCache(index_bytes)
        self._run_locks = _RunLocks()
        self._keep_listings = isinstance(
            data_provider, multiplexer_provider.MultiplexerDataProvider
        )
        self._listings: dict[tuple, tuple[dict, dict]] = {}
        self._listings_lock = threading.Lock()

    def list_scalars(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None = None
    ) -> dict[str, dict[str, Series]]:
        """The wur scalar series of `runs` (None: all runs), by run and tag.

        With the Python loader, whose listing visits every point held (to find each series'
        last step and write), the listing is kept while each series' last point (its
        `read_last_scalars`, one point per series) stays the same.
        """
        run_tag_filter = provider.RunTagFilter(runs=runs) if runs else None
        if not self._keep_listings:
            return self._provider.list_scalars(
                ctx, experiment_id=experiment, plugin_name=metadata.PLUGIN_NAME,
                run_tag_filter=run_tag_filter,
            )
        key = (experiment, tuple(runs) if runs else None)
        last = self._provider.read_last_scalars(  # before the listing: never newer than it
            ctx, experiment_id=experiment, plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=run_tag_filter,
        )
        probe = {
            (run, tag): (p.step, p.wall_time)
            for run, by_tag in last.items() for tag, p in by_tag.items()
        }
        with self._listings_lock:
            kept = self._listings.get(key)
        if kept is not None and kept[0] == probe:
            listing = kept[1]
        else:
            listing = self._provider.list_scalars(
                ctx, experiment_id=experiment, plugin_name=metadata.PLUGIN_NAME,
                run_tag_filter=run_tag_filter,
            )
            with self._listings_lock:
                if len(self._listings) >= _KEPT_LISTINGS:
                    self._listings.clear()
                self._listings[key] = (probe, listing)
        return {run: dict(series) for run, series in listing.items()}  # callers' own copy

    def list_tensors(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None = None
    ) -> dict[str, dict[str, Series]]:
        """The wur tensor series of `runs` (None: all runs), by run and tag."""
        return self._provider.list_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=provider.RunTagFilter(runs=runs) if runs else None,
        )

    def listings(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None = None,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> tuple[dict[str, dict[str, Series]], dict[str, dict[str, Series]], dict[str, RunListing]]:
        """(the scalar series, the tensor series, the `RunListing` of `metric`'s ratios) of
        `runs` (None: all runs with wur data), each by run."""
        scalars = self.list_scalars(ctx, experiment, runs)
        tensors = self.list_tensors(ctx, experiment, runs)
        listings = {
            run: RunListing.of(scalars.get(run, {}), tensors.get(run, {}), metric)
            for run in sorted(set(scalars) | set(tensors))
        }
        return scalars, tensors, listings

    def listing(
        self, ctx: tb_context.RequestContext, experiment: str, run: str,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> RunListing:
        """The `RunListing` of `run`'s `metric` ratios (empty when it has no wur data)."""
        return self.listings(ctx, experiment, [run], metric)[2].get(run) or RunListing(
            {}, None, metric=metric
        )

    def frobenius_reference(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, metric: str
    ) -> heatmap.RunMatrix | None:
        """The matrix of `run`'s Frobenius ratios when its `metric` ratios are judged and
        `metric` is another one (the evidence that the run moves: `flags.others_moving`);
        None for the Frobenius ratios themselves, or a run without Frobenius ratios."""
        if metric == metadata.METRIC_FROBENIUS:
            return None
        listing = self.listing(ctx, experiment, run)
        return self.matrix(ctx, experiment, run, listing) if listing.has_ratios() else None

    def read_tensor_columns(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tags: list[str]
    ) -> dict[str, point_columns.TensorColumns]:
        """The kept points of the tensor series `tags` of `run` as (steps, wall times,
        [values]), in the order the data provider keeps them; without a Python object per
        point but the values' arrays with TensorBoard's two loaders
        (`tb_private.read_tensor_columns`)."""
        return self._columns(
            tb_private.read_tensor_columns, self._provider.read_tensors,
            lambda points: (
                np.array([p.step for p in points], np.int64),
                np.array([p.wall_time for p in points], np.float64),
                [np.asarray(p.numpy) for p in points],
            ),
            ctx, experiment, run, tags,
        )

    def read_packed(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, packed_tag: str,
        source: PackedSource,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(steps, wall times, ratios float32[S, layers], skipped bool[S]) of one packed
        ratio series, its points in the order kept; None when it is gone (the run was
        deleted meanwhile).

        Raises:
            errors.NotFoundError: a value is not what its metadata says (a malformed file).
        """
        columns = self.read_tensor_columns(ctx, experiment, run, [packed_tag]).get(packed_tag)
        if columns is None:
            return None
        steps, wall_times, values = columns
        width = len(source.layers) + 1
        stacked = point_columns.stacked_float32(values, width)
        del values
        if stacked is None:
            raise errors.NotFoundError(
                f"the packed ratios {shown(packed_tag)} of run {shown(run)} are malformed: "
                f"each value should be float32[{width}]"
            )
        ratios, skipped = metadata.decode_packed_ratios(stacked, len(source.layers))
        return steps, wall_times, ratios, skipped

    def layer_columns(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing,
        tags: list[str], memo: dict | None = None,
    ) -> dict[str, point_columns.PointColumns]:
        """The kept points of layers `tags` of `run` as columns (steps, wall times, values
        float64), whatever their layout: the points of all the series holding a layer
        (per-tag, packed) merged in the order written (by wall time). A layer whose series
        are all gone is absent.

        Args:
            memo: a dict kept across calls (e.g. one export's), in which the packed series
                read are kept, so that the layers of one packed series cost one read.
        """
        memo = {} if memo is None else memo
        per_tag = [t for t in tags if t in listing.ratios]
        found: dict[str, list[point_columns.PointColumns]] = {}
        if per_tag:
            for tag, columns in self.read_scalar_columns(ctx, experiment, run, per_tag).items():
                found.setdefault(tag, []).append(columns)
        for tag in tags:
            for packed_tag in listing.layers.get(tag, (0, []))[1]:
                source = listing.packed.get(packed_tag)
                if source is None:
                    continue
                if packed_tag not in memo:
                    memo.clear()  # one packed series at a time: they come in model order
                    memo[packed_tag] = self.read_packed(ctx, experiment, run, packed_tag, source)
                packed = memo[packed_tag]
                if packed is None:
                    continue
                column = [layer.tag for layer in source.layers].index(tag)
                steps, wall_times, ratios, _ = packed
                found.setdefault(tag, []).append(
                    (steps, wall_times, ratios[:, column].astype(np.float64))
                )
        return {tag: _merged(parts) for tag, parts in found.items()}

    def marker_columns(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> point_columns.PointColumns | None:
        """The points of the run's skipped-step marker as columns (1 skipped, 0 applied),
        whatever its layout: its per-tag series and the marker of each packed series that
        starts the layers of a step (offset 0), merged in the order written; None when the
        run has none."""
        parts = []
        if listing.marker is not None:
            columns = self.read_scalar_columns(
                ctx, experiment, run, [metadata.SKIPPED_STEP_TAG]
            ).get(metadata.SKIPPED_STEP_TAG)
            if columns is not None:
                parts.append(columns)
        for packed_tag, source in sorted(listing.packed.items()):
            if source.offset == 0:
                packed = self.read_packed(ctx, experiment, run, packed_tag, source)
                if packed is not None:
                    steps, wall_times, _, skipped = packed
                    parts.append((steps, wall_times, skipped.astype(np.float64)))
        return _merged(parts) if parts else None

    def layer_histograms(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tag: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(steps, wall times, counts int64[S, NUM_BUCKETS]) of every kept histogram of
        layer `tag` of `run`, whatever its layout (its per-tag series, of version 1 or 2,
        and the packed series holding it), by step (the histograms of one step in the order
        written); None when the run holds none.

        Raises:
            errors.NotFoundError: a histogram is malformed.
        """
        tensors = self.list_tensors(ctx, experiment, [run]).get(run, {})
        per_tag = metadata.histogram_tag(tag)
        listing = RunListing.of({}, tensors)
        sources = listing.histogram_layers().get(tag, [])
        if per_tag in tensors and kind(tensors[per_tag]) == metadata.KIND_HISTOGRAM:
            sources = [per_tag, *sources]
        if not sources:
            return None
        parts = []
        try:
            for source_tag, (steps, wall_times, values) in self.read_tensor_columns(
                ctx, experiment, run, sources
            ).items():
                if source_tag == per_tag:  # version 1 (int64 counts) or 2, by each dtype
                    counts = [metadata.decode_histogram(v) for v in values]
                else:
                    source = listing.packed_histograms[source_tag]
                    row = [layer.tag for layer in source.layers].index(tag)
                    counts = [
                        metadata.decode_packed_histograms(v, len(source.layers))[row]
                        for v in values
                    ]
                parts.append((steps, wall_times, np.array(counts, np.int64).reshape(
                    len(counts), metadata.NUM_BUCKETS)))
        except ValueError:
            raise errors.NotFoundError(
                f"histograms of {shown(tag)} in run {shown(run)} are malformed"
            ) from None
        if not parts:  # listed, then gone: the run was deleted meanwhile
            return None
        steps = np.concatenate([p[0] for p in parts])
        wall_times = np.concatenate([p[1] for p in parts])
        counts = np.concatenate([p[2] for p in parts])
        order = np.lexsort((np.arange(len(steps)), wall_times)) if len(parts) > 1 else np.arange(len(steps))
        order = order[np.argsort(steps[order], kind="stable")]
        return steps[order], wall_times[order], counts[order]

    def read_scalars(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tags: list[str]
    ) -> dict[str, list[provider.ScalarDatum]]:
        """The kept points of the scalar series `tags` of `run`, by tag, in the order the
        data provider keeps them; a tag it does not hold is absent."""
        return self._read(self._provider.read_scalars, ctx, experiment, run, tags)

    def read_scalar_columns(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tags: list[str]
    ) -> dict[str, point_columns.PointColumns]:
        """What `read_scalars` reads, each tag's points as columns (steps int64, wall times
        float64, values float64) in the same order; with TensorBoard's fast and Python
        loaders without a Python object per point (`tb_private.read_scalar_columns`)."""
        return self._columns(
            tb_private.read_scalar_columns, self._provider.read_scalars, point_columns.of_points,
            ctx, experiment, run, tags,
        )

    def _columns(self, read_columns, read_public, columns_of, ctx, experiment, run, tags):
        """`read_columns` (a `tb_private` reader) of `tags` of `run`; with another data
        provider, its `read_public` with each series' points made columns by `columns_of`."""
        arguments = dict(
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        columns = read_columns(self._provider, ctx, **arguments)
        if columns is not None:
            return columns.get(run, {})
        by_tag = read_public(ctx, **arguments).get(run, {})
        return {tag: columns_of(by_tag.pop(tag)) for tag in list(by_tag)}

    def _read(self, read, ctx, experiment: str, run: str, tags: list[str]) -> dict[str, list]:
        """`read` (the provider's read_scalars) of `tags` of `run`."""
        data = read(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        return data.get(run, {})

    def learning_rate(
        self, ctx: tb_context.RequestContext, experiment: str, run: str
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(steps ascending and distinct, the value written last at each) of the run's
        learning rate (`_wur/learning_rate`); None when the run logs none. Not cached."""
        series = self.list_scalars(ctx, experiment, [run]).get(run, {})
        listed = series.get(metadata.LEARNING_RATE_TAG)
        if listed is None or kind(listed) != metadata.KIND_LEARNING_RATE:
            return None
        columns = self.read_scalar_columns(
            ctx, experiment, run, [metadata.LEARNING_RATE_TAG]
        ).get(metadata.LEARNING_RATE_TAG)
        if columns is None or not len(columns[0]):
            return None
        steps, _, values = columns
        return _last_written(steps, values)

    @_one_call_per_run
    def matrix(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> heatmap.RunMatrix:
        """The run's ratios as a matrix in model order, with its skipped steps.

        Cached until `listing.signature` changes; read at the first call after.

        Args:
            ctx: the request's context.
            experiment: the experiment id.
            run: the run.
            listing: the run's listing, as the caller just had it from `list_scalars`.

        Returns:
            The matrix; without rows when the run lists no ratio or they hold no point.
        """
        return self._matrix(ctx, experiment, run, listing)

    @_one_call_per_run
    def step_index(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> StepIndex:
        """The run's step index: what `matrix` gives, without the values.

        Cached until `listing.signature` changes; then taken from the run's matrix, read
        (and cached for the heatmap that usually follows) if it is not current: the steps
        cannot be had without reading every point.

        Args: as `matrix`'s.

        Returns:
            The index; without tags when the run lists no ratio or they hold no point.
        """
        key, signature = (experiment, run, listing.metric), listing.signature
        index = self._indexes.get(key, signature)
        if index is None:
            index = StepIndex.from_matrix(self._matrix(ctx, experiment, run, listing))
            self._indexes.put(key, signature, index)
        return index

    def _matrix(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> heatmap.RunMatrix:
        """`matrix`, the caller holding the run's lock."""
        key, signature = (experiment, run, listing.metric), listing.signature
        matrix = self._matrices.get(key, signature)
        if matrix is None:
            matrix = self._packed_matrix(ctx, experiment, run, listing)
            if matrix is None:
                series, skipped_steps = self._read_in_model_order(ctx, experiment, run, listing)
                matrix = heatmap.RunMatrix.from_series(series, skipped_steps)
            self._matrices.put(key, signature, matrix)
        return matrix

    def _packed_matrix(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> heatmap.RunMatrix | None:
        """The matrix of a run written in one packed layer set (the usual run of a writer of
        protocol version 3: every layer in one packed series, all of them logged at the same
        steps), its rows filled one packed series at a time, so that no more than one series'
        points are held beside the matrix; None for any other run (`_read_in_model_order`
        then reads it)."""
        layers = listing.layers
        if listing.ratios or listing.marker is not None or not listing.packed or any(
            len(sources) != 1 for _, sources in layers.values()
        ):
            return None
        order = sorted(layers, key=lambda t: (layers[t][0], t))
        row_of = {tag: row for row, tag in enumerate(order)}
        steps = values = present = skipped = None
        for packed_tag, source in sorted(listing.packed.items(), key=lambda p: p[1].offset):
            packed = self.read_packed(ctx, experiment, run, packed_tag, source)
            if packed is None or not len(packed[0]):
                return None
            chunk_steps, last = _last_written_index(packed[0])
            if steps is None:
                steps = chunk_steps
                values = np.empty((len(order), len(steps)), np.float32)
                skipped = np.zeros(len(steps), bool)
            elif not np.array_equal(chunk_steps, steps):
                return None  # layers logged at different steps: the general path
            rows = [row_of[layer.tag] for layer in source.layers]
            in_order = len(last) == len(packed[0])  # nothing written twice: no reordering
            chunk = packed[2] if in_order else packed[2][last]
            block = rows[0] if rows == list(range(rows[0], rows[0] + len(rows))) else None
            for at in range(0, len(steps), _TRANSPOSED_STEPS):  # cache-sized transposes
                part = chunk[at:at + _TRANSPOSED_STEPS].T
                if block is not None:
                    values[block:block + len(rows), at:at + _TRANSPOSED_STEPS] = part
                else:
                    values[rows, at:at + _TRANSPOSED_STEPS] = part
            skipped |= packed[3] if in_order else packed[3][last]
            del packed, chunk
        present = np.ones(values.shape, bool)
        return heatmap.RunMatrix(tuple(order), steps, values, present, skipped)

    def _read_in_model_order(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], np.ndarray]:
        """([(tag, steps, values)] of the layers that hold points, in model order, each
        layer's steps ascending and distinct, the last value written at a step kept; the
        steps the markers mark skipped)."""
        ratios = listing.ratios
        tags = list(ratios) + ([metadata.SKIPPED_STEP_TAG] if listing.marker is not None else [])
        parts: dict[str, list[point_columns.PointColumns]] = {}
        skipped: list[np.ndarray] = []
        # A few tags per read: with a data provider other than TensorBoard's two, the
        # points (a Python object each) of one batch at a time are held.
        for batch in range(0, len(tags) if ratios else 0, _READ_BATCH_TAGS):
            data = self.read_scalar_columns(
                ctx, experiment, run, tags[batch:batch + _READ_BATCH_TAGS]
            )
            for tag, (steps, wall_times, values) in data.items():
                if not len(steps):
                    continue
                if tag in ratios:
                    parts.setdefault(tag, []).append((steps, wall_times, values))
                else:
                    steps, values = _last_written(steps, values)
                    skipped.append(steps[values >= 0.5])  # the marker: 1 skipped, 0 applied
        # a packed series' layers share its steps: their order is found once per series
        distinct: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
        for packed_tag, source in sorted(listing.packed.items()):
            packed = self.read_packed(ctx, experiment, run, packed_tag, source)
            if packed is None or not len(packed[0]):
                continue
            steps, wall_times, values, marker = packed
            last_steps, last = _last_written_index(steps)
            skipped.append(last_steps[marker[last]])
            first_written = float(wall_times[steps == last_steps[0]].min())
            for column, layer in enumerate(source.layers):
                parts.setdefault(layer.tag, []).append((steps, wall_times, values[:, column]))
                distinct[layer.tag] = (last_steps, values[last, column], first_written)
        series, first_wall_time = [], {}
        for tag, tag_parts in parts.items():
            if len(tag_parts) == 1 and tag in distinct:
                steps, values, first_wall_time[tag] = distinct[tag]
            else:
                steps, wall_times, values = _merged(tag_parts)
                first_wall_time[tag] = float(wall_times[steps == steps.min()].min())
                steps, values = _last_written(steps, values)
            series.append((tag, steps, values))
        layers = listing.layers
        series.sort(key=lambda s: (s[1][0], layers[s[0]][0], first_wall_time[s[0]], s[0]))
        skipped_steps = np.unique(np.concatenate(skipped)) if skipped else np.zeros(0, np.int64)
        return series, skipped_steps


def _merged(parts: list[point_columns.PointColumns]) -> point_columns.PointColumns:
    """The points of several series of one layer as one, in the order written: by wall
    time, the points of one series in their order."""
    if len(parts) == 1:
        steps, wall_times, values = parts[0]
        return steps, wall_times, values.astype(np.float64)
    steps = np.concatenate([p[0] for p in parts])
    wall_times = np.concatenate([p[1] for p in parts])
    values = np.concatenate([p[2].astype(np.float64) for p in parts])
    order = np.argsort(wall_times, kind="stable")
    return steps[order], wall_times[order], values[order]


def _last_written(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps ascending, the value written last at each) of points in the order
    written."""
    distinct, last = _last_written_index(steps)
    return distinct, values[last]


def _last_written_index(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps ascending, the index of the point written last at each) of points
    in the order written."""
    if len(steps) and np.all(steps[1:] > steps[:-1]):  # the usual case: nothing to sort
        return steps, np.arange(len(steps))
    order = np.argsort(steps, kind="stable")[::-1]
    distinct, first = np.unique(steps[order], return_index=True)
    return distinct, order[first]


class _RunCache:
    """Values by (experiment, run), each valid for one data signature; the least recently
    used are dropped while their `nbytes` add up to more than `max_bytes` (the last one put
    is always kept)."""

    def __init__(self, max_bytes: int):
        self._max_bytes = max_bytes
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, signature: tuple) -> Any | None:
        """The value put for `key` with `signature`; None if there is none."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != signature:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: Hashable, signature: tuple, value: Any) -> None:
        """Keeps `value` for `key` and `signature`, replacing what `key` held."""
        with self._lock:
            self._entries[key] = (signature, value)
            self._entries.move_to_end(key)
            total = sum(v.nbytes for _, v in self._entries.values())
            while total > self._max_bytes and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                total -= dropped.nbytes


class _RunLocks:
    """A lock of its own per key (one per run seen: a few hundred bytes each)."""

    def __init__(self):
        self._locks: collections.defaultdict = collections.defaultdict(threading.Lock)
        self._lock = threading.Lock()

    def lock(self, key: Hashable) -> threading.Lock:
        """The lock of `key`."""
        with self._lock:
            return self._locks[key]

"""A run's wur data, read through TensorBoard's data provider: which series it lists, their
points, and its ratios in model order, as a matrix (all values) and as a step index (which
steps each layer logged, taken from the matrix), each cached per run until the run's data
changes.

Model order: layers sorted by the first step they logged, then by the position `watch` gave
them (`index` in the plugin content), then by the time of their first write, then by tag.

Skipped steps: a step is skipped when the last value of the run's skipped-step marker
written at it is 1 and some ratio was logged at it. The marker is read with the ratios, so
the same steps survive TensorBoard's sampling.
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
    kinds = []
    for tag in tags:
        series = listing.ratios.get(tag)
        kinds.append(metadata.layer_kind(layer_shape(series) if series is not None else None))
    return kinds


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


def ratios_of(scalars: dict[str, dict[str, Series]], run: str) -> dict[str, Series]:
    """The ratio series of `run` in a scalar listing.

    Raises:
        errors.NotFoundError: the run lists no ratio series.
    """
    ratio_series = of_kind(scalars.get(run, {}), metadata.KIND_RATIO)
    if not ratio_series:
        raise errors.NotFoundError(f"no wur ratios in run {shown(run)}")
    return ratio_series


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
class RunListing:
    """What a run's scalar listing says of its ratios: the ratio series by tag, and its
    skipped-step marker series (None: it has none)."""

    ratios: dict[str, Series]
    marker: Series | None

    @classmethod
    def of(cls, series_by_tag: dict[str, Series]) -> "RunListing":
        """The listing of a run's wur scalar series, by tag."""
        return cls(of_kind(series_by_tag, metadata.KIND_RATIO), marker_of(series_by_tag))

    @property
    def signature(self) -> tuple:
        """Changes whenever a series gains a later step or a later write."""
        marker = self.marker
        return tuple(
            sorted((tag, s.max_step, s.max_wall_time) for tag, s in self.ratios.items())
        ) + ((marker.max_step, marker.max_wall_time) if marker is not None else (None,))


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
        arguments = dict(
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        columns = tb_private.read_scalar_columns(self._provider, ctx, **arguments)
        if columns is not None:
            return columns.get(run, {})
        by_tag = self._provider.read_scalars(ctx, **arguments).get(run, {})
        return {tag: point_columns.of_points(by_tag.pop(tag)) for tag in list(by_tag)}

    def read_tensors(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tags: list[str]
    ) -> dict[str, list[provider.TensorDatum]]:
        """As `read_scalars`, for tensor series."""
        return self._read(self._provider.read_tensors, ctx, experiment, run, tags)

    def _read(self, read, ctx, experiment: str, run: str, tags: list[str]) -> dict[str, list]:
        """`read` (the provider's read_scalars or read_tensors) of `tags` of `run`."""
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
        key, signature = (experiment, run), listing.signature
        index = self._indexes.get(key, signature)
        if index is None:
            index = StepIndex.from_matrix(self._matrix(ctx, experiment, run, listing))
            self._indexes.put(key, signature, index)
        return index

    def _matrix(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> heatmap.RunMatrix:
        """`matrix`, the caller holding the run's lock."""
        key, signature = (experiment, run), listing.signature
        matrix = self._matrices.get(key, signature)
        if matrix is None:
            series, skipped_steps = self._read_in_model_order(ctx, experiment, run, listing)
            matrix = heatmap.RunMatrix.from_series(series, skipped_steps)
            self._matrices.put(key, signature, matrix)
        return matrix

    def _read_in_model_order(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, listing: RunListing
    ) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], np.ndarray]:
        """([(tag, steps, values)] of the ratio tags that hold points, in model order, each
        tag's steps ascending and distinct, the last value written at a step kept; the steps
        the marker marks skipped)."""
        ratios = listing.ratios
        tags = list(ratios) + ([metadata.SKIPPED_STEP_TAG] if listing.marker is not None else [])
        series, first_wall_time, skipped_steps = [], {}, np.zeros(0, np.int64)
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
                    first_wall_time[tag] = float(wall_times[steps == steps.min()].min())
                steps, values = _last_written(steps, values)
                if tag in ratios:
                    series.append((tag, steps, values))
                else:
                    skipped_steps = steps[values >= 0.5]  # the marker: 1 skipped, 0 applied
        series.sort(
            key=lambda s: (s[1][0], model_index(ratios[s[0]]), first_wall_time[s[0]], s[0])
        )
        return series, skipped_steps


def _last_written(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps ascending, the value written last at each) of points in the order
    written."""
    order = np.argsort(steps, kind="stable")[::-1]
    steps, first = np.unique(steps[order], return_index=True)
    return steps, values[order][first]


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

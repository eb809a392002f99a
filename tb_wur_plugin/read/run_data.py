"""A run's wur data, read through TensorBoard's data provider: its listings (run_listing), its
points, and its ratios in model order, as a matrix (all values) and as a step index (which
steps each layer logged, taken from the matrix), each cached per run until the run's data
changes (lru_cache).

Model order (run_listing): layers sorted by the first step they logged, then by the position
`watch` gave them, then by the time of their first write, then by tag.

Layouts: a run whose layers are held by several series (per-tag and packed, run_listing)
reads as one series per layer, the points of all its sources merged in the order written
(by wall time).

Skipped steps: a step is skipped when the last value of the run's skipped-step marker
written at it is 1 and some ratio was logged at it. The marker is read with the ratios (a
packed series carries its own), so the same steps survive TensorBoard's sampling.

Damaged event files (damage.py): with a `damage.DamageScanner`, each listing also scans the
listed runs' event files (TensorBoard's runs only: `list_runs`); the points of the records
after an unreadable stretch, which TensorBoard's loaders do not read, join the data
provider's: their series are listed (a new one when its metadata is among them, else only
one the provider lists), and read with the provider's points, the points of a series in the
order written (by wall time; a point the provider has too, same step and wall time, once),
downsampled evenly to `downsample` when they are more. The provider's points of a record
whose data fails its checksum (which the fast loader reads when its data parses) are left
out. `damage(experiment, run)` says what the run's latest listing found.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
from typing import Callable, Hashable, TypeVar

import numpy as np
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as multiplexer_provider
from tensorboard.compat.proto import summary_pb2
from tensorboard.data import provider

from tb_wur_plugin.read import damage, heatmap, point_columns, tb_private
from tb_wur_plugin import metadata
from tb_wur_plugin.read.argument_values import shown
from tb_wur_plugin.read.lru_cache import LruCache
from tb_wur_plugin.read.run_listing import PackedSource, RunListing, Series, kind

# Tags read per data-provider call when a run's matrix is read (bounds the points held).
_READ_BATCH_TAGS = 32
# Steps of a packed series transposed into a matrix at a time (fits a CPU cache).
_TRANSPOSED_STEPS = 256
# Scalar listings kept (by experiment and runs asked for) with the Python loader.
_KEPT_LISTINGS = 64

Method = TypeVar("Method", bound=Callable)


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
        damage_scanner: the scanner of the logdir's event files (module docstring); None:
            they are not scanned (`damage` then says None).
    """

    def __init__(
        self, data_provider: provider.DataProvider, downsample: int, matrix_bytes: int,
        index_bytes: int, damage_scanner: damage.DamageScanner | None = None,
    ):
        self._provider = data_provider
        self._damage_scanner = damage_scanner
        self._damage: dict[tuple[str, str], damage.RunDamage] = {}  # by (experiment, run)
        self._downsample = downsample
        self._matrices: LruCache[heatmap.RunMatrix] = LruCache(max_bytes=matrix_bytes)
        self._indexes: LruCache[StepIndex] = LruCache(max_bytes=index_bytes)
        self._run_locks = _RunLocks()
        self._keep_listings = isinstance(
            data_provider, multiplexer_provider.MultiplexerDataProvider
        )
        self._listings: LruCache[dict] = LruCache(max_entries=_KEPT_LISTINGS)

    def damage(self, experiment: str, run: str) -> damage.RunDamage | None:
        """The damage of `run`'s event files as its latest listing found it; None when the
        event files are not scanned, or `run` was not listed yet."""
        return self._damage.get((experiment, run))

    def damages(self, experiment: str) -> dict[str, damage.RunDamage]:
        """The damage of every run listed so far (with or without wur data), by run."""
        return {run: found for (e, run), found in list(self._damage.items()) if e == experiment}

    def _scan_damage(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None
    ) -> dict[str, damage.RunDamage]:
        """The damage of `runs` (None: all runs) that TensorBoard knows (never a directory a
        request names otherwise), each kept for `damage`; {} without a scanner."""
        if self._damage_scanner is None:
            return {}
        known = [r.run_name for r in self._provider.list_runs(ctx, experiment_id=experiment)]
        wanted = known if runs is None else sorted(set(runs) & set(known))
        found = {run: self._damage_scanner.scan(run) for run in wanted}
        for run, run_damage in found.items():
            self._damage[(experiment, run)] = run_damage
        return found

    def list_scalars(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None = None
    ) -> dict[str, dict[str, Series]]:
        """The wur scalar series of `runs` (None: all runs), by run and tag, with those of
        the records after an unreadable stretch (module docstring).

        With the Python loader, whose listing visits every point held (to find each series'
        last step and write), the provider's listing is kept while each series' last point
        (its `read_last_scalars`, one point per series) stays the same.
        """
        return _with_recovered_series(
            self._provider_scalars(ctx, experiment, runs),
            self._scan_damage(ctx, experiment, runs), provider.ScalarTimeSeries,
        )

    def _provider_scalars(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None
    ) -> dict[str, dict[str, Series]]:
        """The data provider's wur scalar series of `runs` (None: all runs), by run and tag
        (`list_scalars`, without the recovered ones)."""
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
        listing = self._listings.get(key, probe)
        if listing is None:
            listing = self._provider.list_scalars(
                ctx, experiment_id=experiment, plugin_name=metadata.PLUGIN_NAME,
                run_tag_filter=run_tag_filter,
            )
            self._listings.put(key, probe, listing)
        return {run: dict(series) for run, series in listing.items()}  # callers' own copy

    def list_tensors(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None = None
    ) -> dict[str, dict[str, Series]]:
        """The wur tensor series of `runs` (None: all runs), by run and tag, with those of
        the records after an unreadable stretch."""
        return _with_recovered_series(
            self._provider_tensors(ctx, experiment, runs),
            self._scan_damage(ctx, experiment, runs), provider.TensorTimeSeries,
        )

    def _provider_tensors(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str] | None
    ) -> dict[str, dict[str, Series]]:
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
        found = self._scan_damage(ctx, experiment, runs)
        scalars = _with_recovered_series(
            self._provider_scalars(ctx, experiment, runs), found, provider.ScalarTimeSeries
        )
        tensors = _with_recovered_series(
            self._provider_tensors(ctx, experiment, runs), found, provider.TensorTimeSeries
        )
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
        `metric` is another one (the evidence that the run moves: `judge.others_moving`);
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
            _recovered_tensors, ctx, experiment, run, tags,
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
            _recovered_scalars, ctx, experiment, run, tags,
        )

    def _columns(
        self, read_columns, read_public, columns_of, recovered_of, ctx, experiment, run, tags
    ):
        """`read_columns` (a `tb_private` reader) of `tags` of `run`; with another data
        provider, its `read_public` with each series' points made columns by `columns_of`;
        with the points recovered after the run's unreadable stretches (`recovered_of` makes
        a `damage.RecoveredSeries` columns of the same kind) merged in, and the points of its
        records whose data fails its checksum (`damage.RunDamage.untrusted`) left out."""
        arguments = dict(
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        columns = read_columns(self._provider, ctx, **arguments)
        if columns is not None:
            found = columns.get(run, {})
        else:
            by_tag = read_public(ctx, **arguments).get(run, {})
            found = {tag: columns_of(by_tag.pop(tag)) for tag in list(by_tag)}
        run_damage = self._damage.get((experiment, run))
        if run_damage is not None:
            for tag in tags:
                untrusted = run_damage.untrusted.get(tag)
                if untrusted and tag in found:
                    found[tag] = _without(found[tag], untrusted)
                recovered = run_damage.recovered.get(tag)
                if recovered is not None:
                    found[tag] = _joined(found.get(tag), recovered_of(recovered), self._downsample)
        return found

    def _read(self, read, ctx, experiment: str, run: str, tags: list[str]) -> dict[str, list]:
        """`read` (the provider's read_scalars) of `tags` of `run`, with the points recovered
        after the run's unreadable stretches merged in and those of its records whose data
        fails its checksum left out (as `_columns` does)."""
        data = read(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        ).get(run, {})
        run_damage = self._damage.get((experiment, run))
        if run_damage is not None:
            for tag in tags:
                untrusted = run_damage.untrusted.get(tag)
                if untrusted and tag in data:
                    data[tag] = [p for p in data[tag] if (p.step, p.wall_time) not in untrusted]
                recovered = run_damage.recovered.get(tag)
                if recovered is not None:
                    steps, wall_times, values = _joined(
                        point_columns.of_points(data.get(tag, [])),
                        _recovered_scalars(recovered), self._downsample,
                    )
                    data[tag] = [
                        provider.ScalarDatum(step=int(s), wall_time=float(w), value=float(v))
                        for s, w, v in zip(steps, wall_times, values)
                    ]
        return data

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


def _with_recovered_series(
    listed: dict[str, dict[str, Series]], found: dict[str, damage.RunDamage], series_class: type,
) -> dict[str, dict[str, Series]]:
    """`listed` (the provider's series of one data class, by run and tag) with the series
    of the points recovered in `found` (each run's damage): a listed series extended to their
    last step and write; a series the provider does not list added when the recovered points
    carry its wur metadata of this data class (`series_class`: `provider.ScalarTimeSeries` or
    `TensorTimeSeries`)."""
    data_class = (
        summary_pb2.DATA_CLASS_SCALAR if series_class is provider.ScalarTimeSeries
        else summary_pb2.DATA_CLASS_TENSOR
    )
    for run, run_damage in found.items():
        if not run_damage.recovered:
            continue
        series = dict(listed.get(run, {}))
        for tag, recovered in run_damage.recovered.items():
            known = series.get(tag)
            described = recovered.metadata
            if known is None and (
                described is None or described.data_class != data_class
                or described.plugin_data.plugin_name != metadata.PLUGIN_NAME
            ):
                continue
            series[tag] = series_class(
                max_step=int(max(recovered.steps.max(), known.max_step if known else -2**63)),
                max_wall_time=float(
                    max(recovered.wall_times.max(), known.max_wall_time if known else -math.inf)
                ),
                plugin_content=known.plugin_content if known else described.plugin_data.content,
                description=known.description if known else described.summary_description,
                display_name=known.display_name if known else described.display_name,
            )
        listed[run] = series
    return listed


def _without(columns, untrusted: frozenset[tuple[int, float]]):
    """`columns` (scalar or tensor columns) without the points whose (step, wall time) is
    one of `untrusted`."""
    steps, wall_times, values = columns
    keep = np.array(
        [(s, w) not in untrusted for s, w in zip(steps.tolist(), wall_times.tolist())], bool
    )
    if keep.all():
        return columns
    if isinstance(values, list):
        return steps[keep], wall_times[keep], [v for v, k in zip(values, keep) if k]
    return steps[keep], wall_times[keep], values[keep]


def _recovered_scalars(recovered: damage.RecoveredSeries) -> point_columns.PointColumns:
    """The recovered points of a scalar series as columns (a value that is not one number:
    not a scalar's point, left out)."""
    scalar = np.array([v.size == 1 for v in recovered.values], bool)
    values = np.array([v.item() for v in recovered.values if v.size == 1], np.float64)
    return recovered.steps[scalar], recovered.wall_times[scalar], values


def _recovered_tensors(recovered: damage.RecoveredSeries) -> point_columns.TensorColumns:
    return recovered.steps, recovered.wall_times, list(recovered.values)


def _joined(provided, recovered, limit: int):
    """A series' points from the provider (columns, or None) and recovered after unreadable
    stretches (columns of the same kind), as one: a recovered point the provider has too
    (same step and wall time) once, all in the order written (by wall time, each part's
    points in their order), evenly downsampled to `limit` (the last point kept) when more."""
    steps, wall_times, values = recovered
    if provided is not None and len(provided[0]):
        have = set(zip(provided[0].tolist(), provided[1].tolist()))
        new = np.array([(s, w) not in have for s, w in zip(steps.tolist(), wall_times.tolist())], bool)
        steps = np.concatenate([provided[0], steps[new]])
        wall_times = np.concatenate([provided[1], wall_times[new]])
        if isinstance(values, list):
            values = list(provided[2]) + [v for v, keep in zip(values, new) if keep]
        else:
            values = np.concatenate([provided[2], values[new]])
    order = np.argsort(wall_times, kind="stable")
    if len(order) > limit:
        order = order[np.unique(np.linspace(0, len(order) - 1, limit).round().astype(np.int64))]
    if isinstance(values, list):
        return steps[order], wall_times[order], [values[i] for i in order]
    return steps[order], wall_times[order], values[order]


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


class _RunLocks:
    """A lock of its own per key (one per run seen: a few hundred bytes each)."""

    def __init__(self):
        self._locks: collections.defaultdict = collections.defaultdict(threading.Lock)
        self._lock = threading.Lock()

    def lock(self, key: Hashable) -> threading.Lock:
        """The lock of `key`."""
        with self._lock:
            return self._locks[key]

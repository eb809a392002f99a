"""What each route of the plugin answers (http_api.md), computed over a run's data
(`read.run_data.RunData`): the JSON bodies, the `/heatmap` and `/compare` payloads
(heatmap_wire), the `/export` text. The routes (routes.py) parse a request, call one
`*_impl` and send its answer; an in-process caller (a benchmark) may call them directly.
Bad requests raise `tensorboard.errors` (400 or 404 with a one-line reason).
"""

from __future__ import annotations

import copy
import math
from typing import Iterator

import numpy as np
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.backend import json_util

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement import judge
from tb_wur_plugin.read import compare, damage, export, heatmap, run_data, run_listing, suggest
from tb_wur_plugin.read.argument_values import shown
from tb_wur_plugin.read.lru_cache import LruCache
from tb_wur_plugin.web import heatmap_wire

# The tags the project chooses itself (metadata.py), as /runs names them to the client.
RESERVED_TAGS = {
    "learning_rate": metadata.LEARNING_RATE_TAG,
    "skipped_step": metadata.SKIPPED_STEP_TAG,
    "histogram_prefix": metadata.histogram_tag(""),
}
# /heatmap answers kept (the tab asks for the same heatmap again on every reload).
_KEPT_HEATMAPS = 16
# /flags answers kept (the tab asks for the same flags again on every reload).
_KEPT_FLAGS = 16
# The line-search series /line_search answers, in the order of its arrays.
_LINE_SEARCH_ROUTE_SERIES = (metadata.LINE_SEARCH_STEP_SIZE, metadata.LINE_SEARCH_BACKTRACKS)


class Answers:
    """The answers of the plugin's routes, over `data`.

    Args:
        data: the run data every answer reads (its caches are shared by all routes).
    """

    def __init__(self, data: run_data.RunData):
        self._data = data
        self._heatmaps: LruCache[bytes] = LruCache(max_entries=_KEPT_HEATMAPS)
        self._flags: LruCache[list[dict]] = LruCache(max_entries=_KEPT_FLAGS)

    def runs_impl(self, ctx: tb_context.RequestContext, experiment: str) -> dict:
        """Every run with wur data: its layers in model order, which series it has, and its
        damaged event files (`damaged`: the unreadable stretches of its files, [] when all
        are whole; None when the logdir's files are not scanned).

        Answers from each run's step index (cached); a run whose index is not current has
        its matrix read, and cached for the heatmap that usually follows.
        """
        scalars, tensors, listings = self._data.listings(ctx, experiment)
        runs = []
        metrics = set()
        for run, listing in listings.items():
            series = scalars.get(run, {})
            histogram_layers = {
                metadata.layer_of_histogram_tag(tag)
                for tag in run_listing.of_kind(tensors.get(run, {}), metadata.KIND_HISTOGRAM)
            } | set(listing.histogram_layers())
            index = self._data.step_index(ctx, experiment, run, listing)
            layers = [
                {
                    "tag": tag,
                    "description": listing.description(tag),
                    "first_step": int(first),
                    "last_step": int(last),
                    "logged_steps": int(logged),
                    "has_histograms": tag in histogram_layers,
                }
                for tag, first, last, logged in zip(
                    index.tags, index.first_step, index.last_step, index.logged_steps
                )
            ]
            runs.append(
                {
                    "run": run,
                    "layers": layers,
                    "first_step": int(index.steps[0]) if len(index.steps) else None,
                    "last_step": int(index.steps[-1]) if len(index.steps) else None,
                    "has_learning_rate": metadata.LEARNING_RATE_TAG in series,
                    "has_line_search": _has_line_search(run_listing.line_search_series(series)),
                    "skipped_steps": len(index.skipped_at),
                    "skipped_at": index.skipped_at.tolist(),
                    "metrics": list(listing.metrics),
                    "damaged": _damaged(self._data.damage(experiment, run)),
                }
            )
            metrics.update(listing.metrics)
        return {
            "runs": runs,
            "reserved_tags": RESERVED_TAGS,
            "metrics": [m for m in metadata.METRICS if m in metrics],
        }

    def heatmap_impl(
        self,
        ctx: tb_context.RequestContext,
        experiment: str,
        runs: list[str],
        columns: int,
        start: int | None,
        end: int | None,
        reduction: str,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> bytes:
        """The layers × columns heatmap of `runs`' `metric` ratios over [start, end], packed
        by heatmap_wire."""
        if len(set(runs)) != len(runs):
            raise errors.InvalidArgumentError("each run may be given only once")
        listings = self._ratio_listings(ctx, experiment, runs, metric)
        matrices = [
            self._data.matrix(ctx, experiment, run, listing)
            for run, listing in zip(runs, listings)
        ]
        steps = _steps_of(matrices)
        if not len(steps):
            raise errors.NotFoundError("no wur ratios in the requested runs")
        start = int(steps[0]) if start is None else start
        end = int(steps[-1]) if end is None else end
        if start > end:
            raise errors.InvalidArgumentError(f"start ({start}) must not be after end ({end})")
        query = (experiment, tuple(runs), start, end, columns, reduction, metric)
        signature = tuple(listing.signature for listing in listings)  # the matrices' data
        payload = self._heatmaps.get(query, signature)
        if payload is None:
            payload = self._heatmap_payload(runs, matrices, start, end, columns, reduction, metric)
            self._heatmaps.put(query, signature, payload)
        return payload

    def _heatmap_payload(
        self, runs: list[str], matrices: list[heatmap.RunMatrix], start: int, end: int,
        columns: int, reduction: str, metric: str,
    ) -> bytes:
        """The heatmap_wire payload of `heatmap_impl`, computed from `runs`' matrices."""
        cols = heatmap.make_columns(_steps_of(matrices), start, end, columns)
        arrays: dict[str, np.ndarray] = {
            "column_start": cols.start.astype(np.float64),
            "column_first": cols.first,
            "column_last": cols.last,
            "column_count": cols.count,
        }
        described = []
        for position, (run, matrix) in enumerate(zip(runs, matrices)):
            values, missing = heatmap.reduce_columns(matrix, cols, reduction)
            values, missing, held = heatmap.hold_gaps(matrix, cols, values, missing)
            arrays[f"codes_{position}"] = heatmap_wire.encode_cells(values, missing)
            arrays[f"skipped_{position}"] = heatmap.skipped_per_column(matrix, cols)
            arrays[f"held_{position}"], arrays[f"held_from_{position}"] = (
                heatmap_wire.held_arrays(held)
            )
            described.append(
                {
                    "run": run,
                    "tags": list(matrix.tags),
                    "codes": f"codes_{position}",
                    "skipped": f"skipped_{position}",
                    "held": f"held_{position}",
                    "held_from": f"held_from_{position}",
                }
            )
        header = {
            "start": start,
            "end": end,
            "reduction": reduction,
            "metric": metric,
            "columns": len(cols.start),
            "codes": heatmap_wire.CODES,
            "runs": described,
        }
        return heatmap_wire.pack(header, arrays)

    def flags_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str,
        low: float | None = None, high: float | None = None,
        patience: int = judge.DEFAULT_PATIENCE, metric: str = metadata.METRIC_FROBENIUS,
    ) -> dict:
        """The layers of `run` the judgement (judgement/judge.py) flags for `patience`: the default
        judgement, and with an explicit band (`low` and/or `high`; the missing edge the
        default band's) the band rule too; layers with a NaN first, then by the step they
        were flagged since. `low`/`high` in the answer: the band judged against, both None
        for the default judgement. The layers are kept per request while the run's data is
        current."""
        band = judge.band_of(low, high)
        (ratios,) = self._ratio_listings(ctx, experiment, [run], metric)
        matrix = self._data.matrix(ctx, experiment, run, ratios)
        listing = self._data.listing(ctx, experiment, run, metric)
        query = (experiment, run, band, patience, metric)
        # the data judged: the matrix's, the listing's (the kinds) and the reference's
        signature = (ratios.signature, listing.signature) + (
            () if metric == metadata.METRIC_FROBENIUS
            else (self._data.listing(ctx, experiment, run).signature,)
        )
        layers = self._flags.get(query, signature)
        if layers is None:
            kinds = run_listing.layer_kinds(listing, matrix.tags)
            reference = self._data.frobenius_reference(ctx, experiment, run, metric)
            moving = None if reference is None else judge.others_moving(matrix, reference)
            layers = json_util.Cleanse(
                judge.flag_layers(matrix, *(band or (None, None)), patience, kinds, moving)
            )
            self._flags.put(query, signature, layers)
        return {
            "run": run,
            "metric": metric,
            "low": band[0] if band else None,
            "high": band[1] if band else None,
            "patience": patience,
            "layers": copy.deepcopy(layers),
        }

    def series_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tag: str,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> dict:
        """Every kept point of one wur scalar series (a layer's `metric` ratios, whatever
        their layout, the learning rate or the skipped-step marker), by step; points of one
        step in the order written."""
        scalars, _, listings = self._data.listings(ctx, experiment, [run], metric)
        listing = listings.get(run) or run_listing.RunListing({}, None, metric=metric)
        series = scalars.get(run, {}).get(tag)
        if tag in listing.layers:
            kind, description = metadata.KIND_RATIO, listing.description(tag)
            columns = self._data.layer_columns(ctx, experiment, run, listing, [tag]).get(tag)
        elif tag == metadata.SKIPPED_STEP_TAG and (listing.marker or listing.packed):
            kind, description = metadata.KIND_SKIPPED_STEP, metadata.SKIPPED_STEP_DESCRIPTION
            columns = self._data.marker_columns(ctx, experiment, run, listing)
        elif series is not None and run_listing.kind(series) is not None:
            kind, description = run_listing.kind(series), series.description
            columns = self._data.read_scalar_columns(ctx, experiment, run, [tag]).get(tag)
        else:
            raise errors.NotFoundError(f"no wur series {shown(tag)} in run {shown(run)}")
        if columns is None:  # listed, then gone: the run was deleted meanwhile
            raise errors.NotFoundError(f"no wur series {shown(tag)} in run {shown(run)}")
        steps, wall_times, values = columns
        order = np.argsort(steps, kind="stable")  # a step written twice: in the order written
        return {
            "run": run,
            "tag": tag,
            "kind": kind,
            "metric": metric,
            "description": description,
            "steps": steps[order].tolist(),
            "wall_times": wall_times[order].tolist(),
            "values": values[order].tolist(),
        }

    def histograms_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, tag: str
    ) -> dict:
        """Every kept histogram of the elementwise ratios of layer `tag`, by step."""
        histograms = self._data.layer_histograms(ctx, experiment, run, tag)
        if histograms is None:
            raise errors.NotFoundError(f"no histograms of layer {shown(tag)} in run {shown(run)}")
        steps, wall_times, counts = histograms
        return {
            "run": run,
            "tag": tag,
            "edges": metadata.HISTOGRAM_EDGES.tolist(),
            "buckets": {
                "zero": metadata.ZERO_BUCKET,
                "underflow": metadata.UNDERFLOW_BUCKET,
                "first_bin": metadata.FIRST_BIN,
                "overflow": metadata.OVERFLOW_BUCKET,
                "inf": metadata.INF_BUCKET,
                "nan": metadata.NAN_BUCKET,
            },
            "steps": steps.tolist(),
            "wall_times": wall_times.tolist(),
            "counts": counts.tolist(),
        }

    def line_search_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str
    ) -> dict:
        """The stochastic Armijo line search of `run`: step size and backtracks per searched
        step, steps ascending (see _align_line_search)."""
        names = run_listing.line_search_series(
            self._data.list_scalars(ctx, experiment, [run]).get(run, {})
        )
        if not _has_line_search(names):
            raise errors.NotFoundError(f"no line-search data in run {shown(run)}")
        wanted = [names.get(s) for s in _LINE_SEARCH_ROUTE_SERIES]
        data = self._data.read_scalars(ctx, experiment, run, [t for t in wanted if t])
        if not any(data.get(t) for t in wanted if t):  # listed, then gone
            raise errors.NotFoundError(f"no line-search data in run {shown(run)}")
        steps, (step_size, backtracks) = _align_line_search(
            [_by_step(data.get(t) or []) if t else [] for t in wanted]
        )
        return {
            "steps": steps,
            "step_size": step_size,
            "backtracks": [int(b) if math.isfinite(b) and b == int(b) else b for b in backtracks],
        }

    def compare_impl(
        self,
        ctx: tb_context.RequestContext,
        experiment: str,
        run_a: str,
        run_b: str,
        columns: int,
        start: int | None,
        end: int | None,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> bytes:
        """ratio_A / ratio_B of the `metric` ratios over the common layers and steps of two
        runs (compare.py), as a heatmap_wire payload with the layers' divergence ranking in
        its header."""
        a, b = self._matrices(ctx, experiment, [run_a, run_b], metric)
        q = compare.quotient(a, b)
        if not q.tags or not len(q.steps):
            raise errors.NotFoundError(
                f"runs {shown(run_a)} and {shown(run_b)} share no layer logged at a common step"
            )
        start = int(q.steps[0]) if start is None else start
        end = int(q.steps[-1]) if end is None else end
        if start > end:
            raise errors.InvalidArgumentError(f"start ({start}) must not be after end ({end})")
        cols = heatmap.make_columns(q.steps, start, end, columns)
        values, missing = heatmap.reduce_columns(q, cols, "mean_log10")
        arrays = {
            "column_start": cols.start.astype(np.float64),
            "column_first": cols.first,
            "column_last": cols.last,
            "column_count": cols.count,
            "codes": heatmap_wire.encode_cells(values, missing),
        }
        header = {
            "run_a": run_a,
            "run_b": run_b,
            "start": start,
            "end": end,
            "metric": metric,
            "columns": len(cols.start),
            "codes": heatmap_wire.CODES,
            "tags": list(q.tags),
            "ranking": json_util.Cleanse(compare.ranking(a, b)),
        }
        return heatmap_wire.pack(header, arrays)

    def suggestions_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, target: float,
        last: int, metric: str = metadata.METRIC_FROBENIUS,
    ) -> dict:
        """Per layer of `run` in model order, the learning rate that would bring its
        `metric` ratio to `target` (suggest.py), over its last `last` logged steps."""
        (matrix,) = self._matrices(ctx, experiment, [run], metric)
        learning_rate = self._data.learning_rate(ctx, experiment, run)
        return {
            "run": run,
            "target": target,
            "last": last,
            "metric": metric,
            "formula": suggest.FORMULA,
            "assumes": suggest.ASSUMES,
            "caveat": suggest.CAVEAT,
            "has_learning_rate": learning_rate is not None,
            "layers": suggest.suggested_learning_rates(matrix, learning_rate, target, last),
        }

    def export_impl(
        self, ctx: tb_context.RequestContext, experiment: str, run: str, export_format: str,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> Iterator[str]:
        """Every kept step of every ratio tag of `run`'s `metric` ratios in model order (by
        the position `watch` gave them, then by tag), as CSV or JSON text chunks (see
        export.stream)."""
        listing = run_listing.with_ratios(
            self._data.listing(ctx, experiment, run, metric), run, metric
        )
        layers = listing.layers
        tags = sorted(layers, key=lambda t: (layers[t][0], t))
        memo: dict = {}  # the export's packed series, read once each
        return export.stream(
            run,
            tags,
            lambda batch: self._data.layer_columns(ctx, experiment, run, listing, batch, memo),
            export_format,
        )

    def _matrices(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str],
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> list[heatmap.RunMatrix]:
        """The matrices of `runs`' `metric` ratios, in that order.

        Raises:
            errors.NotFoundError: a run lists no ratio series of `metric`.
        """
        return [
            self._data.matrix(ctx, experiment, run, listing)
            for run, listing in zip(runs, self._ratio_listings(ctx, experiment, runs, metric))
        ]

    def _ratio_listings(
        self, ctx: tb_context.RequestContext, experiment: str, runs: list[str], metric: str,
    ) -> list[run_listing.RunListing]:
        """The listings of `runs`' `metric` ratios, in that order.

        Raises:
            errors.NotFoundError: a run lists no ratio series of `metric`.
        """
        _, _, listings = self._data.listings(ctx, experiment, runs, metric)
        empty = run_listing.RunListing({}, None, metric=metric)
        return [run_listing.with_ratios(listings.get(run, empty), run, metric) for run in runs]


def _damaged(run_damage: damage.RunDamage | None) -> list[dict] | None:
    """A run's unreadable stretches as /runs answers them (http_api.md)."""
    return None if run_damage is None else [s.as_json() for s in run_damage.stretches]


def _by_step(points: list) -> list:
    """`points` sorted by step; points of the same step stay in the order they were written."""
    return sorted(points, key=lambda p: p.step)


def _has_line_search(names: dict[str, str]) -> bool:
    """Whether a run listing these line-search series (run_listing.line_search_series) has data
    for /line_search."""
    return any(s in names for s in _LINE_SEARCH_ROUTE_SERIES)


def _align_line_search(series: list[list]) -> tuple[list[int], list[list[float]]]:
    """(steps, [values of each series]) of series of points sorted by step.

    The series of a step are written as one event, so they normally hold the same steps in
    the same order (a step written twice twice, in the order written, as /series gives it):
    then they are zipped. Otherwise (one series sampled differently, or missing) each
    distinct step appears once with the value written last at it, NaN where a series has
    none.
    """
    step_lists = [[p.step for p in points] for points in series]
    if all(steps == step_lists[0] for steps in step_lists):
        return step_lists[0], [[float(p.value) for p in points] for points in series]
    steps = sorted({s for steps in step_lists for s in steps})
    columns = []
    for points in series:
        last = {p.step: float(p.value) for p in points}  # sorted stably: the last one wins
        columns.append([last.get(s, math.nan) for s in steps])
    return steps, columns


def _steps_of(matrices: list[heatmap.RunMatrix]) -> np.ndarray:
    """The union of the matrices' steps, sorted (one matrix's steps are already)."""
    if len(matrices) == 1:
        return matrices[0].steps
    return np.unique(np.concatenate([m.steps for m in matrices]))

"""The TensorBoard plugin backend: loads the WUR tab and serves its data.

Routes (documented in http_api.md) parse the request, call an `*_impl` method that works
over TensorBoard's data provider, and answer with `http_util.Respond`. Bad requests raise
`tensorboard.errors` (400 or 404 with a one-line reason).
"""

from __future__ import annotations

import collections
import csv
import functools
import importlib.resources
import io
import itertools
import json
import logging
import math
import re
import threading
from typing import Any, Iterator

import numpy as np
from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_wur_plugin import heatmap, metadata

logger = logging.getLogger(__name__)

# Steps per tag kept by both loaders unless the user passes --samples_per_plugin=wur=N.
DEFAULT_SAMPLES_PER_TAG = 10_000
# Read requests ask for this many points when the user keeps all of them (=0).
_ALL_POINTS = 2**31 - 1
DEFAULT_COLUMNS = 1000
MAX_COLUMNS = 20_000
DEFAULT_BAND = (1e-4, 1e-2)
# Step bounds a request may name (steps are int64; this leaves room for range arithmetic).
MAX_STEP = 2**62
# Decoded runs kept in memory between requests.
CACHE_BYTES = 1 << 30


def _one_call_per_run(matrix_method):
    """`WURPlugin._matrix`, one call at a time per run: of many requests that find a run's
    matrix missing from the cache, one reads and computes it and the others then find it
    cached, instead of each reading the whole run again (benchmarks/concurrency.py: 50
    clients at once on a cold run of 200 layers x 2,000 steps, p50 2.6 s instead of 34 s)."""

    @functools.wraps(matrix_method)
    def wrapper(self, ctx, experiment, run, *args, **kwargs):
        with self._matrices.key_lock((experiment, run)):
            return matrix_method(self, ctx, experiment, run, *args, **kwargs)

    return wrapper


class WURPlugin(base_plugin.TBPlugin):
    """The WUR tab. Enabled when the data provider lists wur summaries."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._provider = context.data_provider
        samples = (context.sampling_hints or {}).get(self.plugin_name, DEFAULT_SAMPLES_PER_TAG)
        self._downsample = samples if samples > 0 else _ALL_POINTS
        self._matrices = _MatrixCache(CACHE_BYTES)

    def get_plugin_apps(self):
        routes = {
            "/index.js": self._serve_index_js,
            "/runs": self._serve_runs,
            "/heatmap": self._serve_heatmap,
            "/flags": self._serve_flags,
            "/series": self._serve_series,
            "/histograms": self._serve_histograms,
            "/export": self._serve_export,
        }
        return {route: _read_only(app) for route, app in routes.items()}

    def is_active(self) -> bool:
        return False  # the data provider's plugin listing enables the tab

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="WUR")

    # --- routes -------------------------------------------------------------------------

    @wrappers.Request.application
    def _serve_index_js(self, request):
        body = importlib.resources.files("tb_wur_plugin").joinpath("static/index.js").read_bytes()
        return http_util.Respond(request, body, "text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request):
        ctx, experiment = _context(request)
        return http_util.Respond(request, self.runs_impl(ctx, experiment), "application/json")

    @wrappers.Request.application
    def _serve_heatmap(self, request):
        ctx, experiment = _context(request)
        runs = request.args.getlist("run")
        if not runs:
            raise errors.InvalidArgumentError("missing parameter: run (give it once per run)")
        body = self.heatmap_impl(
            ctx,
            experiment,
            runs,
            columns=_int_arg(request, "columns", DEFAULT_COLUMNS, 1, MAX_COLUMNS),
            start=_int_arg(request, "start", None, -MAX_STEP, MAX_STEP),
            end=_int_arg(request, "end", None, -MAX_STEP, MAX_STEP),
            reduction=_choice_arg(request, "reduction", "mean_log10", heatmap.REDUCTIONS),
        )
        return http_util.Respond(
            request, body, "application/octet-stream", content_encoding="gzip"
        )

    @wrappers.Request.application
    def _serve_flags(self, request):
        ctx, experiment = _context(request)
        low = _ratio_arg(request, "low", DEFAULT_BAND[0])
        high = _ratio_arg(request, "high", DEFAULT_BAND[1])
        if not low < high:
            raise errors.InvalidArgumentError(f"low ({low}) must be below high ({high})")
        body = self.flags_impl(ctx, experiment, _str_arg(request, "run"), low, high)
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_series(self, request):
        ctx, experiment = _context(request)
        body = self.series_impl(
            ctx, experiment, _str_arg(request, "run"), _str_arg(request, "tag")
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_histograms(self, request):
        ctx, experiment = _context(request)
        body = self.histograms_impl(
            ctx, experiment, _str_arg(request, "run"), _str_arg(request, "tag")
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_export(self, request):
        ctx, experiment = _context(request)
        run = _str_arg(request, "run")
        export_format = _choice_arg(request, "format", None, ("csv", "json"))
        chunks = self.export_impl(ctx, experiment, run, export_format)
        filename = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._") or "run"
        mimetype = "text/csv" if export_format == "csv" else "application/json"
        return wrappers.Response(
            (chunk.encode("utf-8") for chunk in chunks),
            mimetype=mimetype,
            headers=[
                ("X-Content-Type-Options", "nosniff"),
                ("Cache-Control", "no-cache, must-revalidate"),
                ("Content-Disposition", f'attachment; filename="wur-{filename}.{export_format}"'),
            ],
        )

    # --- implementations over the data provider -----------------------------------------

    def runs_impl(self, ctx, experiment: str) -> dict:
        """Every run with wur data: its layers in model order, and which series it has."""
        scalars = self._list_scalars(ctx, experiment)
        tensors = self._list_tensors(ctx, experiment)
        runs = []
        for run in sorted(set(scalars) | set(tensors)):
            series = scalars.get(run, {})
            ratio_series = _of_kind(series, metadata.KIND_RATIO)
            histogram_layers = {
                metadata.layer_of_histogram_tag(tag)
                for tag in _of_kind(tensors.get(run, {}), metadata.KIND_HISTOGRAM)
            }
            matrix = self._matrix(ctx, experiment, run, ratio_series, _marker_of(series))
            layers = []
            for row, tag in enumerate(matrix.tags):
                logged = np.flatnonzero(matrix.present[row])
                layers.append(
                    {
                        "tag": tag,
                        "description": ratio_series[tag].description,
                        "first_step": int(matrix.steps[logged[0]]),
                        "last_step": int(matrix.steps[logged[-1]]),
                        "logged_steps": int(len(logged)),
                        "has_histograms": tag in histogram_layers,
                    }
                )
            runs.append(
                {
                    "run": run,
                    "layers": layers,
                    "first_step": int(matrix.steps[0]) if len(matrix.steps) else None,
                    "last_step": int(matrix.steps[-1]) if len(matrix.steps) else None,
                    "has_learning_rate": metadata.LEARNING_RATE_TAG in series,
                    "skipped_steps": int(matrix.skipped_mask.sum()),
                }
            )
        return {"runs": runs}

    def heatmap_impl(
        self,
        ctx,
        experiment: str,
        runs: list[str],
        columns: int,
        start: int | None,
        end: int | None,
        reduction: str,
    ) -> bytes:
        """The layers × columns heatmap of `runs` over [start, end], packed by heatmap.pack."""
        if len(set(runs)) != len(runs):
            raise errors.InvalidArgumentError("each run may be given only once")
        scalars = self._list_scalars(ctx, experiment, runs)
        matrices = [
            self._matrix(
                ctx, experiment, run, self._ratios_of(scalars, run), _marker_of(scalars.get(run, {}))
            )
            for run in runs
        ]
        steps = np.unique(np.concatenate([m.steps for m in matrices]))
        if not len(steps):
            raise errors.NotFoundError("no wur ratios in the requested runs")
        start = int(steps[0]) if start is None else start
        end = int(steps[-1]) if end is None else end
        if start > end:
            raise errors.InvalidArgumentError(f"start ({start}) must not be after end ({end})")
        cols = heatmap.make_columns(steps, start, end, columns)
        arrays: dict[str, np.ndarray] = {
            "column_start": cols.start.astype(np.float64),
            "column_first": cols.first,
            "column_last": cols.last,
            "column_count": cols.count,
        }
        described = []
        for index, (run, matrix) in enumerate(zip(runs, matrices)):
            values, missing = heatmap.reduce_columns(matrix, cols, reduction)
            arrays[f"codes_{index}"] = heatmap.encode_cells(values, missing)
            arrays[f"skipped_{index}"] = heatmap.skipped_per_column(matrix, cols)
            described.append(
                {
                    "run": run,
                    "tags": list(matrix.tags),
                    "codes": f"codes_{index}",
                    "skipped": f"skipped_{index}",
                }
            )
        header = {
            "start": start,
            "end": end,
            "reduction": reduction,
            "columns": len(cols.start),
            "codes": heatmap.CODES,
            "runs": described,
        }
        return heatmap.pack(header, arrays)

    def flags_impl(self, ctx, experiment: str, run: str, low: float, high: float) -> dict:
        """The layers of `run` whose ratio left [low, high], worst first."""
        scalars = self._list_scalars(ctx, experiment, [run])
        matrix = self._matrix(
            ctx, experiment, run, self._ratios_of(scalars, run), _marker_of(scalars.get(run, {}))
        )
        return {"run": run, "low": low, "high": high, "layers": heatmap.flag_layers(matrix, low, high)}

    def series_impl(self, ctx, experiment: str, run: str, tag: str) -> dict:
        """Every kept point of one wur scalar series (a ratio or the learning rate)."""
        scalars = self._list_scalars(ctx, experiment, [run])
        series = scalars.get(run, {}).get(tag)
        if series is None:
            raise errors.NotFoundError(f"no wur series {_shown(tag)} in run {_shown(run)}")
        points = self._read_scalars(ctx, experiment, run, [tag]).get(tag)
        if points is None:  # listed, then gone: the run was deleted meanwhile
            raise errors.NotFoundError(f"no wur series {_shown(tag)} in run {_shown(run)}")
        return {
            "run": run,
            "tag": tag,
            "kind": _kind(series),
            "description": series.description,
            "steps": [p.step for p in points],
            "wall_times": [p.wall_time for p in points],
            "values": [p.value for p in points],
        }

    def histograms_impl(self, ctx, experiment: str, run: str, tag: str) -> dict:
        """Every kept histogram of the elementwise ratios of layer `tag`."""
        histogram_tag = metadata.histogram_tag(tag)
        tensors = self._list_tensors(ctx, experiment, [run])
        series = tensors.get(run, {}).get(histogram_tag)
        if series is None or _kind(series) != metadata.KIND_HISTOGRAM:
            raise errors.NotFoundError(f"no histograms of layer {_shown(tag)} in run {_shown(run)}")
        data = self._provider.read_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=[histogram_tag]),
        )
        points = data.get(run, {}).get(histogram_tag)
        if points is None:  # listed, then gone: the run was deleted meanwhile
            raise errors.NotFoundError(f"no histograms of layer {_shown(tag)} in run {_shown(run)}")
        points = sorted(points, key=lambda p: p.step)
        counts = [p.numpy.astype(np.int64).tolist() for p in points]
        if any(len(c) != metadata.NUM_BUCKETS for c in counts):
            raise errors.NotFoundError(f"histograms of {_shown(tag)} in run {_shown(run)} are malformed")
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
            "steps": [p.step for p in points],
            "wall_times": [p.wall_time for p in points],
            "counts": counts,
        }

    def export_impl(self, ctx, experiment: str, run: str, export_format: str) -> Iterator[str]:
        """Every kept step of every ratio tag of `run`, as CSV or JSON text chunks.

        The run is checked, and its first tag read, before the first chunk; then the tags
        are read one at a time, so no more than one tag's points are held at once. A tag that
        is gone when its turn comes (the run was deleted meanwhile) aborts the stream with an
        error: the client sees a failed transfer, never a silently incomplete export.
        """
        scalars = self._list_scalars(ctx, experiment, [run])
        ratio_series = self._ratios_of(scalars, run)
        tags = sorted(ratio_series, key=lambda t: (_index(ratio_series[t]), t))

        def points_by_tag():
            for tag in tags:
                points = self._read_scalars(ctx, experiment, run, [tag]).get(tag)
                if points is None:
                    raise errors.NotFoundError(
                        f"run {_shown(run)} was removed during its export; export aborted"
                    )
                yield tag, sorted(points, key=lambda p: p.step)

        pairs = points_by_tag()
        pairs = itertools.chain([next(pairs)], pairs)  # a run gone by now: a clean 404
        if export_format == "csv":
            return _csv_chunks(pairs)
        return _json_chunks(pairs)

    # --- data access --------------------------------------------------------------------

    def _list_scalars(self, ctx, experiment, runs=None) -> dict[str, dict[str, Any]]:
        return self._provider.list_scalars(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=provider.RunTagFilter(runs=runs) if runs else None,
        )

    def _list_tensors(self, ctx, experiment, runs=None) -> dict[str, dict[str, Any]]:
        return self._provider.list_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            run_tag_filter=provider.RunTagFilter(runs=runs) if runs else None,
        )

    def _read_scalars(self, ctx, experiment, run, tags) -> dict[str, list]:
        data = self._provider.read_scalars(
            ctx,
            experiment_id=experiment,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=self._downsample,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags),
        )
        return data.get(run, {})

    @staticmethod
    def _ratios_of(scalars, run: str) -> dict[str, Any]:
        ratio_series = _of_kind(scalars.get(run, {}), metadata.KIND_RATIO)
        if not ratio_series:
            raise errors.NotFoundError(f"no wur ratios in run {_shown(run)}")
        return ratio_series

    @_one_call_per_run
    def _matrix(self, ctx, experiment, run, ratio_series, marker=None) -> heatmap.RunMatrix:
        """The run's ratios as a matrix in model order, with the steps its skipped-step
        `marker` series (None: the run has none) marks; cached until the run's data changes.

        The marker is read with the ratios, so the same steps survive sampling."""
        signature = tuple(
            sorted((tag, s.max_step, s.max_wall_time) for tag, s in ratio_series.items())
        ) + ((marker.max_step, marker.max_wall_time) if marker is not None else (None,))
        key = (experiment, run)
        cached = self._matrices.get(key, signature)
        if cached is not None:
            return cached
        tags = list(ratio_series) + ([metadata.SKIPPED_STEP_TAG] if marker is not None else [])
        data = self._read_scalars(ctx, experiment, run, tags) if ratio_series else {}
        series, first_wall_time, skipped_steps = [], {}, ()
        for tag, points in data.items():
            if points and tag in ratio_series:
                first_wall_time[tag] = min(points, key=lambda p: (p.step, p.wall_time)).wall_time
            steps = np.fromiter((p.step for p in points), np.int64, len(points))
            values = np.fromiter((p.value for p in points), np.float64, len(points))
            # the last point written for a step wins; steps ascending
            order = np.argsort(steps, kind="stable")[::-1]
            steps, first = np.unique(steps[order], return_index=True)
            values = values[order][first]
            if tag not in ratio_series:
                skipped_steps = steps[values >= 0.5]  # the marker: 1 skipped, 0 applied
            elif len(steps):
                series.append((tag, steps, values))
        # model order: first step, then the index watch wrote, then the first write's time
        series.sort(
            key=lambda s: (s[1][0], _index(ratio_series[s[0]]), first_wall_time[s[0]], s[0])
        )
        matrix = heatmap.RunMatrix.from_series(series, skipped_steps)
        self._matrices.put(key, signature, matrix)
        return matrix


class WURLoader(base_plugin.TBLoader):
    """Loads `WURPlugin`, keeping up to DEFAULT_SAMPLES_PER_TAG steps per tag by default."""

    def fix_flags(self, flags):
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES_PER_TAG)

    def load(self, context):
        return WURPlugin(context)


class _MatrixCache:
    """Run matrices by (experiment, run), each valid for one data signature; least recently
    used ones are dropped beyond `max_bytes`."""

    def __init__(self, max_bytes: int):
        self._max_bytes = max_bytes
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict = collections.defaultdict(threading.Lock)

    def key_lock(self, key) -> threading.Lock:
        """A lock of its own for `key` (one per run seen: a few hundred bytes each)."""
        with self._lock:
            return self._key_locks[key]

    def get(self, key, signature) -> heatmap.RunMatrix | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != signature:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key, signature, matrix: heatmap.RunMatrix) -> None:
        with self._lock:
            self._entries[key] = (signature, matrix)
            self._entries.move_to_end(key)
            total = sum(m.nbytes for _, m in self._entries.values())
            while total > self._max_bytes and len(self._entries) > 1:
                _, (_, dropped) = self._entries.popitem(last=False)
                total -= dropped.nbytes


# --- helpers ------------------------------------------------------------------------------


class _MethodNotAllowedError(errors.PublicError):
    http_code = 405

    def __init__(self, method: str):
        super().__init__(f"Method not allowed: {_shown(method, 40)}; the wur routes answer GET and HEAD")
        self.headers.append(("Allow", "GET, HEAD"))


def _read_only(app):
    """`app`, answering 405 to any method but GET and HEAD."""

    @functools.wraps(app)
    def wrapper(environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            raise _MethodNotAllowedError(method)
        return app(environ, start_response)

    return wrapper


def _context(request):
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


def _content(series) -> dict | None:
    return _parse_content(series.plugin_content)


@functools.lru_cache(maxsize=4096)
def _parse_content(content: bytes) -> dict | None:
    """Parsed once per distinct content: every request classifies and orders every series."""
    try:
        return metadata.parse_plugin_content(content)
    except ValueError as e:
        logger.warning("skipping a wur series: %s", e)
        return None


def _kind(series) -> str | None:
    content = _content(series)
    return content["kind"] if content else None


def _index(series) -> float:
    content = _content(series)
    index = content.get("index") if content else None
    return math.inf if index is None else index


def _of_kind(series_by_tag: dict[str, Any], kind: str) -> dict[str, Any]:
    return {tag: s for tag, s in series_by_tag.items() if _kind(s) == kind}


def _marker_of(series_by_tag: dict[str, Any]):
    """The run's skipped-step marker series, or None."""
    series = series_by_tag.get(metadata.SKIPPED_STEP_TAG)
    return series if series is not None and _kind(series) == metadata.KIND_SKIPPED_STEP else None


def _shown(name: str, limit: int = 100) -> str:
    """`name` for an error message: quoted and escaped (one line), at most `limit` characters."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _str_arg(request, name: str) -> str:
    values = request.args.getlist(name)
    if not values:
        raise errors.InvalidArgumentError(f"missing parameter: {name}")
    if len(values) > 1:
        raise errors.InvalidArgumentError(f"parameter {name} given {len(values)} times")
    return values[0]


def _int_arg(request, name: str, default, low=-(2**63), high=2**63 - 1):
    if name not in request.args:
        return default
    text = _str_arg(request, name)
    try:
        value = int(text)
    except ValueError:
        raise errors.InvalidArgumentError(f"parameter {name} must be an integer, got {text!r:.40}") from None
    if not low <= value <= high:
        raise errors.InvalidArgumentError(
            f"parameter {name} must be in [{low}, {high}], got {_shown(text, 40)}"
        )
    return value


def _ratio_arg(request, name: str, default: float) -> float:
    if name not in request.args:
        return default
    text = _str_arg(request, name)
    try:
        value = float(text)
    except ValueError:
        raise errors.InvalidArgumentError(f"parameter {name} must be a number, got {text!r:.40}") from None
    if not (value > 0 and math.isfinite(value)):
        raise errors.InvalidArgumentError(f"parameter {name} must be a positive finite number")
    return value


def _choice_arg(request, name: str, default, choices):
    if name not in request.args and default is not None:
        return default
    value = _str_arg(request, name)
    if value not in choices:
        raise errors.InvalidArgumentError(
            f"parameter {name} must be one of {', '.join(choices)}, got {value!r:.40}"
        )
    return value


def _csv_chunks(points_by_tag) -> Iterator[str]:
    yield "tag,step,wall_time,ratio\r\n"
    for tag, points in points_by_tag:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        for p in points:
            writer.writerow((tag, p.step, repr(p.wall_time), repr(float(p.value))))
        yield buffer.getvalue()


def _json_number(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(float(value))


def _json_chunks(points_by_tag) -> Iterator[str]:
    yield "{"
    for position, (tag, points) in enumerate(points_by_tag):
        rows = ",".join(f"[{p.wall_time!r},{p.step},{_json_number(p.value)}]" for p in points)
        yield f"{',' if position else ''}{json.dumps(tag)}:[{rows}]"
    yield "}"

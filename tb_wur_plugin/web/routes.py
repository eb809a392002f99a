"""The plugin's routes (http_api.md), in the style of TensorBoard's own plugins: each parses its
request (http_args), calls one `*_impl` of `answers.Answers` and sends the answer with
`http_util.Respond` (`/export`: a streamed response). Every route answers GET and HEAD only.
"""

from __future__ import annotations

import importlib.resources

from tensorboard import errors
from tensorboard.backend import http_util
from werkzeug import wrappers

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement import judge, reasons
from tb_wur_plugin.read import export, heatmap, suggest
from tb_wur_plugin.web.answers import Answers
from tb_wur_plugin.web.http_args import (
    choice_arg,
    int_arg,
    ratio_arg,
    read_only,
    request_context,
    str_arg,
)

DEFAULT_COLUMNS = 1000
MAX_COLUMNS = 20_000
MAX_PATIENCE = 2**31 - 1
# Step bounds a request may name (steps are int64; this leaves room for range arithmetic).
MAX_STEP = 2**62


class Routes:
    """The WSGI apps of the plugin's routes, answering from `answers`."""

    def __init__(self, answers: Answers):
        self._answers = answers

    def apps(self) -> dict:
        """{route: its WSGI app}, as `TBPlugin.get_plugin_apps` returns them."""
        routes = {
            "/index.js": self._serve_index_js,
            "/runs": self._serve_runs,
            "/heatmap": self._serve_heatmap,
            "/flags": self._serve_flags,
            "/reasons": self._serve_reasons,
            "/series": self._serve_series,
            "/histograms": self._serve_histograms,
            "/export": self._serve_export,
            "/line_search": self._serve_line_search,
            "/compare": self._serve_compare,
            "/suggestions": self._serve_suggestions,
        }
        return {route: read_only(app) for route, app in routes.items()}

    @wrappers.Request.application
    def _serve_index_js(self, request):
        body = importlib.resources.files("tb_wur_plugin").joinpath("static/index.js").read_bytes()
        return http_util.Respond(request, body, "text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request):
        ctx, experiment = request_context(request)
        body = self._answers.runs_impl(ctx, experiment)
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_heatmap(self, request):
        ctx, experiment = request_context(request)
        runs = request.args.getlist("run")
        if not runs:
            raise errors.InvalidArgumentError("missing parameter: run (give it once per run)")
        body = self._answers.heatmap_impl(
            ctx,
            experiment,
            runs,
            columns=int_arg(request, "columns", DEFAULT_COLUMNS, 1, MAX_COLUMNS),
            start=int_arg(request, "start", None, -MAX_STEP, MAX_STEP),
            end=int_arg(request, "end", None, -MAX_STEP, MAX_STEP),
            reduction=choice_arg(request, "reduction", "mean_log10", heatmap.REDUCTIONS),
            metric=_metric_arg(request),
        )
        return http_util.Respond(
            request, body, "application/octet-stream", content_encoding="gzip"
        )

    @wrappers.Request.application
    def _serve_flags(self, request):
        ctx, experiment = request_context(request)
        low = ratio_arg(request, "low", None)  # neither: the default judgement
        high = ratio_arg(request, "high", None)
        try:
            judge.band_of(low, high)
        except ValueError as e:
            raise errors.InvalidArgumentError(str(e)) from None
        patience = int_arg(request, "patience", judge.DEFAULT_PATIENCE, 1, MAX_PATIENCE)
        body = self._answers.flags_impl(
            ctx, experiment, str_arg(request, "run"), low, high, patience, _metric_arg(request)
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_reasons(self, request):
        return http_util.Respond(request, {"reasons": reasons.describe()}, "application/json")

    @wrappers.Request.application
    def _serve_series(self, request):
        ctx, experiment = request_context(request)
        body = self._answers.series_impl(
            ctx, experiment, str_arg(request, "run"), str_arg(request, "tag"), _metric_arg(request)
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_histograms(self, request):
        ctx, experiment = request_context(request)
        body = self._answers.histograms_impl(
            ctx, experiment, str_arg(request, "run"), str_arg(request, "tag")
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_line_search(self, request):
        ctx, experiment = request_context(request)
        body = self._answers.line_search_impl(ctx, experiment, str_arg(request, "run"))
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_compare(self, request):
        ctx, experiment = request_context(request)
        body = self._answers.compare_impl(
            ctx,
            experiment,
            str_arg(request, "run_a"),
            str_arg(request, "run_b"),
            columns=int_arg(request, "columns", DEFAULT_COLUMNS, 1, MAX_COLUMNS),
            start=int_arg(request, "start", None, -MAX_STEP, MAX_STEP),
            end=int_arg(request, "end", None, -MAX_STEP, MAX_STEP),
            metric=_metric_arg(request),
        )
        return http_util.Respond(
            request, body, "application/octet-stream", content_encoding="gzip"
        )

    @wrappers.Request.application
    def _serve_suggestions(self, request):
        ctx, experiment = request_context(request)
        target = ratio_arg(request, "target", suggest.DEFAULT_TARGET)
        last = int_arg(request, "last", suggest.DEFAULT_LAST, 1, MAX_PATIENCE)
        body = self._answers.suggestions_impl(
            ctx, experiment, str_arg(request, "run"), target, last, _metric_arg(request)
        )
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _serve_export(self, request):
        ctx, experiment = request_context(request)
        run = str_arg(request, "run")
        export_format = choice_arg(request, "format", None, export.FORMATS)
        metric = _metric_arg(request)
        chunks = self._answers.export_impl(ctx, experiment, run, export_format, metric)
        mimetype = "text/csv" if export_format == "csv" else "application/json"
        return wrappers.Response(
            (chunk.encode("utf-8") for chunk in chunks),
            mimetype=mimetype,
            headers=[
                ("X-Content-Type-Options", "nosniff"),
                ("Cache-Control", "no-cache, must-revalidate"),
                (
                    "Content-Disposition",
                    f'attachment; filename="{export.filename(run, export_format)}"',
                ),
            ],
        )


def _metric_arg(request: wrappers.Request) -> str:
    """The query parameter `metric`: one of metadata.METRICS, default frobenius (400 for
    anything else)."""
    return choice_arg(request, "metric", metadata.METRIC_FROBENIUS, metadata.METRICS)

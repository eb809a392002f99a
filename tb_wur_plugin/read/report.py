"""The headless report (`tb-wur report`): a logdir read with TensorBoard's own loading code
through the data provider interface the plugin uses (run_data.RunData: the same reading,
model order and skipped steps), judged by the plugin's judgement (judgement/judge.py), with
suggested learning rates (suggest.py) and a run comparison (compare.py).

Loading: by default TensorBoard's fast loader (its Rust data server, as
`tensorboard --load_fast=true` runs it, loading the logdir once); `load_fast=False`, or no
data server binary installed: the Python loader (`EventMultiplexer` +
`MultiplexerDataProvider`, as `--load_fast=false`). Both keep `samples` steps per tag
(default `settings.DEFAULT_SAMPLES_PER_TAG`; 0: all).

Damaged event files (damage.py): a local logdir's event files are checked as the plugin
checks them; each run's report says which are damaged (`damaged`: its unreadable stretches),
and the readable records after a stretch are read (run_data).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import subprocess
import tempfile
import threading
from typing import Iterator

import numpy as np
from tensorboard import context as tb_context

from tb_wur_plugin.judgement import judge
from tb_wur_plugin.judgement.thresholds import DEFAULT_BAND, DEFAULT_PATIENCE
from tb_wur_plugin.read import compare, damage, heatmap, run_data, run_listing, suggest
from tb_wur_plugin import metadata
from tb_wur_plugin.read.settings import ALL_POINTS, DEFAULT_SAMPLES_PER_TAG

_EXPERIMENT = ""


class ReportError(Exception):
    """A report that cannot be made (exit status 2): the message says why, in one line;
    `damage_lines`: the damaged event files of the runs asked for (`damage_lines`), which
    may be why."""

    def __init__(self, message: str, damage_lines: list[str] | None = None):
        super().__init__(message)
        self.damage_lines = damage_lines or []


@dataclasses.dataclass(frozen=True)
class Settings:
    """low, high: the explicit band's edges; both None (default): the default judgement;
    one None: that edge from thresholds.DEFAULT_BAND (judge.band_of)."""

    low: float | None = None
    high: float | None = None
    patience: int = DEFAULT_PATIENCE
    target: float = suggest.DEFAULT_TARGET
    last: int = suggest.DEFAULT_LAST


# TensorBoard's name of the run whose event files lie in the logdir itself
_LOGDIR_RUN = "."


class Logdir:
    """A logdir's wur data, read through a TensorBoard data provider: the ratios of `metric`
    (one of metadata.METRICS), with the records after damaged stretches of its event files
    when `damage_scanner` scans them (None: not scanned).

    Runs are named as TensorBoard names them (their directory relative to the logdir), except
    the logdir's own run (TensorBoard's "."): it is named `root_name` (the logdir's directory
    name, `logdir_name`), unless that is None or another run's name. Every method takes and
    gives these names."""

    def __init__(
        self, provider, samples: int, metric: str = metadata.METRIC_FROBENIUS,
        damage_scanner: damage.DamageScanner | None = None, root_name: str | None = None,
    ):
        self._ctx = tb_context.RequestContext()
        self.metric = metric
        self.data = run_data.RunData(
            provider, downsample=samples if samples > 0 else ALL_POINTS, matrix_bytes=0,
            index_bytes=0, damage_scanner=damage_scanner,
        )
        _, _, listings = self.data.listings(self._ctx, _EXPERIMENT, metric=metric)
        taken = set(listings) | set(self.data.damages(_EXPERIMENT))
        self._root_name = root_name if root_name not in taken else None
        self._tb_names = {self.name_of(run): run for run in listings}
        self.listings = {self.name_of(run): listing for run, listing in listings.items()}

    def name_of(self, tb_run: str) -> str:
        """The name of the run TensorBoard names `tb_run` (class docstring)."""
        return self._root_name if tb_run == _LOGDIR_RUN and self._root_name else tb_run

    def _tb(self, run: str) -> str:
        return self._tb_names.get(run, run)

    def runs(self) -> list[str]:
        """The runs holding ratio series (per-tag or packed), sorted by name."""
        return sorted(run for run, listing in self.listings.items() if listing.has_ratios())

    def damaged(self, run: str) -> list[damage.Stretch] | None:
        """The unreadable stretches of `run`'s event files ([]: all whole); None when the
        logdir's files are not scanned (not a local directory)."""
        run_damage = self.data.damage(_EXPERIMENT, self._tb(run))
        return None if run_damage is None else list(run_damage.stretches)

    def damaged_without_ratios(self) -> dict[str, list[damage.Stretch]]:
        """The unreadable stretches of the damaged runs that hold no ratio series (none
        read: the damage may have taken them), by run, sorted by name."""
        with_ratios = set(self.runs())
        damaged = {
            self.name_of(run): found.stretches
            for run, found in self.data.damages(_EXPERIMENT).items()
        }
        return {
            run: list(stretches) for run, stretches in sorted(damaged.items())
            if stretches and run not in with_ratios
        }

    def matrix(self, run: str) -> heatmap.RunMatrix:
        return self.data.matrix(self._ctx, _EXPERIMENT, self._tb(run), self.listings[run])

    def layer_columns(self, run: str, tags: list[str]) -> dict:
        """The kept points of layers `tags` of `run` as columns (run_data.layer_columns)."""
        return self.data.layer_columns(
            self._ctx, _EXPERIMENT, self._tb(run), self.listings[run], tags, {}
        )

    def moving(self, run: str, matrix: heatmap.RunMatrix) -> np.ndarray | None:
        """`judge.others_moving` of `matrix` (the run's `metric` ratios) against the run's
        Frobenius ratios when `metric` is another one (None for Frobenius, or a run without
        Frobenius ratios)."""
        reference = self.data.frobenius_reference(
            self._ctx, _EXPERIMENT, self._tb(run), self.metric
        )
        return None if reference is None else judge.others_moving(matrix, reference)

    def layer_kinds(self, run: str, tags: tuple[str, ...]) -> list[str]:
        """The layer kind of each of `tags` (run_listing.layer_kinds)."""
        return run_listing.layer_kinds(self.listings[run], tags)

    def learning_rate(self, run: str) -> tuple[np.ndarray, np.ndarray] | None:
        return self.data.learning_rate(self._ctx, _EXPERIMENT, self._tb(run))


def logdir_name(logdir: str) -> str | None:
    """The name of `logdir`'s own directory: the last component of its absolute path (of the
    path after the scheme for a URL such as gs://bucket/logs); None for a root."""
    path = logdir.split("://", 1)[1] if "://" in logdir else os.path.abspath(
        os.path.expanduser(logdir))
    return os.path.basename(path.rstrip("/")) or None


@contextlib.contextmanager
def open_logdir(
    logdir: str, samples: int = DEFAULT_SAMPLES_PER_TAG, load_fast: bool | None = None,
    metric: str = metadata.METRIC_FROBENIUS,
) -> Iterator[Logdir]:
    """The logdir loaded once (module docstring), its ratios of `metric` (metadata.METRICS).
    `load_fast` None: the fast loader when its binary is installed.

    Raises:
        ReportError: the directory is missing ("no such directory: ...") or a file ("not a
            directory: ..."), the fast loader is asked for and not installed, or `metric`
            is not one of metadata.METRICS.
    """
    if metric not in metadata.METRICS:
        raise ReportError(f"metric must be one of {', '.join(metadata.METRICS)}, got {metric!r}")
    if "://" not in logdir and not os.path.isdir(logdir):
        what = "not a directory" if os.path.exists(logdir) else "no such directory"
        raise ReportError(f"{what}: {logdir}")
    scanner = damage.DamageScanner.for_logdir(logdir)
    root_name = logdir_name(logdir)
    if load_fast is not False:
        try:
            from tensorboard.data import server_ingester

            binary = server_ingester.get_server_binary()
        except Exception:  # no data server for this platform
            if load_fast:
                raise ReportError("TensorBoard's fast loader (its data server) is not installed")
            binary = None
        if binary is not None:
            with _data_server(binary.path, logdir, samples) as provider:
                yield Logdir(provider, samples, metric, scanner, root_name)
            return
    yield Logdir(_python_provider(logdir, samples), samples, metric, scanner, root_name)


def _python_provider(logdir: str, samples: int):
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={metadata.PLUGIN_NAME: samples}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, logdir)


@contextlib.contextmanager
def _data_server(binary: str, logdir: str, samples: int):
    """TensorBoard's data server loading `logdir` once, as `tensorboard --load_fast=true`
    starts it; yields its GrpcDataProvider once the load cycle has finished."""
    import grpc
    from tensorboard.data import grpc_provider
    from tensorboard.data.proto import data_provider_pb2_grpc

    with tempfile.TemporaryDirectory(prefix="tb_wur_report_") as tmp:
        port_file, error_file = os.path.join(tmp, "port"), os.path.join(tmp, "error")
        process = subprocess.Popen(
            [
                binary, f"--logdir={os.path.expanduser(logdir)}", "--reload=once",
                f"--samples-per-plugin={metadata.PLUGIN_NAME}={samples if samples > 0 else 'all'}",
                "--port=0", f"--port-file={port_file}", f"--error-file={error_file}",
                "--die-after-stdin", "--verbose", "--host=localhost",
            ],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )
        try:
            loaded = False
            for line in process.stderr:  # -v logs the start and the end of the load cycle
                if "Finished load cycle" in line:
                    loaded = True
                    break
            if not loaded:
                process.wait()
                reason = _read(error_file).strip() or f"exited with status {process.returncode}"
                raise ReportError(f"TensorBoard's data server could not load {logdir}: {reason}")
            threading.Thread(target=process.stderr.read, daemon=True).start()  # drain
            address = f"localhost:{int(_read(port_file))}"
            channel = grpc.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 1 << 30)]
            )
            stub = data_provider_pb2_grpc.TensorBoardDataProviderStub(channel)
            yield grpc_provider.GrpcDataProvider(address, stub)
            channel.close()
        finally:
            with contextlib.suppress(OSError):
                process.stdin.close()
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def run_report(logdir: Logdir, run: str, settings: Settings) -> dict:
    """One run's report: {"run", "low", "high", "patience", "layers": [{REPORT_FIELDS...,
    "reason", "text", "skipped_steps", COUNT_FIELDS..., "suggested_learning_rate"}],
    "damaged": [damage.Stretch, ...] or None}, layers in model order (low/high: the explicit
    band, None for the default judgement; damaged: `Logdir.damaged`)."""
    band = judge.band_of(settings.low, settings.high)
    matrix = logdir.matrix(run)
    judged = judge.judge_layers(
        matrix, settings.low, settings.high, settings.patience,
        logdir.layer_kinds(run, matrix.tags), logdir.moving(run, matrix),
    )
    suggestions = suggest.suggested_learning_rates(
        matrix, logdir.learning_rate(run), settings.target, settings.last
    )
    layers = []
    for layer, suggestion in zip(judged, suggestions):
        entry = {key: layer[key] for key in _LAYER_FIELDS}
        entry["suggested_learning_rate"] = suggestion["suggested_learning_rate"]
        layers.append(entry)
    return {
        "run": run,
        "low": band[0] if band else None,
        "high": band[1] if band else None,
        "patience": settings.patience,
        "layers": layers,
        "damaged": logdir.damaged(run),
    }


_LAYER_FIELDS = (*judge.REPORT_FIELDS, "reason", "text", *judge.COUNT_FIELDS)


def report(
    logdir: Logdir, run_pattern: str | None, settings: Settings,
    compare_runs: tuple[str, str] | None = None,
) -> dict:
    """The report of the runs whose name `re.search`es `run_pattern` (None: all), and, with
    `compare_runs`, their comparison. `damaged_runs_without_ratios`: {run: [damage.Stretch,
    ...]} of the runs the pattern selects that hold no ratios and have a damaged event file.

    Raises:
        ReportError: no run holds ratios, the pattern selects none, or a compared run holds
            no ratios.
    """
    try:
        judge.band_of(settings.low, settings.high)
    except ValueError as e:
        raise ReportError(str(e)) from None
    pattern = re.compile(run_pattern) if run_pattern is not None else None
    damaged_others = {
        run: stretches for run, stretches in logdir.damaged_without_ratios().items()
        if pattern is None or pattern.search(run)
    }
    other_lines = damage_lines({"runs": [], "damaged_runs_without_ratios": damaged_others})
    runs = logdir.runs()
    if not runs:
        raise ReportError(
            "the logdir holds no wur ratios" if logdir.metric == metadata.METRIC_FROBENIUS
            else f"the logdir holds no {logdir.metric} wur ratios",
            other_lines,
        )
    if pattern is not None:
        runs = [r for r in runs if pattern.search(r)]
        if not runs:
            raise ReportError(f"--run {run_pattern!r} selects no run", other_lines)
    answer: dict = {
        "runs": [run_report(logdir, run, settings) for run in runs],
        "damaged_runs_without_ratios": damaged_others,
    }
    if compare_runs is not None:
        known = set(logdir.runs())
        for name in compare_runs:
            if name not in known:
                raise ReportError(f"--compare: no run {name!r} with wur ratios")
        a, b = compare_runs
        answer["compare"] = {
            "run_a": a,
            "run_b": b,
            "layers": compare.ranking(logdir.matrix(a), logdir.matrix(b)),
        }
    return answer


def damage_lines(answer: dict) -> list[str]:
    """One line per damaged event file of the reported runs (then of the damaged runs
    without ratios): "RUN/FILE: N bytes unreadable from offset O (after step S)", a file
    damaged in several places with each further stretch after "; "."""
    damaged = [(r["run"], r["damaged"] or []) for r in answer["runs"]]
    damaged += list(answer["damaged_runs_without_ratios"].items())
    lines = []
    for run, run_stretches in damaged:
        by_file: dict[str, list[damage.Stretch]] = {}
        for stretch in run_stretches:
            by_file.setdefault(stretch.file, []).append(stretch)
        for file, stretches in by_file.items():
            lines.append(f"{run}/{file}: " + "; ".join(s.describe() for s in stretches))
    return lines


def unchecked(answer: dict) -> bool:
    """Whether the reported runs' event files were not checked for damage (not a local
    logdir)."""
    return any(r["damaged"] is None for r in answer["runs"])


def flagged_first(layers: list[dict]) -> list[dict]:
    """The flagged layers in the order of the tab's flags (judge.flag_order), then the
    others in model order."""
    flagged = sorted((l for l in layers if l["flagged"]), key=judge.flag_order)
    return flagged + [l for l in layers if not l["flagged"]]


# --- output --------------------------------------------------------------------------------

_JSON_LAYER_FIELDS = (*_LAYER_FIELDS, "suggested_learning_rate")


def to_json(answer: dict) -> dict:
    """The report's JSON (docs/report.md): the contract's shape, layers in model order, plus
    each layer's text, counts and suggested_learning_rate, and per run the band judged
    against (null: the default judgement), the suggestions' assumption and caveat, its damaged
    event files (`damaged`: one entry per unreadable stretch, `damage.Stretch.as_json`; null
    when not checked), and the damaged runs without ratios; non-finite numbers as "NaN",
    "Infinity", "-Infinity"."""
    out: dict = {
        "runs": [
            {
                "run": r["run"], "low": r["low"], "high": r["high"], "patience": r["patience"],
                "suggestions_assume": suggest.ASSUMES, "suggestions_caveat": suggest.CAVEAT,
                "layers": [{k: l[k] for k in _JSON_LAYER_FIELDS} for l in r["layers"]],
                "damaged": (
                    None if r["damaged"] is None else [s.as_json() for s in r["damaged"]]
                ),
            }
            for r in answer["runs"]
        ],
        "damaged_runs_without_ratios": [
            {"run": run, "damaged": [s.as_json() for s in stretches]}
            for run, stretches in answer["damaged_runs_without_ratios"].items()
        ],
    }
    if "compare" in answer:
        out["compare"] = answer["compare"]
    return _cleanse(out)


def _cleanse(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _cleanse(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleanse(v) for v in value]
    return value


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value == math.inf else f"{value:.3g}")
    return str(value)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = []
    for row in [header, *rows]:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def to_text(answer: dict, settings: Settings) -> str:
    """The report as aligned tables, one per run, flagged layers first."""
    lines = []
    for r in answer["runs"]:
        layers = r["layers"]
        n_flagged = sum(l["flagged"] for l in layers)
        if r["low"] is None:
            judgement = (f"default judgement; above/below count the band "
                         f"[{DEFAULT_BAND[0]:g}, {DEFAULT_BAND[1]:g}]")
        else:
            judgement = f"band [{r['low']:g}, {r['high']:g}]"
        lines.append(
            f"run {r['run']}: {n_flagged} of {len(layers)} layers flagged "
            f"({judgement}, patience {r['patience']})"
        )
        header = ["layer", "steps", "skipped", "median", "last", "above", "below", "nonfinite",
                  "flagged", "since", "suggested_lr"]
        ordered = flagged_first(layers)
        rows = [
            [
                l["tag"], str(l["logged_steps"]), str(l["skipped_steps"]), _number(l["median"]),
                _number(l["last"]), str(l["above"]), str(l["below"]), str(l["nonfinite"]),
                l["reason"] if l["flagged"] else "no", _number(l["since"]),
                _number(l["suggested_learning_rate"]),
            ]
            for l in ordered
        ]
        lines += _table(header, rows, right={1, 2, 3, 4, 5, 6, 7, 9, 10})
        for l in ordered:
            if l["flagged"]:
                lines.append(f"  {l['tag']}: {l['text']}")
        for stretch in r["damaged"] or []:
            lines.append(f"  damaged {stretch.file}: {stretch.describe()}")
        lines.append(f"  suggested_lr = {suggest.FORMULA}. {suggest.CAVEAT}")
        lines.append("")
    for run, stretches in answer["damaged_runs_without_ratios"].items():
        lines.append(f"run {run}: no wur ratios read, and damaged event files")
        for stretch in stretches:
            lines.append(f"  damaged {stretch.file}: {stretch.describe()}")
        lines.append("")
    if "compare" in answer:
        c = answer["compare"]
        lines.append(
            f"compare {c['run_a']} / {c['run_b']}: {len(c['layers'])} common layers, "
            "by median |log10(ratio_a / ratio_b)|"
        )
        rows = [
            [l["tag"], _number(l["divergence"]), _number(l["median_log10_ratio"]), str(l["steps"])]
            for l in c["layers"]
        ]
        lines += _table(["layer", "divergence", "median_log10", "steps"], rows, right={1, 2, 3})
        lines.append("")
    return "\n".join(lines)

"""`tb_wur_plugin.read_ratios`: a logdir's ratios as one table, for notebooks.

Generic readers of event files (tbparse, TensorBoard's own `EventAccumulator`) see one vector
per step in the packed layout (`metadata`'s protocol version 3); this reads every layout the
writers have written, through TensorBoard's own loading code (as `tb-wur report` does), with
the readable records after a damaged stretch of an event file (read/damage.py); each damaged
file of a selected run is named in a `RuntimeWarning` (the report's stderr line).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.read import report

COLUMNS = ("run", "tag", "step", "wall_time", "ratio")


def read_ratios(
    logdir: str, run: str | None = None, *, samples: int = 0, load_fast: bool | None = None,
    metric: str = metadata.METRIC_FROBENIUS,
) -> Any:
    """The weight-update ratios of a logdir, one row per kept point.

    Args:
      logdir: the logdir (as given to `tensorboard --logdir`).
      run: a regular expression; only the runs whose name it `re.search`-es. None: all.
      samples: the most points kept per series, as `--samples_per_plugin=wur=N`; 0
        (default): all of them.
      load_fast: TensorBoard's fast loader (its data server) when True, the Python loader
        when False; None: the fast one where it is installed.
      metric: "frobenius" (default: the ratios ‖Δw‖₂/‖w‖₂) or "spectral" (the spectral
        update ratios ‖ΔW‖₂/‖W‖₂ of the matrices, where written with spectral=True).

    Returns:
      A pandas DataFrame with columns run, tag, step (int64), wall_time and ratio (float64):
      runs by name (as the report names them: a logdir that is itself a run directory names
      its run after the directory), each run's layers in model order, each layer's points by step (a step
      written twice: in the order written). Without pandas: a dict of numpy arrays under
      the same names (run and tag as object arrays).

    Warns:
      RuntimeWarning: per damaged event file of a selected run, "damaged event file RUN/FILE:
        N bytes unreadable from offset O (after step S)" (its readable records after the
        damage are in the table).

    Raises:
      FileNotFoundError: `logdir` does not exist.
      NotADirectoryError: `logdir` is a file.
      ValueError: the logdir holds no wur ratios (of `metric`), `run` selects no run or is
        not a valid regular expression, `samples` is negative, `metric` is not one of
        "frobenius", "spectral".

    Example:
      >>> frame = tb_wur_plugin.read_ratios("logs/demo", run="slow")
      >>> frame.pivot_table(index="step", columns="tag", values="ratio")
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise ValueError(f"samples must be a non-negative int, got {samples!r}")
    try:
        pattern = re.compile(run) if run is not None else None
    except re.error as e:
        raise ValueError(f"run={run!r} is not a regular expression: {e}") from None
    try:
        with report.open_logdir(logdir, samples=samples, load_fast=load_fast,
                                metric=metric) as loaded:
            columns = _columns(loaded, pattern)
    except report.ReportError as e:
        if str(e).startswith("no such directory"):
            raise FileNotFoundError(str(e)) from None
        if str(e).startswith("not a directory"):
            raise NotADirectoryError(str(e)) from None
        raise ValueError(str(e)) from None
    try:
        import pandas
    except ImportError:
        return columns
    return pandas.DataFrame(columns, columns=list(COLUMNS))


def _columns(loaded: report.Logdir, pattern: re.Pattern | None) -> dict[str, np.ndarray]:
    runs = loaded.runs()
    if not runs:
        what = "" if loaded.metric == metadata.METRIC_FROBENIUS else f"{loaded.metric} "
        raise ValueError(f"the logdir holds no {what}wur ratios")
    if pattern is not None:
        runs = [r for r in runs if pattern.search(r)]
        if not runs:
            raise ValueError(f"run={pattern.pattern!r} selects no run")
    for line in report.damage_lines({
        "runs": [{"run": name, "damaged": loaded.damaged(name)} for name in runs],
        "damaged_runs_without_ratios": {},
    }):
        warnings.warn(f"damaged event file {line}", RuntimeWarning, stacklevel=3)
    names, tags, parts = [], [], []
    for name in runs:
        layers = loaded.listings[name].layers
        ordered = sorted(layers, key=lambda t: (layers[t][0], t))
        by_tag = loaded.layer_columns(name, ordered)
        for tag in ordered:
            if tag not in by_tag:
                continue
            steps, wall_times, values = by_tag[tag]
            order = np.argsort(steps, kind="stable")
            parts.append((steps[order], wall_times[order], values[order]))
            names.append(np.full(len(steps), name, dtype=object))
            tags.append(np.full(len(steps), tag, dtype=object))
    if not parts:
        empty = np.zeros(0)
        return {"run": empty.astype(object), "tag": empty.astype(object),
                "step": empty.astype(np.int64), "wall_time": empty, "ratio": empty}
    return {
        "run": np.concatenate(names),
        "tag": np.concatenate(tags),
        "step": np.concatenate([p[0] for p in parts]).astype(np.int64),
        "wall_time": np.concatenate([p[1] for p in parts]),
        "ratio": np.concatenate([p[2] for p in parts]),
    }


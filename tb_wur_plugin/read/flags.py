"""The flag rule: which layers of a run are flagged, since when and why, and the per-layer
numbers the headless report prints. Pure numpy. The tab (`/flags`) and `tb-wur report` both
call `judge_layers`, so that they flag the same layers for the same settings.

A layer is flagged when it has (the contract's rule):
- NaN (or a negative value, which is no ratio) at any logged step: reason ``"nan"``;
- +inf after its first logged step (at the first one it is expected: a zero-initialised
  weight that moves at its first update): reason ``"inf"``. Skipped steps (ratios all 0 by
  design) are no update, so "its first logged step" is its first judged one: a run whose
  first steps were skipped (a loss scale settling) is not flagged for the +inf of its first
  applied update;
- a finite ratio out of the band [low, high] at `patience` consecutive judged steps (a
  *streak*): reason ``"above"`` or ``"below"`` (``"outside"`` when its steps lie on both
  sides). Judged steps are the logged steps the optimizer did not skip (the skipped-step
  marker); skipped and non-finite steps neither extend nor break a streak. 0 is below.
`since` is the earliest step of these findings (for a streak, its first step), `reason`
the finding at `since` (on a tie: nan, then inf, then the streak).
"""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.read.heatmap import RunMatrix

DEFAULT_PATIENCE = 5
REASONS = ("nan", "inf", "above", "below", "outside")

# The fields of a layer that the report prints (docs/report.md), in order.
REPORT_FIELDS = (
    "tag", "logged_steps", "median", "last", "above", "below", "nonfinite", "flagged", "since",
)


def judge_layers(matrix: RunMatrix, low: float, high: float, patience: int) -> list[dict]:
    """Every layer of `matrix` judged by the flag rule, in the matrix's (model) order.

    Args:
        matrix: the run's ratios.
        low: the lower edge of the band (a finite ratio below it is out of band; 0 is).
        high: the upper edge of the band (a finite ratio above it is out of band).
        patience: consecutive out-of-band judged steps that flag a layer (>= 1).

    Returns:
        One dict per layer with the keys of REPORT_FIELDS (median over the finite ratios of
        judged steps, None if none; last: the ratio at the last logged step; above/below:
        judged steps with a finite ratio > high / < low; nonfinite: logged steps with NaN or
        ±inf) and reason (one of REASONS, None when not flagged), skipped_steps,
        out_of_band_fraction (above + below over the judged steps), first_out_of_band_step, last_out_of_band_step, nan_steps, first_nan_step,
        inf_steps, first_inf_step, nan_since, inf_since, streak_since, streak_length (the
        whole streak holding streak_since; 0 when there is none).
    """
    if patience < 1:
        raise ValueError(f"patience must be at least 1, got {patience}")
    v, p = matrix.values, matrix.present
    skipped = p & matrix.skipped_mask
    judged = p & ~skipped
    with np.errstate(invalid="ignore"):
        finite_all = p & np.isfinite(v)
        finite = judged & finite_all
        below = finite & (v < low)
        above = finite & (v > high)
        broken = p & ~(v >= 0)  # NaN or negative
        infinite = p & (v == np.inf)
        nonfinite = p & ~np.isfinite(v)
    out = below | above
    steps = matrix.steps
    layers = []
    for row, tag in enumerate(matrix.tags):
        logged_cols = np.flatnonzero(p[row])
        judged_cols = np.flatnonzero(judged[row])
        # the layer's first update: its first logged step the optimizer did not skip
        first_col = judged_cols[0] if len(judged_cols) else len(steps)
        n_judged = int(judged[row].sum())
        finite_values = v[row, finite[row]]
        nan_since = _first(steps[broken[row]])
        inf_after = infinite[row].copy()
        inf_after[: first_col + 1] = False
        inf_since = _first(steps[inf_after])
        streak_since, streak_length, streak_reason = _streak(
            steps, finite[row], out[row], above[row], below[row], patience
        )
        findings = [
            (s, order, reason)
            for order, (s, reason) in enumerate(
                [(nan_since, "nan"), (inf_since, "inf"), (streak_since, streak_reason)]
            )
            if s is not None
        ]
        since, _, reason = min(findings) if findings else (None, None, None)
        out_steps = steps[out[row]]
        layers.append(
            {
                "tag": tag,
                "logged_steps": len(logged_cols),
                "median": float(np.median(finite_values)) if len(finite_values) else None,
                "last": float(v[row, logged_cols[-1]]) if len(logged_cols) else None,
                "above": int(above[row].sum()),
                "below": int(below[row].sum()),
                "nonfinite": int(nonfinite[row].sum()),
                "flagged": since is not None,
                "since": since,
                "reason": reason,
                "skipped_steps": int(skipped[row].sum()),
                "out_of_band_fraction": float(len(out_steps) / n_judged) if n_judged else 0.0,
                "first_out_of_band_step": _first(out_steps),
                "last_out_of_band_step": int(out_steps[-1]) if len(out_steps) else None,
                "nan_steps": int(broken[row].sum()),
                "first_nan_step": nan_since,
                "inf_steps": int(infinite[row].sum()),
                "first_inf_step": _first(steps[infinite[row]]),
                "nan_since": nan_since,
                "inf_since": inf_since,
                "streak_since": streak_since,
                "streak_length": streak_length,
            }
        )
    return layers


def flag_layers(
    matrix: RunMatrix, low: float, high: float, patience: int = DEFAULT_PATIENCE
) -> list[dict]:
    """The flagged layers of `matrix` (see `judge_layers`), in `flag_order`.

    Each dict has the keys of `judge_layers` but `flagged` (always true here), plus
    below_steps and above_steps (= below and above, the names the tab has read since before
    the report).
    """
    flagged = []
    for layer in judge_layers(matrix, low, high, patience):
        if layer["flagged"]:
            layer = dict(layer, below_steps=layer["below"], above_steps=layer["above"])
            del layer["flagged"]
            flagged.append(layer)
    return sorted(flagged, key=flag_order)


def flag_order(layer: dict) -> tuple:
    """Sort key of flagged layers: layers with a NaN first, then by `since`, then by tag."""
    return (layer["nan_steps"] == 0, layer["since"], layer["tag"])


def _streak(
    steps: np.ndarray, finite: np.ndarray, out: np.ndarray, above: np.ndarray,
    below: np.ndarray, patience: int,
) -> tuple[int | None, int, str | None]:
    """(first step, length, reason) of the first streak of at least `patience` out-of-band
    steps among the judged finite steps of one layer; (None, 0, None) when there is none."""
    columns = np.flatnonzero(finite)
    seq = out[columns]
    if seq.sum() < patience:
        return None, 0, None
    edges = np.diff(np.concatenate([[0], seq.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = np.flatnonzero(ends - starts >= patience)
    if not len(long):
        return None, 0, None
    start, end = starts[long[0]], ends[long[0]]
    streak_columns = columns[start:end]
    sides = (bool(above[streak_columns].any()), bool(below[streak_columns].any()))
    reason = {(True, False): "above", (False, True): "below"}.get(sides, "outside")
    return int(steps[streak_columns[0]]), int(end - start), reason


def _first(steps: np.ndarray) -> int | None:
    return int(steps[0]) if len(steps) else None

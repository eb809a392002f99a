"""The flag rule: which layers of a run left the healthy band, and how. Pure numpy."""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.heatmap import RunMatrix


def flag_layers(matrix: RunMatrix, low: float, high: float) -> list[dict]:
    """The layers whose ratio left [low, high] at some logged step, worst first.

    Zero (nothing moved) counts as below the band. +inf (a zero weight that moved) and NaN
    (not finite) are reported separately and are not out of band. Steps the optimizer
    skipped (every ratio 0 by design) are not judged: `out_of_band_fraction` is over the
    other logged steps, and `skipped_steps` counts them.

    Args:
        matrix: the run's ratios.
        low: the lower edge of the band (a ratio below it is out of band).
        high: the upper edge of the band (a ratio above it is out of band).

    Returns:
        One dict per flagged layer (keys: tag, logged_steps, skipped_steps,
        out_of_band_fraction, below_steps, above_steps, first_out_of_band_step,
        last_out_of_band_step, nan_steps, first_nan_step, inf_steps, first_inf_step; the
        first/last steps None when there are none), layers with a NaN first, then by
        decreasing out_of_band_fraction, then by tag.
    """
    flagged = []
    v, p = matrix.values, matrix.present
    skipped = p & matrix.skipped_mask
    judged = p & ~skipped
    with np.errstate(invalid="ignore"):
        finite = judged & np.isfinite(v) & (v >= 0)
        below = finite & (v < low)
        above = finite & (v > high)
        broken = p & ~(v >= 0)
        infinite = p & (v == np.inf)
    steps = matrix.steps
    for row, tag in enumerate(matrix.tags):
        logged = int(p[row].sum())
        n_judged = int(judged[row].sum())
        out = below[row] | above[row]
        if not (out.any() or broken[row].any() or infinite[row].any()):
            continue
        out_steps = steps[out]
        flagged.append(
            {
                "tag": tag,
                "logged_steps": logged,
                "skipped_steps": int(skipped[row].sum()),
                "out_of_band_fraction": float(out.sum() / n_judged) if n_judged else 0.0,
                "below_steps": int(below[row].sum()),
                "above_steps": int(above[row].sum()),
                "first_out_of_band_step": int(out_steps[0]) if len(out_steps) else None,
                "last_out_of_band_step": int(out_steps[-1]) if len(out_steps) else None,
                "nan_steps": int(broken[row].sum()),
                "first_nan_step": _first(steps[broken[row]]),
                "inf_steps": int(infinite[row].sum()),
                "first_inf_step": _first(steps[infinite[row]]),
            }
        )
    # layers gone NaN first, then the most often out of band
    flagged.sort(key=lambda f: (f["nan_steps"] == 0, -f["out_of_band_fraction"], f["tag"]))
    return flagged


def _first(steps: np.ndarray) -> int | None:
    return int(steps[0]) if len(steps) else None

"""Run comparison: the ratio of two runs' ratios, layer by layer and step by step, and the
layers ranked by how far the runs diverge. Pure numpy.

For runs A and B, over their common layers (tags of both, in A's model order) and common
steps (steps both logged): the quotient q = ratio_A / ratio_B where both layers logged the
step and neither run skipped it (the skipped-step marker), else missing. q is NaN when
either ratio is NaN (or negative), 1 when both are 0 (neither moved) or both +inf, 0 or +inf
when only one of them is.

Divergence of a layer: the median of |log10(ratio_A / ratio_B)| over the common judged steps
where both ratios are finite and positive (None when there is none): 1 means A's updates are
typically ten times larger or smaller than B's. Layers are ranked by decreasing divergence,
then by tag, layers without a divergence last.
"""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.read.heatmap import RunMatrix


def quotient(a: RunMatrix, b: RunMatrix) -> RunMatrix:
    """The matrix of ratio_A / ratio_B over the common layers and steps (module docstring);
    its rows the common tags in A's model order, without skipped steps (they are missing)."""
    rows_b = {tag: row for row, tag in enumerate(b.tags)}
    tags = tuple(t for t in a.tags if t in rows_b)
    ra = np.array([row for row, t in enumerate(a.tags) if t in rows_b], np.intp)
    rb = np.array([rows_b[t] for t in tags], np.intp)
    steps = np.intersect1d(a.steps, b.steps)
    ca, cb = np.searchsorted(a.steps, steps), np.searchsorted(b.steps, steps)
    va = a.values[np.ix_(ra, ca)].astype(np.float64)
    vb = b.values[np.ix_(rb, cb)].astype(np.float64)
    judged = ~a.skipped_mask[ca] & ~b.skipped_mask[cb]
    present = a.present[np.ix_(ra, ca)] & b.present[np.ix_(rb, cb)] & judged[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = va / vb
        same = (va == vb) & ((va == 0) | (va == np.inf))
        q = np.where(same, 1.0, q)
        q = np.where(~(va >= 0) | ~(vb >= 0), np.nan, q)
    return RunMatrix(tags, steps, np.where(present, q, np.nan), present)


def log10_quotients(a: RunMatrix, b: RunMatrix) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """(common tags in A's model order, per tag the log10(ratio_A / ratio_B) of the common
    judged steps where both ratios are finite and positive, in step order)."""
    q = quotient(a, b)
    rows_a = {tag: row for row, tag in enumerate(a.tags)}
    rows_b = {tag: row for row, tag in enumerate(b.tags)}
    ca, cb = np.searchsorted(a.steps, q.steps), np.searchsorted(b.steps, q.steps)
    out = []
    for row, tag in enumerate(q.tags):
        va = a.values[rows_a[tag], ca].astype(np.float64)
        vb = b.values[rows_b[tag], cb].astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = q.present[row] & (va > 0) & (va < np.inf) & (vb > 0) & (vb < np.inf)
        out.append(np.log10(va[ok]) - np.log10(vb[ok]))
    return q.tags, out


def ranking(a: RunMatrix, b: RunMatrix) -> list[dict]:
    """The common layers ranked by divergence (module docstring).

    Returns:
        One dict per common layer: tag, divergence (median |log10(A/B)|, None if no step
        counts), median_log10_ratio (median of log10(A/B), signed: > 0 where A's ratio is
        the larger; None likewise), steps (the steps counted).
    """
    tags, logs = log10_quotients(a, b)
    layers = [
        {
            "tag": tag,
            "divergence": float(np.median(np.abs(d))) if len(d) else None,
            "median_log10_ratio": float(np.median(d)) if len(d) else None,
            "steps": int(len(d)),
        }
        for tag, d in zip(tags, logs)
    ]
    return sorted(
        layers,
        key=lambda l: (l["divergence"] is None, -(l["divergence"] or 0.0), l["tag"]),
    )

"""The judgement: which layers of a run are flagged, since which step and why, in one line of
English each, and the per-layer numbers the headless report prints. Pure numpy. The tab
(`/flags`) and `tb-wur report` both call `judge_layers`, so that they flag the same layers
with the same reasons, counts and words for the same settings.

Judged steps are the logged steps the optimizer did not skip (the skipped-step marker: every
ratio 0 by design). A *streak* is a run of consecutive judged steps at which a condition
holds; steps at which the condition cannot be judged (a non-finite ratio; for the peer rules,
too few peers; for `not_moving`, a run that is not moving as a whole) neither extend nor
break it. `patience` (>= 1) is the streak length that flags.

The default judgement (no band given) flags only what is a defect whatever the optimizer
(docs/report.md says why each threshold is where it is, and what the corpus of real runs in
tests/judgement_corpus.py showed):

- ``nan``: NaN (or a negative value, which is no ratio) at any logged step;
- ``inf``: +inf at a judged step after the layer first moved (+inf means ‖w‖ was exactly 0:
  expected once, when a zero-initialised weight first moves);
- ``not_moving``: a ratio below `NOT_MOVING_BELOW` (0: the weights did not move at all) at
  `patience` judged steps in a row at which the run moves (another layer's ratio at least
  `RUN_MOVING_FROM`; a run that stops as a whole has converged, or skipped). The spectral
  ratios cover the matrices only: there another layer of the run's Frobenius ratios moving
  counts too (`others_moving`), so that a network whose matrices all died while a bias
  still moves is not taken for one that stopped;
- ``too_fast``: a ratio of at least `TOO_FAST_FROM` (updates half as large as the weights
  themselves) at `patience` judged steps in a row;
- ``slow_outlier`` / ``fast_outlier``: a ratio `SLOW_OUTLIER_FACTOR` times below /
  `FAST_OUTLIER_FACTOR` times above the median of its peers at `patience` judged steps in a
  row. Peers: the run's other layers of the same kind at the same step (`metadata.layer_kind`:
  matrices, two or more dimensions; vectors: biases and normalization parameters; within each,
  the layers that grow from zero — whose first update that moved them found them at exactly 0,
  +inf — apart from the others, as their ratio is 1/k at their k-th update whatever their
  learning rate), judged, with a finite positive ratio; at least `MIN_PEERS` of them, whose
  median is at least `RUN_MOVING_FROM` (below it a run has converged and float32 rounding
  dominates the ratios); it is also `OUTLIER_CONFIRM_FACTOR` times away from the median of its
  group, itself included; a fast outlier's own ratio is at least `FAST_OUTLIER_FROM`. Layers of
  unknown kind (a run written before shapes were recorded) are all each other's peers.

An explicit band (either edge given) adds the band rule on top: a finite ratio out of
[low, high] at `patience` judged steps in a row: ``below_band`` or ``above_band`` (a streak
with steps on both sides is named by the side of its first step; 0 is below).

`since` is a step, the earliest of the findings (for a streak its first step), and `reason`
the finding at `since` (on a tie, the first in REASONS).
"""

from __future__ import annotations

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.read.heatmap import RunMatrix
from tb_wur_plugin.read.settings import DEFAULT_BAND

DEFAULT_PATIENCE = 5
REASONS = (
    "nan", "inf", "not_moving", "too_fast", "slow_outlier", "fast_outlier", "below_band",
    "above_band",
)
# The reasons of the default judgement; the band rule's come on top with an explicit band.
DEFAULT_REASONS = REASONS[:6]

# --- the default judgement's thresholds (docs/report.md: why, and what the corpus showed) ---
# A ratio below this is no real movement (an update below float32's resolution of the weights
# leaves them as they were: the ratio is then exactly 0).
NOT_MOVING_BELOW = 1e-9
# The run moves at a step when another layer's ratio is at least this; the peers' median
# must be at least this for the outlier rules.
RUN_MOVING_FROM = 1e-6
# Updates at least half the weights' norm, sustained, are too fast whatever the optimizer.
TOO_FAST_FROM = 0.5
# An outlier is this many times below (slow) or above (fast) the median of its peers.
SLOW_OUTLIER_FACTOR = 150.0
FAST_OUTLIER_FACTOR = 40.0
# A fast outlier's own ratio is at least this (a layer still moving when the rest of a run has
# converged is no defect).
FAST_OUTLIER_FROM = 1e-3
# An outlier is also at least this many times away from the median of its group, itself
# included (so that in a group of three, the healthy two are not outliers of the third).
OUTLIER_CONFIRM_FACTOR = 10.0
# Peers needed to call a layer an outlier (with one, which of the two is odd is unknown).
MIN_PEERS = 2

# The fields of a layer that the report prints (docs/report.md), in order.
REPORT_FIELDS = (
    "tag", "logged_steps", "median", "last", "above", "below", "nonfinite", "flagged", "since",
)
# What /flags answers per flagged layer besides `tag`, `reason`, `since` and `text`.
COUNT_FIELDS = ("steps_in_a_row", "steps_in_total", "judged_steps", "skipped_steps")


def band_of(low: float | None, high: float | None) -> tuple[float, float] | None:
    """The explicit band of a request: None when neither edge is given (the default
    judgement); else (low, high), a missing edge from settings.DEFAULT_BAND.

    Raises:
        ValueError: low is not below high.
    """
    if low is None and high is None:
        return None
    low = DEFAULT_BAND[0] if low is None else low
    high = DEFAULT_BAND[1] if high is None else high
    if not low < high:
        raise ValueError(f"low ({low:g}) must be below high ({high:g})")
    return low, high


def judge_layers(
    matrix: RunMatrix,
    low: float | None = None,
    high: float | None = None,
    patience: int = DEFAULT_PATIENCE,
    kinds: list[str] | tuple[str, ...] | None = None,
    moving: np.ndarray | None = None,
) -> list[dict]:
    """Every layer of `matrix` judged (module docstring), in the matrix's (model) order.

    Args:
        matrix: the run's ratios.
        low, high: the band's edges; both None: the default judgement only; else the band
            rule too, a missing edge from settings.DEFAULT_BAND.
        patience: judged steps in a row that make a streak flag (>= 1).
        kinds: each row's layer kind (metadata.LAYER_KINDS), e.g. from run_data.layer_kinds;
            None: all unknown.
        moving: bool[L, S], more evidence that the run moves at each layer's steps besides
            its other layers in `matrix` (`others_moving` of the run's Frobenius ratios when
            judging its spectral ones); None: none.

    Returns:
        One dict per layer with the keys of REPORT_FIELDS (median over the finite ratios of
        judged steps, None if none; last: the ratio at the last logged step; above/below:
        judged steps with a finite ratio > high / < low of the band, the default band when
        none is given; nonfinite: logged steps with NaN or ±inf), and reason (one of
        REASONS, None when not flagged), text (one line of English, None when not flagged),
        kind, judged_steps, skipped_steps, steps_in_a_row (the streak of the finding at
        `since`; None for nan and inf), steps_in_total (judged steps at which the finding's
        condition held; for nan, logged steps), nan_steps, inf_steps, first_nan_step,
        first_inf_step, out_of_band_fraction (above + below over the judged steps),
        first_out_of_band_step, last_out_of_band_step, the since of each finding
        (``<reason>_since``, None when absent), streak_since and streak_length (of the band
        rule; None and 0 without a band).
    """
    if isinstance(patience, bool) or not isinstance(patience, (int, np.integer)) or patience < 1:
        raise ValueError(f"patience must be an integer of at least 1, got {patience!r}")
    band = band_of(low, high)
    counting_band = band if band is not None else DEFAULT_BAND
    n_layers = len(matrix.tags)
    if kinds is None:
        kinds = [metadata.LAYER_UNKNOWN] * n_layers
    kinds = list(kinds)
    if len(kinds) != n_layers:
        raise ValueError(f"kinds names {len(kinds)} layers, the matrix has {n_layers}")
    for k in kinds:
        if k not in metadata.LAYER_KINDS:
            raise ValueError(f"unknown layer kind {k!r}; expected one of {metadata.LAYER_KINDS}")

    steps = matrix.steps
    if moving is not None and moving.shape != matrix.values.shape:
        raise ValueError(f"moving has shape {moving.shape}, the matrix {matrix.values.shape}")
    cells = _judged_cells(matrix, kinds, counting_band, moving)

    layers = []
    for row, tag in enumerate(matrix.tags):
        c = cells.row(row)
        v_row = matrix.values[row].astype(np.float64)
        p_row, judged_row, finite_row = c["present"], c["judged"], c["finite"]
        below_row, above_row = c["below"], c["above"]
        logged_cols = np.flatnonzero(p_row)
        n_judged = int(judged_row.sum())
        finite_values = v_row[finite_row]
        moved = np.flatnonzero(judged_row & (v_row > 0))  # NaN compares False
        inf_after = c["infinite"].copy()
        inf_after[: (moved[0] + 1) if len(moved) else len(steps)] = False
        findings: dict[str, dict] = {}
        nan_cols = np.flatnonzero(c["broken"])
        if len(nan_cols):
            findings["nan"] = {"cols": nan_cols, "in_a_row": None, "total": len(nan_cols)}
        inf_cols = np.flatnonzero(inf_after)
        if len(inf_cols):
            findings["inf"] = {"cols": inf_cols, "in_a_row": None, "total": len(inf_cols)}
        streak_rules = [
            ("not_moving", finite_row & c["run_moving"], c["still"]),
            ("too_fast", finite_row, c["too_fast"]),
            ("slow_outlier", c["peers_ok"], c["slow"]),
            ("fast_outlier", c["peers_ok"], c["fast"]),
        ]
        if band is not None:
            out = below_row | above_row
            streak_rules.append(("band", finite_row, out))
        streak_since, streak_length = None, 0
        for name, evaluable, hit in streak_rules:
            cols = _streak(evaluable, hit, patience)
            if cols is None:
                continue
            if name == "band":
                name = "above_band" if above_row[cols[0]] else "below_band"
                streak_since, streak_length = int(steps[cols[0]]), len(cols)
                hit_total = int((below_row | above_row).sum())
            else:
                hit_total = int(hit.sum())
            findings[name] = {"cols": cols, "in_a_row": len(cols), "total": hit_total}
        since = reason = None
        if findings:
            reason = min(findings, key=lambda r: (steps[findings[r]["cols"][0]], REASONS.index(r)))
            since = int(steps[findings[reason]["cols"][0]])
        finding = findings.get(reason)
        out_steps = steps[below_row | above_row]
        layer = {
            "tag": tag,
            "logged_steps": len(logged_cols),
            "median": float(np.median(finite_values)) if len(finite_values) else None,
            "last": float(v_row[logged_cols[-1]]) if len(logged_cols) else None,
            "above": int(above_row.sum()),
            "below": int(below_row.sum()),
            "nonfinite": int(c["nonfinite"].sum()),
            "flagged": since is not None,
            "since": since,
            "reason": reason,
            "text": None,
            "kind": kinds[row],
            "judged_steps": n_judged,
            "skipped_steps": int(c["skipped"].sum()),
            "steps_in_a_row": finding["in_a_row"] if finding else None,
            "steps_in_total": finding["total"] if finding else None,
            "nan_steps": int(c["broken"].sum()),
            "inf_steps": int(c["infinite"].sum()),
            "first_nan_step": int(steps[nan_cols[0]]) if len(nan_cols) else None,
            "first_inf_step": _first(steps[c["infinite"]]),
            "out_of_band_fraction": float(len(out_steps) / n_judged) if n_judged else 0.0,
            "first_out_of_band_step": _first(out_steps),
            "last_out_of_band_step": int(out_steps[-1]) if len(out_steps) else None,
            "streak_since": streak_since,
            "streak_length": streak_length,
        }
        for name in REASONS:
            f = findings.get(name)
            layer[f"{name}_since"] = int(steps[f["cols"][0]]) if f else None
        if finding is not None:
            cols = finding["cols"]
            layer["text"] = _text(
                reason, since, finding, v_row[cols], cells.gap(row, cols), band, kinds[row]
            )
        layers.append(layer)
    return layers


# Cells judged at once (bounds the temporaries of a large run: ~15 float64 arrays of a block).
_BLOCK_CELLS = 1 << 18
# The per-cell conditions a layer's findings are read from (each a bool[L, S], kept as bits).
_CONDITIONS = ("present", "skipped", "judged", "finite", "broken", "infinite", "nonfinite",
               "below", "above", "run_moving", "still", "too_fast", "peers_ok", "slow", "fast")


class _JudgedCells:
    """The per-cell conditions of a run's judgement, computed in blocks of steps (every
    condition of a cell depends on its own step only: the peers are the other layers at that
    step) and kept as bits, 15 bits a cell."""

    def __init__(self, matrix: RunMatrix, groups: list[tuple], bits: dict[str, np.ndarray]):
        self._matrix, self._groups, self._bits = matrix, groups, bits

    def row(self, row: int) -> dict[str, np.ndarray]:
        """{condition: bool[S]} of one layer."""
        n = len(self._matrix.steps)
        return {name: np.unpackbits(b[row], count=n).astype(bool) for name, b in self._bits.items()}

    def gap(self, row: int, cols: np.ndarray) -> np.ndarray:
        """log10 of the layer's ratio over its peers' median at columns `cols`."""
        rows = [i for i, g in enumerate(self._groups) if g == self._groups[row]]
        log_v = _positive_log10(self._matrix, rows, cols)
        peer_log = _leave_one_out_median(log_v, min_others=MIN_PEERS)
        return log_v[rows.index(row)] - peer_log[rows.index(row)]


def _positive_log10(matrix: RunMatrix, rows: list[int], cols) -> np.ndarray:
    """float64[len(rows), len(cols)]: log10 of the judged finite positive ratios, NaN elsewhere."""
    v = matrix.values[np.ix_(rows, cols)].astype(np.float64)
    judged = matrix.present[np.ix_(rows, cols)] & ~matrix.skipped_mask[cols][None, :]
    with np.errstate(invalid="ignore"):
        positive = judged & np.isfinite(v) & (v > 0)
    return np.where(positive, np.log10(np.where(positive, v, 1.0)), np.nan)


def _judged_cells(
    matrix: RunMatrix, kinds: list[str], counting_band: tuple[float, float],
    moving: np.ndarray | None = None,
) -> _JudgedCells:
    n_layers, n_steps = matrix.values.shape
    # a layer grows from zero when the first update that moved it found it at exactly 0
    # (+inf): its ratio then falls as 1/k whatever its learning rate
    applied = ~matrix.skipped_mask
    from_zero = []
    for row in range(n_layers):
        v_row = matrix.values[row]
        with np.errstate(invalid="ignore"):
            moved = np.flatnonzero(matrix.present[row] & applied & (v_row > 0))
        from_zero.append(bool(len(moved)) and v_row[moved[0]] == np.inf)
    groups = [(k, z) for k, z in zip(kinds, from_zero)]
    group_rows = [[i for i, g in enumerate(groups) if g == group] for group in set(groups)]
    bits = {name: np.zeros((n_layers, -(-n_steps // 8)), np.uint8) for name in _CONDITIONS}
    width = max(8, (_BLOCK_CELLS // max(n_layers, 1)) // 8 * 8)
    for c0 in range(0, n_steps, width):
        c1 = min(c0 + width, n_steps)
        block = _block_conditions(matrix, slice(c0, c1), group_rows, counting_band)
        if moving is not None:
            block["run_moving"] = block["run_moving"] | moving[:, c0:c1]
        for name, cells in block.items():
            bits[name][:, c0 // 8:-(-c1 // 8)] = np.packbits(cells, axis=1)
    return _JudgedCells(matrix, groups, bits)


def _block_conditions(
    matrix: RunMatrix, cols: slice, group_rows: list[list[int]],
    counting_band: tuple[float, float],
) -> dict[str, np.ndarray]:
    """The conditions of _CONDITIONS for the steps `cols` of every layer."""
    v = matrix.values[:, cols].astype(np.float64)
    p = matrix.present[:, cols]
    skipped = p & matrix.skipped_mask[cols][None, :]
    judged = p & ~skipped
    with np.errstate(invalid="ignore"):
        finite = judged & np.isfinite(v)
        positive = finite & (v > 0)
        broken = p & ~(v >= 0)  # NaN or negative
        infinite = p & (v == np.inf)
        nonfinite = p & ~np.isfinite(v)
        below = finite & (v < counting_band[0])
        above = finite & (v > counting_band[1])
    log_v = np.where(positive, np.log10(np.where(positive, v, 1.0)), np.nan)
    # the run moves at a step when another layer's ratio is at least RUN_MOVING_FROM
    run_moving = _leave_one_out_max(np.where(finite, v, np.nan)) >= RUN_MOVING_FROM
    # the peers' median of log10 ratio, per layer and step (NaN: too few peers)
    peer_log = np.full(v.shape, np.nan)
    # and the group's median, the layer included (NaN: too few layers)
    group_log = np.full(v.shape, np.nan)
    for rows in group_rows:
        peer_log[rows], group_log[rows] = _medians(log_v[rows], MIN_PEERS, MIN_PEERS + 1)
    with np.errstate(invalid="ignore"):
        peers_ok = positive & (peer_log >= np.log10(RUN_MOVING_FROM))
        gap = log_v - peer_log  # log10 of ratio / peers' median
        # the gap to the group's median confirms it: among a few layers, one odd layer drags
        # the others' leave-one-out median toward itself and makes them look odd too
        confirmed = np.abs(log_v - group_log) >= np.log10(OUTLIER_CONFIRM_FACTOR)
        slow = peers_ok & confirmed & (gap <= -np.log10(SLOW_OUTLIER_FACTOR))
        fast = (peers_ok & confirmed & (gap >= np.log10(FAST_OUTLIER_FACTOR))
                & (v >= FAST_OUTLIER_FROM))
        still = finite & (v < NOT_MOVING_BELOW)
        too_fast = finite & (v >= TOO_FAST_FROM)
    return {
        "present": p, "skipped": skipped, "judged": judged, "finite": finite,
        "broken": broken, "infinite": infinite, "nonfinite": nonfinite, "below": below,
        "above": above, "run_moving": run_moving, "still": still, "too_fast": too_fast,
        "peers_ok": peers_ok, "slow": slow, "fast": fast,
    }


def flag_layers(
    matrix: RunMatrix,
    low: float | None = None,
    high: float | None = None,
    patience: int = DEFAULT_PATIENCE,
    kinds: list[str] | tuple[str, ...] | None = None,
    moving: np.ndarray | None = None,
) -> list[dict]:
    """The flagged layers of `matrix` (see `judge_layers`), in `flag_order`, as `/flags`
    lists them: tag, reason, since, text and the COUNT_FIELDS first, then the other keys of
    `judge_layers` but `flagged`, and below_steps and above_steps (= below and above, the
    names the tab has read since before the report)."""
    flagged = []
    for layer in judge_layers(matrix, low, high, patience, kinds, moving):
        if layer["flagged"]:
            first = {k: layer[k] for k in ("tag", "reason", "since", "text", *COUNT_FIELDS)}
            rest = {k: v for k, v in layer.items() if k not in first and k != "flagged"}
            flagged.append({**first, **rest, "below_steps": layer["below"],
                            "above_steps": layer["above"]})
    return sorted(flagged, key=flag_order)


def flag_order(layer: dict) -> tuple:
    """Sort key of flagged layers: NaN first, then by `since`, then by tag."""
    return (layer["reason"] != "nan", layer["since"], layer["tag"])


# --- the words --------------------------------------------------------------------------------


def _g(x: float) -> str:
    return f"{x:.3g}"


def _factor(log10_gap: np.ndarray) -> str:
    factor = 10.0 ** float(np.median(np.abs(log10_gap)))
    return f"{factor:,.0f}" if factor >= 10 else f"{factor:.2g}"


def _text(reason, since, finding, values, gaps, band, kind) -> str:
    """One line of English: what, how many steps (in a row, or in total), from which step."""
    total = finding["total"]
    in_a_row = finding["in_a_row"]
    streak = f"at {in_a_row} judged steps in a row from step {since}"
    also = (
        f" ({total} judged steps in total)" if total != in_a_row else ""
    ) if in_a_row is not None else ""
    peers = {
        metadata.LAYER_MATRIX: "matrices",
        metadata.LAYER_VECTOR: "vectors (biases, normalization parameters)",
    }.get(kind, "layers")
    if reason == "nan":
        return (f"NaN: ratio NaN (the weights or their update are not finite) at {total} "
                f"logged steps in total, first at step {since}")
    if reason == "inf":
        return (f"inf: ratio +inf (the weights were exactly 0 again and moved) at {total} "
                f"judged steps in total after the layer first moved, first at step {since}")
    if reason == "not_moving":
        what = ("ratio 0 (did not move)" if not np.any(values > 0)
                else f"ratio below {NOT_MOVING_BELOW:g} (no real movement; 0: did not move)")
        return (f"not moving: {what} {streak} while the run's other layers moved{also}")
    if reason == "too_fast":
        return (f"too fast: ratio at least {TOO_FAST_FROM:g} (updates at least half the "
                f"weights' norm; median {_g(float(np.median(values)))}) {streak}{also}")
    if reason in ("slow_outlier", "fast_outlier"):
        side = "below" if reason == "slow_outlier" else "above"
        return (f"{reason.replace('_', ' ')}: ratio {_factor(gaps)}× {side} the median of the "
                f"run's other {peers} (median ratio {_g(float(np.median(values)))}) "
                f"{streak}{also}")
    low, high = band
    if reason == "below_band":
        what = ("ratio 0 (did not move)" if not np.any(values > 0)
                else f"ratio below the band's low edge {low:g} (0: did not move)")
        return f"below band: {what} {streak}{also}"
    return (f"above band: ratio above the band's high edge {high:g} (median "
            f"{_g(float(np.median(values)))}) {streak}{also}")


# --- the arithmetic ---------------------------------------------------------------------------


def _streak(evaluable: np.ndarray, hit: np.ndarray, patience: int) -> np.ndarray | None:
    """The columns of the first run of at least `patience` hits among the `evaluable`
    columns (non-evaluable columns neither extend nor break it); None when there is none."""
    columns = np.flatnonzero(evaluable)
    seq = hit[columns]
    if seq.sum() < patience:
        return None
    edges = np.diff(np.concatenate([[0], seq.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = np.flatnonzero(ends - starts >= patience)
    if not len(long):
        return None
    return columns[starts[long[0]]:ends[long[0]]]


def _first(steps: np.ndarray) -> int | None:
    return int(steps[0]) if len(steps) else None


def others_moving(matrix: RunMatrix, reference: RunMatrix) -> np.ndarray:
    """bool[L, S]: at each layer and step of `matrix`, whether a layer of `reference` (the
    same run's Frobenius ratios) other than the one of the same tag had a judged finite
    ratio of at least RUN_MOVING_FROM at the same step (False at steps it lacks)."""
    judged = reference.present & ~reference.skipped_mask[None, :]
    values = np.where(judged, reference.values.astype(np.float64), np.nan)
    with np.errstate(invalid="ignore"):
        others = _leave_one_out_max(values) >= RUN_MOVING_FROM  # [R, S_ref]
        any_layer = np.nanmax(np.where(np.isnan(values), -np.inf, values), axis=0,
                              initial=-np.inf) >= RUN_MOVING_FROM
    row_of = {tag: i for i, tag in enumerate(reference.tags)}
    by_row = np.stack([others[row_of[t]] if t in row_of else any_layer for t in matrix.tags]) \
        if matrix.tags else np.zeros((0, len(reference.steps)), bool)
    out = np.zeros(matrix.values.shape, bool)
    index = np.searchsorted(reference.steps, matrix.steps)
    found = index < len(reference.steps)
    found[found] = reference.steps[index[found]] == matrix.steps[found]
    out[:, found] = by_row[:, index[found]]
    return out


def _leave_one_out_max(values: np.ndarray) -> np.ndarray:
    """float64[L, S]: at each (i, j), the largest non-NaN value of column j in the rows other
    than i; NaN where there is none."""
    n_rows = values.shape[0]
    out = np.full(values.shape, np.nan)
    if n_rows < 2:
        return out
    filled = np.where(np.isnan(values), -np.inf, values)
    cols = np.arange(values.shape[1])
    top = np.argmax(filled, axis=0)  # the first of the largest
    others = filled.copy()
    others[top, cols] = -np.inf
    second = np.argmax(others, axis=0)  # the first of the largest of the others
    best = np.where(np.arange(n_rows)[:, None] == top[None, :], filled[second, cols][None, :],
                    filled[top, cols][None, :])
    return np.where(np.isinf(best) & (best < 0), np.nan, best)


def _group_median(values: np.ndarray, min_layers: int) -> np.ndarray:
    """float64[L, S]: at each (i, j), the median of column j's non-NaN values over all rows,
    row i included; NaN where there are fewer than `min_layers` of them."""
    return _medians(values, min_layers, min_layers)[1]


def _leave_one_out_median(values: np.ndarray, min_others: int = 1) -> np.ndarray:
    """float64[L, S]: at each (i, j), the median of column j's non-NaN values in the rows
    other than i; NaN where fewer than `min_others` of them."""
    return _medians(values, min_others, 1)[0]


def _medians(
    values: np.ndarray, min_others: int, min_layers: int
) -> tuple[np.ndarray, np.ndarray]:
    """(the leave-one-out medians, `_leave_one_out_median`; the group's medians,
    `_group_median`) of `values` [L, S], from one sort of each column.

    With a column's n non-NaN values sorted, r_0 <= ... <= r_{n-1}, the k-th smallest of
    the others of a cell holding v is r_k when v > r_k, else r_{k+1} (removing one copy of
    v); a NaN cell's others are all n. A median is the mean of the two middle values."""
    n_rows, n_cols = values.shape
    peer = np.full(values.shape, np.nan)
    group = np.full(values.shape, np.nan)
    if n_cols == 0:
        return peer, group
    ranked = np.sort(values.T, axis=1)  # [S, L]: each column's values ascending, NaN last
    valid = ~np.isnan(values)
    count = valid.sum(axis=0)
    cols = np.arange(n_cols)

    def nth(k: np.ndarray) -> np.ndarray:  # r_k of each column
        return ranked[cols, np.clip(k, 0, n_rows - 1)]

    middle = (nth((count - 1) // 2) + nth(count // 2)) / 2  # of all n
    enough = count >= min_layers
    group[:, enough] = middle[None, enough]
    if n_rows < 2:
        return peer, group

    def nth_other(k: np.ndarray) -> np.ndarray:  # [L, S]: the k-th of each cell's others
        r_k, r_next = nth(k)[None, :], nth(k + 1)[None, :]
        return np.where(values > r_k, r_k, r_next)

    lo, hi = np.maximum(count - 2, 0) // 2, np.maximum(count - 1, 0) // 2
    median = np.where(valid, (nth_other(lo) + nth_other(hi)) / 2, middle[None, :])
    others = count[None, :] - valid
    has_enough = others >= max(min_others, 1)
    peer[has_enough] = median[has_enough]
    return peer, group

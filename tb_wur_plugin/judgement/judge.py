"""The judgement of a whole run: which layers are flagged, since which step and why, in one
line of English each, and the per-layer numbers the headless report prints. Pure numpy. The
tab (`/flags`) and `tb-wur report` both call `judge_layers`, so that they flag the same
layers with the same reasons, counts and words for the same settings; the online judgement
(online.py) gives the same findings step by step.

Judged steps are the logged steps the optimizer did not skip (the skipped-step marker: every
ratio 0 by design). A *streak* is a run of consecutive judged steps at which a condition
holds; steps at which the condition cannot be judged (a non-finite ratio; for the peer rules,
too few peers; for `not_moving`, a run that is not moving as a whole) neither extend nor
break it. `patience` (>= 1) is the streak length that flags.

The reasons, their conditions and words are the table in reasons.py; the facts of each cell
they read, the peers included, in cells.py; the thresholds in thresholds.py (docs/report.md
says why each is where it is). The default judgement (no band given) flags only what is a
defect whatever the optimizer (``nan``, ``inf``, ``not_moving``, ``too_fast``,
``slow_outlier``, ``fast_outlier``); an explicit band (either edge given) adds the band rule on
top: a finite ratio out of [low, high] at `patience` judged steps in a row, ``below_band`` or
``above_band`` (a streak with steps on both sides is named by the side of its first step; 0
is below). The spectral ratios cover the matrices only: judging them, the run's Frobenius
ratios moving count as the run moving too (`others_moving`), so that a network whose
matrices all died while a bias still moves is not taken for one that stopped.

`since` is a step, the earliest of the findings (for a streak its first step), and `reason`
the finding at `since` (on a tie, the first in the table).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Protocol

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement import reasons as table
from tb_wur_plugin.judgement.blocks import conditions_of, in_float32, only_where_logged
from tb_wur_plugin.judgement.cells import (
    group_medians,
    others_at_least,
    positive_log10,
)
from tb_wur_plugin.judgement.threads import in_threads
from tb_wur_plugin.judgement.thresholds import DEFAULT_BAND, DEFAULT_PATIENCE, RUN_MOVING_FROM

# The fields of a layer that the report prints (docs/report.md), in order.
REPORT_FIELDS = (
    "tag", "logged_steps", "median", "last", "above", "below", "nonfinite", "flagged", "since",
)
# What /flags answers per flagged layer besides `tag`, `reason`, `since` and `text`.
COUNT_FIELDS = ("steps_in_a_row", "steps_in_total", "judged_steps", "skipped_steps")


class Ratios(Protocol):
    """A run's ratios as the judgement reads them (`read.heatmap.RunMatrix` is one):
    `values[i, j]` is layer `tags[i]` at `steps[j]` where `present[i, j]`."""

    @property
    def tags(self) -> tuple[str, ...]: ...

    @property
    def steps(self) -> np.ndarray: ...  # int[S], ascending, distinct

    @property
    def values(self) -> np.ndarray: ...  # float[L, S] (float32 as the events hold them)

    @property
    def present(self) -> np.ndarray: ...  # bool[L, S]

    @property
    def skipped_mask(self) -> np.ndarray: ...  # bool[S]: the steps the optimizer skipped


@dataclasses.dataclass(frozen=True)
class Finding:
    """One reason a layer is flagged for, as the judgement of the steps so far gives it."""

    reason: str  # a name of reasons.REASONS
    since: int  # its first step
    steps_in_a_row: int | None  # a streak's judged steps; None for a single-step finding
    steps_in_total: int  # steps at which its condition held
    text: str  # one line of English


def band_of(low: float | None, high: float | None) -> tuple[float, float] | None:
    """The explicit band of a request: None when neither edge is given (the default
    judgement); else (low, high), a missing edge from thresholds.DEFAULT_BAND.

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


def check_settings(
    patience: int, n_layers: int, kinds: list[str] | tuple[str, ...] | None,
) -> list[str]:
    """The layer kinds to judge with (all unknown for None), once the settings are checked.

    Raises:
        ValueError: patience is no integer of at least 1, `kinds` does not name `n_layers`
            layers, or names an unknown kind.
    """
    if isinstance(patience, bool) or not isinstance(patience, (int, np.integer)) or patience < 1:
        raise ValueError(f"patience must be an integer of at least 1, got {patience!r}")
    if kinds is None:
        return [metadata.LAYER_UNKNOWN] * n_layers
    kinds = list(kinds)
    if len(kinds) != n_layers:
        raise ValueError(f"kinds names {len(kinds)} layers, the matrix has {n_layers}")
    for k in kinds:
        if k not in metadata.LAYER_KINDS:
            raise ValueError(f"unknown layer kind {k!r}; expected one of {metadata.LAYER_KINDS}")
    return kinds


def judge_layers(
    matrix: Ratios,
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
            rule too, a missing edge from thresholds.DEFAULT_BAND.
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
        none is given; nonfinite: logged steps with NaN or ±inf), and reason (a name of
        reasons.REASONS, None when not flagged), text (one line of English, None when not
        flagged), kind, judged_steps, skipped_steps, steps_in_a_row (the streak of the
        finding at `since`; None for a single-step finding: nan, inf), steps_in_total
        (judged steps at which the finding's condition held; for nan, logged steps),
        nan_steps, inf_steps, first_nan_step, first_inf_step, out_of_band_fraction (above +
        below over the judged steps), first_out_of_band_step, last_out_of_band_step, the
        since of each finding (``<reason>_since``, None when absent), streak_since and
        streak_length (of the band rule; None and 0 without a band).

    Raises:
        ValueError: a setting is bad (`check_settings`, `band_of`), or `moving` has not the
            matrix's shape.
    """
    return _layers(_JudgedRun(matrix, low, high, patience, kinds, moving), flagged_only=False)


def _layers(run: _JudgedRun, flagged_only: bool) -> list[dict]:
    """judge_layers' layers of `run`; with `flagged_only`, of its flagged layers only."""
    matrix, steps = run.matrix, run.matrix.steps
    judged = [(row, found) for row, _, found in run.rows() if found or not flagged_only]
    medians = run.medians([row for row, _ in judged])
    # the reason at since: the earliest finding (on a tie, the first in the table)
    reasons = [min(found, key=lambda r: (steps[found[r].cols[0]], table.NAMES.index(r)))
               if found else None for _, found in judged]

    def words(i: int) -> str | None:
        (row, found), reason = judged[i], reasons[i]
        return run.text(row, reason, found[reason]) if reason else None

    texts = list(in_threads(words, range(len(judged))))
    layers = []
    for (row, found), median, reason, text in zip(judged, medians, reasons, texts):
        n_logged, n_judged = run.count("present", row), run.count("judged", row)
        n_above, n_below = run.count("above", row), run.count("below", row)
        out = [side for side in ("below", "above") if run.count(side, row)]
        finding = found.get(reason)
        since = int(steps[finding.cols[0]]) if finding else None
        band_found = [f for r, f in found.items() if table.BY_NAME[r].judgement == table.BAND]
        layer = {
            "tag": matrix.tags[row],
            "logged_steps": n_logged,
            "median": median,
            "last": float(matrix.values[row, run.last("present", row)]) if n_logged else None,
            "above": n_above,
            "below": n_below,
            "nonfinite": run.count("nonfinite", row),
            "flagged": since is not None,
            "since": since,
            "reason": reason,
            "text": text,
            "kind": run.kinds[row],
            "judged_steps": n_judged,
            "skipped_steps": run.count("skipped", row),
            "steps_in_a_row": finding.in_a_row if finding else None,
            "steps_in_total": finding.total if finding else None,
            "nan_steps": run.count("broken", row),
            "inf_steps": run.count("infinite", row),
            "first_nan_step": run.first_step("broken", row),
            "first_inf_step": run.first_step("infinite", row),
            "out_of_band_fraction": (n_above + n_below) / n_judged if n_judged else 0.0,
            "first_out_of_band_step":
                min(run.first_step(side, row) for side in out) if out else None,
            "last_out_of_band_step":
                int(steps[max(run.last(side, row) for side in out)]) if out else None,
            "streak_since": int(steps[band_found[0].cols[0]]) if band_found else None,
            "streak_length": len(band_found[0].cols) if band_found else 0,
        }
        for name in table.NAMES:
            f = found.get(name)
            layer[f"{name}_since"] = int(steps[f.cols[0]]) if f else None
        layers.append(layer)
    return layers


def findings(
    matrix: Ratios,
    low: float | None = None,
    high: float | None = None,
    patience: int = DEFAULT_PATIENCE,
    kinds: list[str] | tuple[str, ...] | None = None,
    moving: np.ndarray | None = None,
) -> list[dict[str, Finding]]:
    """Every finding of every layer of `matrix`, not only the one at `since` that
    `judge_layers` names: per layer (model order), {reason: its Finding}, in table order.
    The arguments and errors are `judge_layers`'; a finding's since, counts and text are what
    `judge_layers` gives when it is the layer's reason."""
    run = _JudgedRun(matrix, low, high, patience, kinds, moving)
    out = []
    for row, _, found in run.rows():
        out.append({
            name: Finding(name, int(matrix.steps[f.cols[0]]), f.in_a_row, f.total,
                          run.text(row, name, f))
            for name, f in found.items()
        })
    return out


def flag_layers(
    matrix: Ratios,
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
    run = _JudgedRun(matrix, low, high, patience, kinds, moving)
    for layer in _layers(run, flagged_only=True):
        if layer["flagged"]:
            first = {k: layer[k] for k in ("tag", "reason", "since", "text", *COUNT_FIELDS)}
            rest = {k: v for k, v in layer.items() if k not in first and k != "flagged"}
            flagged.append({**first, **rest, "below_steps": layer["below"],
                            "above_steps": layer["above"]})
    return sorted(flagged, key=flag_order)


def flag_order(layer: dict) -> tuple:
    """Sort key of flagged layers: NaN first, then by `since`, then by tag."""
    return (layer["reason"] != "nan", layer["since"], layer["tag"])


def others_moving(matrix: Ratios, reference: Ratios) -> np.ndarray:
    """bool[L, S]: at each layer and step of `matrix`, whether a layer of `reference` (the
    same run's Frobenius ratios) other than the one of the same tag had a judged finite
    ratio of at least RUN_MOVING_FROM at the same step (False at steps it lacks)."""
    judged = reference.present & ~reference.skipped_mask[None, :]
    with np.errstate(invalid="ignore"):
        reaches = judged & (reference.values.astype(np.float64) >= RUN_MOVING_FROM)
    others = others_at_least(reaches)  # [R, S_ref]
    any_layer = reaches.any(axis=0)
    row_of = {tag: i for i, tag in enumerate(reference.tags)}
    by_row = np.stack([others[row_of[t]] if t in row_of else any_layer for t in matrix.tags]) \
        if matrix.tags else np.zeros((0, len(reference.steps)), bool)
    out = np.zeros(matrix.values.shape, bool)
    index = np.searchsorted(reference.steps, matrix.steps)
    found = index < len(reference.steps)
    found[found] = reference.steps[index[found]] == matrix.steps[found]
    out[:, found] = by_row[:, index[found]]
    return out


# --- the whole run, in blocks of steps ----------------------------------------------------------

# Cells judged at once (bounds the temporaries of a large run: float32 and bool arrays of a
# block; an eighth as many where blocks.py leaves them to cells.cells_of, ~15 float64 arrays).
_BLOCK_CELLS = 1 << 21
# The facts of cells.Cells a layer's numbers are read from, besides the reasons' conditions
# (kept as bits: a large run's cells at about 16 bits a cell).
_FACTS = ("present", "skipped", "judged", "finite", "broken", "infinite", "nonfinite", "below",
          "above")
# The facts whose first and last column in each row the judgement keeps too.
_SPANS = ("present", "broken", "infinite", "below", "above")


@dataclasses.dataclass(frozen=True)
class _Found:
    cols: np.ndarray  # the finding's columns (a streak's, or every hit)
    in_a_row: int | None
    total: int


class _JudgedRun:
    """A run's cells, computed in blocks of steps (every fact of a cell depends on its own
    step, and on the layer's past through when it first moved) and kept as bits: the facts
    of _FACTS and the conditions of the judged reasons (reasons.conditions)."""

    def __init__(self, matrix: Ratios, low, high, patience, kinds, moving):
        self.band = band_of(low, high)
        self.kinds = check_settings(patience, len(matrix.tags), kinds)
        if moving is not None and moving.shape != matrix.values.shape:
            raise ValueError(f"moving has shape {moving.shape}, the matrix {matrix.values.shape}")
        self.matrix, self.patience = matrix, patience
        self.rules = table.rules(table.active(self.band))
        n_layers, n_steps = matrix.values.shape
        skipped_steps = matrix.skipped_mask
        # the column at which each layer first moved (a judged ratio > 0; n_steps: never),
        # and whether it grew from zero there (+inf)
        first_move = _first_moves(matrix)
        moved = first_move < n_steps
        from_zero = np.zeros(n_layers, bool)
        from_zero[moved] = matrix.values[np.flatnonzero(moved), first_move[moved]] == np.inf
        self.groups = list(zip(self.kinds, from_zero.tolist()))
        group_rows = [[i for i, g in enumerate(self.groups) if g == group]
                      for group in set(self.groups)]
        counting_band = self.band if self.band is not None else DEFAULT_BAND
        sources = {**{fact: fact for fact in _FACTS}, **table.conditions(table.active(self.band))}
        # each condition's bits, where it holds at some cell; and whether at every cell
        self._bits: dict[str, np.ndarray] = {}
        self._everywhere = dict.fromkeys(sources, True)
        self._counts = {key: np.zeros(n_layers, np.int64) for key in sources}
        self._first = {key: np.full(n_layers, -1) for key in _SPANS}
        self._last = {key: np.full(n_layers, -1) for key in _SPANS}
        cells = _BLOCK_CELLS if in_float32(matrix.values.dtype, sources) else _BLOCK_CELLS // 8
        width = max(8, (cells // max(n_layers, 1)) // 8 * 8)
        # a layer logged at no step of a block (not yet added, or left) is left out of it
        # when every condition then holds nowhere in its row
        leave_out = all(map(only_where_logged, sources.values()))

        def part(c0: int, c1: int) -> tuple[int, int, np.ndarray | slice, dict]:
            present = matrix.present[:, c0:c1]
            rows: np.ndarray | slice = slice(None)
            groups = group_rows
            if leave_out and not (logged := present.any(axis=1)).all():
                kept = np.flatnonzero(logged)
                if not len(kept):
                    return c0, c1, kept, dict.fromkeys(sources, False)
                rows = slice(kept[0], kept[-1] + 1) \
                    if kept[-1] - kept[0] + 1 == len(kept) else kept
                index = np.full(n_layers, -1)
                index[kept] = np.arange(len(kept))
                groups = [g for g in ([int(index[i]) for i in group if index[i] >= 0]
                                      for group in group_rows) if g]
            return c0, c1, rows, conditions_of(
                matrix.values[rows, c0:c1], present[rows], skipped_steps[c0:c1], groups,
                counting_band, first_move[rows], c0,
                None if moving is None else moving[rows, c0:c1], sources,
            )

        def block(c0: int) -> list[tuple[int, int, np.ndarray | slice, dict]]:
            c1 = min(c0 + width, n_steps)
            return [part(*bounds) for bounds in _parts(skipped_steps, c0, c1)]

        for parts in in_threads(block, range(0, n_steps, width)):
            for judged in parts:
                self._keep(*judged)
        self._nowhere = np.zeros(n_steps, bool)
        self._nowhere.flags.writeable = False
        self._every = np.ones(n_steps, bool)
        self._every.flags.writeable = False

    def _keep(self, c0: int, c1: int, rows: np.ndarray | slice,
              holds: dict[str, bool | np.ndarray]) -> None:
        """Keeps the conditions of the block of columns [c0, c1) (the blocks in order) as
        bits, and each row's count of them, first and last column (_SPANS). `holds` covers
        the block's `rows` (a slice or row indices); its other rows hold nothing."""
        n_layers, n_steps = self.matrix.values.shape
        some_rows = not (isinstance(rows, slice) and rows == slice(None))
        block_bytes = slice(c0 // 8, -(-c1 // 8))
        for key, where in holds.items():
            if self._everywhere[key] and (where is not True or some_rows):
                self._everywhere[key] = False
                if c0:  # it held at every cell of the blocks before (no bits kept for them)
                    self._bits[key] = np.zeros((n_layers, -(-n_steps // 8)), np.uint8)
                    self._bits[key][:, :c0 // 8] = 255
            if where is False:
                continue  # (the bits start all 0: most conditions hold nowhere)
            packed = None if where is True else np.packbits(where, axis=1)
            if packed is not None and not packed.any():
                continue
            if key not in self._bits and not self._everywhere[key]:
                self._bits[key] = np.zeros((n_layers, -(-n_steps // 8)), np.uint8)
            if key in self._bits:
                self._bits[key][rows, block_bytes] = 255 if packed is None else packed
            counts = self._counts[key]
            if packed is None:
                counts[rows] += c1 - c0
                if key in self._first:
                    first = self._first[key]
                    first[rows] = np.where(first[rows] < 0, c0, first[rows])
                    self._last[key][rows] = c1 - 1
                continue
            counts[rows] += np.bitwise_count(packed).sum(axis=1, dtype=np.int64)
            if key in self._first:  # (from the bytes: c0 is a multiple of 8)
                some = packed != 0
                hit = np.flatnonzero(some.any(axis=1))
                first_byte = np.argmax(some[hit], axis=1)
                last_byte = packed.shape[1] - 1 - np.argmax(some[hit, ::-1], axis=1)
                first = c0 + 8 * first_byte + _FIRST_BIT[packed[hit, first_byte]]
                last = c0 + 8 * last_byte + _LAST_BIT[packed[hit, last_byte]]
                if some_rows:
                    hit = np.arange(n_layers)[rows][hit]  # (the run's rows)
                start = self._first[key][hit]
                self._first[key][hit] = np.where(start < 0, first, start)
                self._last[key][hit] = last

    def count(self, name: str, row: int) -> int:
        """The columns of `row` at which the condition `name` holds."""
        return int(self._counts[name][row])

    def first_step(self, name: str, row: int) -> int | None:
        """The first step of `row` at which `name` (of _SPANS) holds; None: none."""
        column = self._first[name][row]
        return int(self.matrix.steps[column]) if column >= 0 else None

    def last(self, name: str, row: int) -> int:
        """The last column of `row` at which `name` (of _SPANS) holds (-1: none)."""
        return int(self._last[name][row])

    def condition(self, name: str, row: int) -> np.ndarray:
        """bool[S]: where the condition `name` (a key of the kept bits) holds in `row`."""
        if self._everywhere[name]:
            return self._every
        if name not in self._bits:
            return self._nowhere
        return np.unpackbits(self._bits[name][row], count=len(self._every)).view(bool)

    def medians(self, rows: list[int]) -> list[float | None]:
        """Each of `rows`' median over the finite ratios of its judged steps (None: none),
        the rows shared by threads (threads.in_threads)."""
        def median(row: int) -> float | None:
            finite, values = self.condition("finite", row), self.matrix.values[row]
            n_finite = np.count_nonzero(finite)
            if not n_finite:
                return None
            return _median(values if n_finite == len(values) else values[finite])

        return list(in_threads(median, rows))

    def rows(self) -> Iterator[tuple[int, dict[str, np.ndarray], dict[str, _Found]]]:
        """(row, {condition: bool[S]}, {reason: its finding}) of every layer, in row order."""
        for row in range(len(self.matrix.tags)):
            c = _RowConditions(self, row)
            found = {}
            for reasons in self.rules.values():
                total = self.count(reasons[0].hit_key, row)
                if total < (self.patience if reasons[0].streak else 1):
                    continue  # (too few hits for a streak)
                hit = c[reasons[0].hit_key]
                if reasons[0].streak:
                    cols = _streak(c[reasons[0].judges_key], hit, self.patience)
                    if cols is None:
                        continue
                    in_a_row = len(cols)
                else:
                    cols = np.flatnonzero(hit)
                    if not len(cols):
                        continue
                    in_a_row = None
                named = reasons[0] if len(reasons) == 1 else next(
                    r for r in reasons if c[r.starts_key][cols[0]])
                found[named.name] = _Found(cols, in_a_row, total)
            yield row, c, found

    def text(self, row: int, reason: str, found: _Found) -> str:
        """The finding's words (reasons.Reason.words)."""
        cols, m = found.cols, self.matrix
        rows = [i for i, g in enumerate(self.groups) if g == self.groups[row]]
        v = m.values[np.ix_(rows, cols)].astype(np.float64)
        judged = m.present[np.ix_(rows, cols)] & ~m.skipped_mask[cols][None, :]
        with np.errstate(invalid="ignore"):
            log_v = positive_log10(v, judged & np.isfinite(v) & (v > 0))
        peer_log, _ = group_medians(log_v)
        at = rows.index(row)
        evidence = table.Evidence(
            since=int(m.steps[cols[0]]), in_a_row=found.in_a_row, total=found.total,
            values=v[at], gaps=log_v[at] - peer_log[at], band=self.band, kind=self.kinds[row],
        )
        return table.BY_NAME[reason].words(evidence)


# A block's parts cut around its skipped steps: at most this many runs of skipped bytes a
# block (more: the block is judged whole).
_MAX_SKIPPED_RUNS = 16


def _parts(skipped_steps: np.ndarray, c0: int, c1: int) -> list[tuple[int, int]]:
    """The columns [c0, c1) of a block (c0 a multiple of 8) as the parts it is judged in:
    the bytes of kept bits (8 columns each) that hold a skipped step apart from the others,
    so that the rest stays a clean block (judged, and where every ratio is logged, finite
    and > 0, each condition decided for the whole part at once); the block whole when it
    has no skipped step, or too many runs of them."""
    skipped = skipped_steps[c0:c1]
    if not skipped.any():
        return [(c0, c1)]
    padded = np.zeros(-(-len(skipped) // 8) * 8, bool)
    padded[:len(skipped)] = skipped
    in_byte = padded.reshape(-1, 8).any(axis=1)
    edges = (np.flatnonzero(in_byte[1:] != in_byte[:-1]) + 1).tolist()
    if len(edges) > 2 * _MAX_SKIPPED_RUNS:
        return [(c0, c1)]
    cuts = [0, *edges, len(in_byte)]
    return [(c0 + 8 * a, min(c0 + 8 * b, c1)) for a, b in zip(cuts, cuts[1:])]


# Of each byte of np.packbits (the first column its high bit), the columns of its first and
# last bit set.
_FIRST_BIT = np.array([8] + [8 - b.bit_length() for b in range(1, 256)])
_LAST_BIT = np.array([-1] + [8 - (b & -b).bit_length() for b in range(1, 256)])


class _RowConditions(dict):
    """{condition: bool[S]} of one row of a _JudgedRun, each unpacked when first read."""

    def __init__(self, run: _JudgedRun, row: int):
        super().__init__()
        self._run, self._row = run, row

    def __missing__(self, name: str) -> np.ndarray:
        value = self[name] = self._run.condition(name, self._row)
        return value


def _first_moves(matrix: Ratios) -> np.ndarray:
    """int[L]: the column at which each layer first had a judged ratio > 0 (the column
    count: never), searched a few columns at a time from the first."""
    n_layers, n_steps = matrix.values.shape
    first = np.full(n_layers, n_steps)
    todo = np.arange(n_layers)
    c0, width = 0, 64
    while len(todo) and c0 < n_steps:
        c1 = min(c0 + width, n_steps)
        with np.errstate(invalid="ignore"):
            moved = (matrix.present[todo, c0:c1] & ~matrix.skipped_mask[None, c0:c1]
                     & (matrix.values[todo, c0:c1] > 0))
        found = moved.any(axis=1)
        first[todo[found]] = c0 + np.argmax(moved[found], axis=1)
        todo, c0, width = todo[~found], c1, width * 2
    return first


def _streak(evaluable: np.ndarray, hit: np.ndarray, patience: int) -> np.ndarray | None:
    """The columns of the first run of at least `patience` hits among the `evaluable`
    columns (non-evaluable columns neither extend nor break it); None when there is none.
    Found from the hits' columns (hits are few): a run is hits at consecutive evaluable
    columns."""
    hits = np.flatnonzero(hit)
    if len(hits) < patience:  # fewer hits than a streak, judged or not
        return None
    if evaluable.all():
        ranks = hits  # (an evaluable column's rank among them: the column)
    else:
        hits = hits[evaluable[hits]]
        if len(hits) < patience:
            return None
        ranks = np.cumsum(evaluable)[hits]  # (their ranks among the evaluable ones, + 1)
    breaks = np.flatnonzero(np.diff(ranks) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(ranks)]])
    long = np.flatnonzero(ends - starts >= patience)
    if not len(long):
        return None
    return hits[starts[long[0]]:ends[long[0]]]


# A layer's median: of more values than this, the two middle ones are first bracketed by two
# values of a sample of about _SAMPLE of them, _MARGIN ranks either side of its middle.
_BRACKET_FROM, _SAMPLE, _MARGIN = 4096, 1024, 64


def _median(values: np.ndarray) -> float:
    """np.median of `values` (finite, at least one) as float64, the two middle values found
    in `values`' own dtype (float32 as the matrix holds them). Of many values, only those
    between two bracketing values of a sample are partitioned (the values below them known
    by their count), unless the middle ones fall outside."""
    n = len(values)
    ks = [(n - 1) // 2, n // 2]
    if n > _BRACKET_FROM:
        sample = np.sort(values[:: n // _SAMPLE])
        m = len(sample) // 2
        low, high = sample[max(m - _MARGIN, 0)], sample[min(m + _MARGIN, len(sample) - 1)]
        below = np.count_nonzero(values < low)
        inside = values[(values >= low) & (values <= high)]
        if below <= ks[0] and ks[1] < below + len(inside):
            values, ks = inside, [ks[0] - below, ks[1] - below]
    middle = np.partition(values, ks)[ks]
    return float(np.mean(middle.astype(np.float64)))

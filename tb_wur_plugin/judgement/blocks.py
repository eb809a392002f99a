"""The conditions of a block of a run's cells (reasons.conditions), computed from the ratios'
own float32 without the float64 facts of cells.cells_of, with exactly the results of cells_of
then reasons.evaluate (tests/judgement/test_blocks.py checks every condition against them).

Why the float32 ratios give the float64 results:
- A float32 ratio x compares to a float64 threshold t as to one float32 bound (`_bound`).
- log10 is strictly increasing on float32 values taken as float64 (neighbouring float32
  values differ by at least 2**-24 relatively, their log10 by ~2.6e-8, far above float64's
  rounding), so ordering log10 ratios is ordering ratios. A cell's peers' median is one of
  three per column, by where its ratio lies against two ratios of its column (cells.py), and
  its gap log10(x) - median is non-decreasing in x: the three medians are means of order
  statistics that only move down from the lowest of the three classes to the highest, and
  float64 rounding keeps that order. So `gap <= y` holds for the positive ratios up to one
  bound per column, `gap >= y` from one bound, `peers_ok` up to one, and `confirmed` below
  one bound or above another: each found once per column (`_largest`, `_smallest`) and then
  one float32 comparison per cell.

A condition reasons.py gives as anything but a fact by its name or a reasons.All of facts and
reasons.Compares, or ratios of another dtype than float32, are computed by cells_of.
"""

from __future__ import annotations

from typing import Callable, Union

import numpy as np

from tb_wur_plugin.judgement import reasons as table
from tb_wur_plugin.judgement.cells import cells_of, order_statistics
from tb_wur_plugin.judgement.threads import computed_once
from tb_wur_plugin.judgement.thresholds import (
    MIN_PEERS,
    OUTLIER_CONFIRM_FACTOR,
    RUN_MOVING_FROM,
)

# A condition on a block: bool[L, C], or True / False where it holds at every / no cell.
Holds = Union[np.ndarray, bool]

_TINY = np.float32(np.finfo(np.float32).smallest_subnormal)
_MAX = np.float32(np.finfo(np.float32).max)
# Facts that hold at positive ratios of intervals of each column (by the peers' medians).
_BY_PEERS = ("peers_ok", "confirmed")
# Facts of a block besides those (cells.Cells' bool fields).
_FACTS = ("present", "skipped", "judged", "finite", "positive", "broken", "infinite",
          "nonfinite", "below", "above", "out_of_band", "run_moving", "moved_before")
# The facts that hold only at logged cells.
_LOGGED_ONLY = frozenset(_FACTS + _BY_PEERS) - {"run_moving", "moved_before"}
# Steps of one float32 ulp that `_largest` / `_smallest` take at most from their estimate.
_MAX_STEPS = 64


def conditions_of(
    values: np.ndarray,
    present: np.ndarray,
    skipped_steps: np.ndarray,
    group_rows: list[list[int]],
    counting_band: tuple[float, float],
    first_move: np.ndarray,
    first_column: int,
    moving: np.ndarray | None,
    conditions: dict[str, table.Condition],
) -> dict[str, Holds]:
    """{key: where the condition holds} of `conditions` on a block of steps of every layer:
    what reasons.evaluate gives on cells_of's cells of the block.

    Args:
        values, present, skipped_steps, group_rows, counting_band, moving: as cells_of.
        first_move: int[L], the column of the run at which each layer first had a judged
            ratio > 0 (the run's column count: never); cells_of's moved_before is
            first_move < the cell's column.
        first_column: the run's column of the block's first.
        conditions: {key: condition}, as reasons.conditions gives them.

    Returns:
        {key: bool[L, C], or True / False where it holds at every / no cell of the block}.
    """
    if not in_float32(values.dtype, conditions):
        columns = np.arange(first_column, first_column + values.shape[1])
        cells = cells_of(values, present, skipped_steps, group_rows, counting_band,
                         columns[None, :] > first_move[:, None], moving)
        return {key: table.evaluate(c, cells) for key, c in conditions.items()}
    block = _Block(values, present, skipped_steps, group_rows, counting_band, first_move,
                   first_column, moving)
    return {key: block.holds(c) for key, c in conditions.items()}


def in_float32(dtype: np.dtype, conditions: dict[str, table.Condition]) -> bool:
    """Whether `conditions_of` computes `conditions` on ratios of `dtype` here (else by
    cells_of: float64 facts of every cell)."""
    return dtype == np.float32 and all(map(_computed_here, conditions.values()))


def only_where_logged(condition: table.Condition) -> bool:
    """Whether `condition` holds at no cell without a logged ratio (it reads a fact that
    implies one: every fact but run_moving and moved_before, or the peers' gap), so that a
    layer logged at no step of a block holds it nowhere there."""
    terms = (condition,) if isinstance(condition, str) else \
        condition.terms if isinstance(condition, table.All) else ()
    return any(
        (isinstance(t, str) and t in _LOGGED_ONLY)
        or (isinstance(t, table.Compare) and t.fact == "gap")
        for t in terms)


def _computed_here(condition: table.Condition) -> bool:
    if isinstance(condition, str):
        return condition in _FACTS or condition in _BY_PEERS
    return isinstance(condition, table.All) and all(
        (isinstance(t, table.Compare) and t.fact in ("values", "gap") and t.op in table.COMPARE_OPS)
        or (isinstance(t, str) and (t in _FACTS or t in _BY_PEERS))
        for t in condition.terms)


def _bound(op: str, threshold: float) -> tuple[str, np.float32]:
    """(op', b): for every float32 x, `x op threshold` (compared as float64) is `x op' b`;
    op' is "<=" or ">="."""
    t = float(threshold)
    with np.errstate(over="ignore"):
        b = np.float32(t)
    if op in ("<", "<="):
        if float(b) > t or (op == "<" and float(b) == t):
            b = np.nextafter(b, np.float32(-np.inf))
        return "<=", b
    if float(b) < t or (op == ">" and float(b) == t):
        b = np.nextafter(b, np.float32(np.inf))
    return ">=", b


def _and(a: Holds, b: Holds) -> Holds:
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    return a & b


def _or(a: Holds, b: Holds) -> Holds:
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return a | b


class _Peers:
    """The peers' medians of one group's cells (cells._medians with MIN_PEERS), per column:
    the ratios bounding the three classes of a cell, and each class's median and the group's
    as float64 log10 (NaN: too few)."""

    def __init__(self, ranked: np.ndarray, count: np.ndarray):
        n_rows = ranked.shape[0]
        lo, hi = np.maximum(count - 2, 0) // 2, np.maximum(count - 1, 0) // 2
        ks = np.stack([(count - 1) // 2, count // 2, lo, lo + 1, hi, hi + 1])
        r_k = order_statistics(ranked, np.minimum(np.maximum(ks, 0), n_rows - 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            logs = np.log10(r_k, dtype=np.float64)
        l_mid, l_mid_next, l_lo, l_lo_next, l_hi, l_hi_next = logs
        self.r_lo, self.r_hi = r_k[2], r_k[4]  # class 0: x <= r_lo, 1: <= r_hi, 2: above
        self.enough = count - 1 >= max(MIN_PEERS, 1)
        nan = np.float64(np.nan)
        self.medians = (  # of classes 0, 1, 2 (non-increasing)
            np.where(self.enough, (l_lo_next + l_hi_next) / 2, nan),
            np.where(self.enough, (l_lo + l_hi_next) / 2, nan),
            np.where(self.enough, (l_lo + l_hi) / 2, nan),
        )
        self.group = np.where(count >= MIN_PEERS + 1, (l_mid + l_mid_next) / 2, nan)


# A union of intervals of float32 ratios per column: [(low[C], high[C])], both inclusive.
Intervals = list[tuple[np.ndarray, np.ndarray]]


class _Block:
    """One block's facts, each computed when first read."""

    def __init__(self, values, present, skipped_steps, group_rows, counting_band, first_move,
                 first_column, moving):
        self.v, self.p, self.skipped_steps = values, present, skipped_steps
        self.band, self.first_move, self.first_column = counting_band, first_move, first_column
        self.moving = moving
        self.any_skipped = bool(skipped_steps.any())
        self.all_present = bool(present.all())
        n_rows, n_cols = values.shape
        # every logged cell judged, finite and > 0 (`low`, `high`: their range), and every
        # cell logged too
        self.logged_clean = self.clean = False
        if values.size and not self.any_skipped:
            if self.all_present:
                self.low, self.high = values.min(), values.max()
            else:
                self.low = values.min(where=present, initial=np.inf)
                self.high = values.max(where=present, initial=-np.inf)
            # (NaN: False; no cell logged: low > high)
            self.logged_clean = bool(0 < self.low <= self.high < np.inf)
            self.clean = self.logged_clean and self.all_present
        everyone = len(group_rows) == 1 and len(group_rows[0]) == n_rows
        # the groups judged against peers: (their rows, None: every row)
        self.groups = [(None if everyone else np.asarray(rows), rows)
                       for rows in group_rows if len(rows) > MIN_PEERS]

    # --- facts ---

    def fact(self, name: str) -> Holds:
        return getattr(self, name)

    @computed_once
    def present(self) -> Holds:
        return True if self.all_present else self.p

    @computed_once
    def skipped(self) -> Holds:
        if not self.any_skipped:
            return False
        return _and(self.present, np.broadcast_to(self.skipped_steps[None, :], self.v.shape))

    @computed_once
    def judged(self) -> Holds:
        if not self.any_skipped:
            return self.present
        return _and(self.present, np.broadcast_to(~self.skipped_steps[None, :], self.v.shape))

    @computed_once
    def finite(self) -> Holds:
        return self.judged if self.logged_clean else _and(self.judged, np.isfinite(self.v))

    @computed_once
    def positive(self) -> Holds:
        return self.finite if self.logged_clean else _and(self.finite, self.v > 0)

    @computed_once
    def broken(self) -> Holds:
        with np.errstate(invalid="ignore"):
            return False if self.logged_clean else _and(self.present, ~(self.v >= 0))

    @computed_once
    def infinite(self) -> Holds:
        return False if self.logged_clean else _and(self.present, self.v == np.inf)

    @computed_once
    def nonfinite(self) -> Holds:
        return False if self.logged_clean else _and(self.present, ~np.isfinite(self.v))

    @computed_once
    def below(self) -> Holds:
        return _and(self.finite, self.compare("<", self.band[0], logged_only=True))

    @computed_once
    def above(self) -> Holds:
        return _and(self.finite, self.compare(">", self.band[1], logged_only=True))

    @computed_once
    def out_of_band(self) -> Holds:
        return _or(self.below, self.above)

    @computed_once
    def moved_before(self) -> Holds:
        n_cols = self.v.shape[1]
        if (self.first_move < self.first_column).all():
            return True
        if (self.first_move >= self.first_column + n_cols - 1).all():
            return False
        columns = np.arange(self.first_column, self.first_column + n_cols)
        return columns[None, :] > self.first_move[:, None]

    @computed_once
    def run_moving(self) -> Holds:
        moving = False if self.moving is None else self.moving
        n_rows, n_cols = self.v.shape
        # a column where a group's lo-th of 3 or more positive ratios reaches RUN_MOVING_FROM
        # has 2 or more that reach it: another layer's, for every layer
        _, least = _bound(">=", RUN_MOVING_FROM)
        covered = np.zeros(n_cols, bool)
        for _, peers in self.peers:
            covered |= peers.enough & (peers.r_lo >= least)
        if covered.all():
            return True
        reaches = _and(self.finite, self.compare(">=", RUN_MOVING_FROM, logged_only=True))
        if reaches is False:
            return moving
        if reaches is True:
            reaches = np.ones(self.v.shape, bool)
        others = (reaches.sum(axis=0)[None, :] - reaches) > 0
        return _or(others, moving)

    def compare(self, op: str, threshold: float, logged_only: bool = False) -> Holds:
        """`ratio op threshold` at each cell, as float64 compares (NaN: False); with
        `logged_only`, at each logged cell (what it gives elsewhere is not to be read)."""
        op, b = _bound(op, threshold)
        if self.clean or (logged_only and self.logged_clean):  # (the cells' range decides)
            if (self.high <= b) if op == "<=" else (self.low >= b):
                return True
            if (self.low > b) if op == "<=" else (self.high < b):
                return False
        return self.v <= b if op == "<=" else self.v >= b

    # --- the facts by the peers' medians ---

    @computed_once
    def peers(self) -> list[tuple[np.ndarray | None, _Peers]]:
        """(rows, None: all; their _Peers) of each group judged against peers."""
        out = []
        for rows, _ in self.groups:
            v = self.v if rows is None else self.v[rows]
            positive = self.positive if rows is None or isinstance(self.positive, bool) \
                else self.positive[rows]
            if positive is True:
                ranked, count = v, np.full(v.shape[1], v.shape[0])
            else:
                positive = np.zeros(v.shape, bool) if positive is False else positive
                ranked, count = np.where(positive, v, np.float32(np.nan)), positive.sum(axis=0)
            out.append((rows, _Peers(ranked, count)))
        return out

    def holds(self, condition: table.Condition) -> Holds:
        """Where `condition` (a fact by name, or a reasons.All) holds."""
        terms = (condition,) if isinstance(condition, str) else condition.terms
        by_peers = [t for t in terms if t in _BY_PEERS
                    or (isinstance(t, table.Compare) and t.fact == "gap")]
        logged_only = only_where_logged(condition)  # (then so is each term's use here)
        holds: Holds = True
        for t in terms:
            if isinstance(t, table.Compare) and t.fact == "values" and not by_peers:
                holds = _and(holds, self.compare(t.op, t.threshold, logged_only))
            elif isinstance(t, str) and t not in _BY_PEERS:
                holds = _and(holds, self.fact(t))
        if not by_peers:
            return holds
        # the rest holds at the positive ratios of intervals per column and group
        rays = [t for t in terms if isinstance(t, table.Compare) and t.fact == "values"]
        of_peers: Holds = False
        for rows, peers in self.peers:
            n = len(peers.r_lo)
            intervals: Intervals = [(np.full(n, _TINY), np.full(n, _MAX))]
            for t in by_peers:
                intervals = _intersect(intervals, self._intervals(t, peers))
            for t in rays:
                op, b = _bound(t.op, t.threshold)
                ray = (np.full(n, _TINY), np.full(n, b)) if op == "<=" \
                    else (np.full(n, b), np.full(n, _MAX))
                intervals = _intersect(intervals, [ray])
            inside = self._inside(self.v if rows is None else self.v[rows], intervals)
            if rows is None:
                of_peers = inside
            elif inside is not False:
                if of_peers is False:
                    of_peers = np.zeros(self.v.shape, bool)
                of_peers[rows] = inside
        return _and(_and(holds, self.positive), of_peers)

    def _intervals(self, term: Union[str, table.Compare], peers: _Peers) -> Intervals:
        """Where `term` holds at a group's positive ratios, per column."""
        n = len(peers.r_lo)
        if term == "peers_ok":
            ok = [m >= np.log10(RUN_MOVING_FROM) for m in peers.medians]  # (NaN: False)
            top = np.where(ok[2], _MAX, np.where(ok[1], peers.r_hi, np.where(ok[0], peers.r_lo,
                                                                                np.float32(0))))
            return [(np.full(n, _TINY), top.astype(np.float32))]
        if term == "confirmed":  # |log10(x) - the group's| >= log10(OUTLIER_CONFIRM_FACTOR)
            factor = np.log10(OUTLIER_CONFIRM_FACTOR)
            return [(np.full(n, _TINY), _largest(peers.group, np.less_equal, -factor)),
                    (_smallest(peers.group, np.greater_equal, factor), np.full(n, _MAX))]
        op = table.COMPARE_OPS[term.op]
        if term.op in ("<", "<="):  # below one bound: the highest class that has any
            t0, t1, t2 = (_largest(m, op, term.threshold) for m in peers.medians)
            top = np.where(t2 > peers.r_hi, t2, np.where(
                t1 > peers.r_lo, np.minimum(t1, peers.r_hi), np.minimum(t0, peers.r_lo)))
            return [(np.full(n, _TINY), np.where(peers.enough, top, np.float32(0)))]
        s0, s1, s2 = (_smallest(m, op, term.threshold) for m in peers.medians)
        up = np.float32(np.inf)
        bottom = np.where(s0 <= peers.r_lo, s0, np.where(
            s1 <= peers.r_hi, np.maximum(s1, np.nextafter(peers.r_lo, up)),
            np.maximum(s2, np.nextafter(peers.r_hi, up))))
        return [(np.where(peers.enough, bottom, up), np.full(n, _MAX))]

    def _inside(self, v: np.ndarray, intervals: Intervals) -> Holds:
        """Whether each ratio of `v` [R, C] lies in one of the columns' intervals (at the
        logged cells: `holds` reads it where the ratio is positive only)."""
        out: Holds = False
        for low, high in intervals:
            if not (low <= high).any():
                continue
            part: Holds = True
            if not (self.logged_clean and (low <= self.low).all()):
                part = v >= low[None, :]
            if not (self.logged_clean and (high >= self.high).all()):
                part = _and(part, v <= high[None, :])
            out = _or(out, part)
        return out


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    out = []
    for low_a, high_a in a:
        for low_b, high_b in b:
            low, high = np.maximum(low_a, low_b), np.minimum(high_a, high_b)
            if (low <= high).any():
                out.append((low, high))
    return out


def _largest(offset: np.ndarray, op: Callable, y: float) -> np.ndarray:
    """float32[C]: the largest float32 x in [_TINY, _MAX] with op(log10(x) - offset, y)
    (float64, as cells_of computes it), which holds up to a bound; 0 where it holds at none."""
    return _step(offset, op, y, down=True)


def _smallest(offset: np.ndarray, op: Callable, y: float) -> np.ndarray:
    """float32[C]: the smallest float32 x in [_TINY, _MAX] with op(log10(x) - offset, y),
    which holds from a bound; +inf where it holds at none."""
    return _step(offset, op, y, down=False)


def _step(offset: np.ndarray, op: Callable, y: float, down: bool) -> np.ndarray:
    def holds(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):  # (log10(0): the end's step)
            return op(np.log10(x, dtype=np.float64) - offset, y)

    with np.errstate(over="ignore", invalid="ignore"):
        x = np.clip(10.0 ** (y + offset), _TINY, _MAX).astype(np.float32)  # (NaN stays)
    known = ~np.isnan(offset)
    x = np.where(known, x, _TINY)
    # inward: towards where it holds; outward: the other way
    inward, outward = (np.float32(0), np.float32(np.inf)) if down \
        else (np.float32(np.inf), np.float32(0))
    end_in, end_out = (_TINY, _MAX) if down else (_MAX, _TINY)
    for _ in range(_MAX_STEPS):
        here = holds(x)
        go_in = ~here & known & (x != end_in)
        further = np.nextafter(x, outward)
        go_out = here & (x != end_out) & holds(further)  # (NaN offset: never here)
        if not (go_in | go_out).any():
            break
        x = np.where(go_in, np.nextafter(x, inward), np.where(go_out, further, x))
    else:
        raise RuntimeError("a ratio bound did not settle")
    return np.where(known & holds(x), x, inward)

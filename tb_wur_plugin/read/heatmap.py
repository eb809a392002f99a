"""The heatmap's numbers: a run's ratios as a layers × steps matrix, binned into columns
and reduced. Pure numpy, no TensorBoard. (The judgement is in tb_wur_plugin/judgement/, the
wire encoding of the cells in web/heatmap_wire.py.) A large matrix is reduced in blocks of
rows, by two threads (judgement.threads).

Columns cover a step range [start, end] in equal ranges of `w` steps (the last one up to
`end`), the same for every run shown, without gaps or overlap. `w` is the largest common
divisor `g` of the spacings of the logged steps inside the range (of all runs together; the
whole range with fewer than two of them) when the range fits in `max_columns` columns of `g`
steps: one column per logged step for runs logged every `g` steps, one column per step when
runs logged every 2 and every 5 steps are shown together. Otherwise `w` is the smallest
multiple of `g` that makes at most `max_columns` columns (bins).

A column in which a layer logged nothing is missing for that layer; `hold_gaps` then fills
it, when the layer logged a step before and after it, with the value of the layer's last
logged step before the column (held, not measured: the tab draws it apart).

Reductions of the ratios r logged in one column (NaN, or a negative value, in the column
makes mean_log10, max and min NaN: a broken step is never averaged away):
- ``mean_log10``: 10 ** mean(log10 r) over the finite positive r; if there are none, +inf if
  some r is +inf, else 0.
- ``max`` / ``min``: the largest / smallest r (+inf and 0 included).
- ``last``: r at the column's last logged step, whatever it is.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_wur_plugin.judgement import threads
from tb_wur_plugin.judgement.threads import computed_once, in_threads

REDUCTIONS = ("mean_log10", "max", "min", "last")

# Classes of a cell of a RunMatrix.
MISSING, POSITIVE, ZERO, INF, BROKEN = range(5)


@dataclasses.dataclass(frozen=True)
class RunMatrix:
    """One run's ratios: `values[i, j]` is layer `tags[i]` at `steps[j]` where `present`."""

    tags: tuple[str, ...]
    steps: np.ndarray  # int64[S], sorted, distinct
    # float32[L, S] (the precision every writer stores), NaN where not present
    values: np.ndarray
    present: np.ndarray  # bool[L, S]
    # bool[S]: steps the optimizer skipped (the skipped-step marker was 1); None: none
    skipped: np.ndarray | None = None

    @classmethod
    def from_series(
        cls, series: list[tuple[str, np.ndarray, np.ndarray]], skipped_steps=()
    ) -> "RunMatrix":
        """The matrix of `series`.

        Args:
            series: [(tag, steps, values)] in row order; a series' steps (int) distinct.
            skipped_steps: the steps marked skipped; those where no ratio was logged are
                dropped.

        Returns:
            The matrix, its steps the union of the series' steps.
        """
        if not series:
            return cls(
                (), np.zeros(0, np.int64), np.zeros((0, 0), np.float32), np.zeros((0, 0), bool)
            )
        # the layers of a packed series share one steps array: each array is merged once
        step_arrays = {id(s): s for _, s, _ in series}
        steps = np.unique(np.concatenate(list(step_arrays.values())).astype(np.int64))
        values = np.full((len(series), len(steps)), np.nan, np.float32)
        present = np.zeros((len(series), len(steps)), bool)
        columns_of: dict[int, np.ndarray | slice] = {}
        for row, (_, tag_steps, tag_values) in enumerate(series):
            columns = columns_of.get(id(tag_steps))
            if columns is None:
                columns = (
                    slice(None) if len(tag_steps) == len(steps)
                    else np.searchsorted(steps, tag_steps)
                )
                columns_of[id(tag_steps)] = columns
            values[row, columns] = tag_values
            present[row, columns] = True
        skipped = np.isin(steps, np.asarray(skipped_steps, np.int64))
        return cls(tuple(t for t, _, _ in series), steps, values, present, skipped)

    @property
    def skipped_mask(self) -> np.ndarray:
        """bool[S]: `skipped`, all False when None."""
        return self.skipped if self.skipped is not None else np.zeros(len(self.steps), bool)

    @computed_once
    def classes(self) -> np.ndarray:
        """int8[L, S]: MISSING, POSITIVE (finite > 0), ZERO, INF or BROKEN (NaN, negative);
        computed on first use, once (two runs' at once)."""
        classes = np.empty(self.values.shape, np.int8)
        for rows in row_blocks(self.values.shape):
            classes[rows] = cell_classes(self.values[rows], self.present[rows])
        return classes

    @property
    def nbytes(self) -> int:
        """Memory held, counting the derived classes (computed on first use)."""
        return self.steps.nbytes + self.values.nbytes + self.present.nbytes * 2 + (
            self.skipped_mask.nbytes)


def cell_classes(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """int8 of the same shape: the class of each cell (MISSING, POSITIVE, ...)."""
    with np.errstate(invalid="ignore"):
        return np.select(
            [~present, (values > 0) & (values < np.inf), values == 0, values == np.inf],
            [MISSING, POSITIVE, ZERO, INF],
            BROKEN,
        ).astype(np.int8)


# Cells a block of rows holds while a large matrix is reduced: bounds the temporaries (a
# block's float64 logs: 8 MB); fewer, larger blocks cost fewer numpy calls
# (benchmarks/RESULTS.md).
BLOCK_CELLS = 1 << 20


# Row blocks a thread reduces in one go (reduce_columns): at most this many, and few enough
# that each thread has _ITEMS_PER_THREAD items (a narrow range has few blocks).
_BLOCKS_PER_ITEM = 16
_ITEMS_PER_THREAD = 2


def row_blocks(shape: tuple[int, ...], least: int = 1):
    """Slices of rows of a [L, S] array, each of about BLOCK_CELLS cells (one row at least),
    or fewer rows so that there are `least` blocks where there are that many rows."""
    n_rows, n_cols = shape[0], shape[1] if len(shape) > 1 else 1
    per_block = max(1, min(BLOCK_CELLS // max(n_cols, 1), -(-n_rows // least)))
    return [slice(r, min(r + per_block, n_rows)) for r in range(0, n_rows, per_block)]


@dataclasses.dataclass(frozen=True)
class Columns:
    """Column k covers steps [start[k], start[k + 1] − 1] (the last one up to `end`)."""

    start: np.ndarray  # int64[C]
    end: int
    first: np.ndarray  # float64[C]: first logged step in the column, NaN if none
    last: np.ndarray  # float64[C]
    count: np.ndarray  # uint32[C]: logged steps in the column


def column_width(steps: np.ndarray, start: int, end: int, max_columns: int) -> int:
    """The steps a column of [start, end] covers (the module docstring says how).

    Args:
        steps: the logged steps, int64, sorted and distinct.
        start: the first step of the range.
        end: the last step of the range, not before `start`.
        max_columns: at most this many columns, at least 1.

    Returns:
        w ≥ 1 such that ceil((end − start + 1) / w) ≤ max_columns.
    """
    span = end - start + 1  # a Python int: the range may be wider than int64
    inside = steps[(steps >= start) & (steps <= end)]
    grid = int(np.gcd.reduce(np.diff(inside))) if len(inside) >= 2 else span
    grid = max(1, min(grid, span))
    if -(-span // grid) <= max_columns:
        return grid
    per_column = -(-span // max_columns)
    return grid * -(-per_column // grid)


def make_columns(steps: np.ndarray, start: int, end: int, max_columns: int) -> Columns:
    """The columns over [start, end]: equal ranges of `column_width` steps.

    Args:
        steps: the logged steps, int64, sorted and distinct.
        start: the first step of the range.
        end: the last step of the range, not before `start`.
        max_columns: at most this many columns, at least 1.

    Returns:
        Columns starting at start, start + w, start + 2w, ... (w = column_width), the last
        one up to `end`; at most `max_columns` of them.
    """
    inside = steps[(steps >= start) & (steps <= end)]
    width = column_width(steps, start, end, max_columns)
    bounds = np.arange(start, end + 1, width, dtype=np.int64)
    limits = np.searchsorted(inside, np.append(bounds, end + 1))
    count = np.diff(limits).astype(np.uint32)
    filled = count > 0
    first = np.full(len(bounds), np.nan)
    last = np.full(len(bounds), np.nan)
    first[filled] = inside[limits[:-1][filled]]
    last[filled] = inside[limits[1:][filled] - 1]
    return Columns(bounds, end, first, last, count)


def skipped_per_column(matrix: RunMatrix, columns: Columns) -> np.ndarray:
    """How many of each column's logged steps the optimizer skipped.

    Args:
        matrix: the run's ratios.
        columns: columns made by `make_columns`.

    Returns:
        uint32[C].
    """
    skipped = matrix.steps[matrix.skipped_mask]
    limits = np.searchsorted(skipped, np.append(columns.start, columns.end + 1))
    return np.diff(limits).astype(np.uint32)


def reduce_columns(
    matrix: RunMatrix, columns: Columns, reduction: str
) -> tuple[np.ndarray, np.ndarray]:
    """The ratios of `matrix` reduced into `columns` (the module docstring says how).

    Args:
        matrix: the run's ratios.
        columns: columns made by `make_columns`.
        reduction: one of REDUCTIONS.

    Returns:
        (values float64[L, C], missing bool[L, C]): missing where the layer logged nothing
        in the column (its value NaN).

    Raises:
        ValueError: an unknown `reduction`.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {REDUCTIONS}")
    n_layers, n_columns = len(matrix.tags), len(columns.start)
    values = np.full((n_layers, n_columns), np.nan)
    missing = np.ones((n_layers, n_columns), bool)
    spans = _Spans.of(matrix.steps, columns)
    if spans.stop == spans.base:  # no step in the range: every cell missing
        return values, missing
    classes = matrix.classes  # (computed once, before the threads read it)

    def reduce_blocks(blocks: list[slice]) -> None:
        for rows in blocks:
            values[rows], missing[rows] = _reduce_rows(
                matrix.values[rows], matrix.present[rows], classes[rows], spans, reduction)

    # blocks of the range's cells; each thread's share of the rows in a few items (the Python
    # between numpy's loops holds the GIL: many small items would take turns at it)
    items = threads.THREADS * _ITEMS_PER_THREAD
    blocks = row_blocks((n_layers, spans.stop - spans.base), items)
    per_item = max(1, min(_BLOCKS_PER_ITEM, len(blocks) // items))
    for _ in in_threads(reduce_blocks, [blocks[i:i + per_item]
                                        for i in range(0, len(blocks), per_item)]):
        pass
    return values, missing


@dataclasses.dataclass(frozen=True)
class _Spans:
    """Where each column's steps lie in a matrix's steps: [lo[k], hi[k]); the reduction
    reads [base, stop) only, and `starts` (relative to base) of its first `reduced` columns
    (those that start before the range ends)."""

    lo: np.ndarray
    hi: np.ndarray
    nonempty: np.ndarray
    base: int
    stop: int
    reduced: int
    starts: np.ndarray

    @classmethod
    def of(cls, steps: np.ndarray, columns: Columns) -> "_Spans":
        edges = np.searchsorted(steps, np.append(columns.start, columns.end + 1))
        lo, hi = edges[:-1], edges[1:]
        base, stop = int(lo[0]), int(hi[-1])
        reduced = int(np.searchsorted(lo, stop))
        return cls(lo, hi, hi > lo, base, stop, reduced, lo[:reduced] - base)


def _reduce_rows(
    v: np.ndarray, present: np.ndarray, classes: np.ndarray, spans: _Spans, reduction: str
) -> tuple[np.ndarray, np.ndarray]:
    """`reduce_columns` of some rows of a matrix (their values, present and classes)."""
    n_layers, n_columns = v.shape[0], len(spans.lo)
    lo, hi, nonempty = spans.lo, spans.hi, spans.nonempty
    base, stop, reduced, starts = spans.base, spans.stop, spans.reduced, spans.starts
    # only the steps of the range are read: [base, stop)
    v, present, classes = v[:, base:stop], present[:, base:stop], classes[:, base:stop]

    def per_column(array: np.ndarray, ufunc: np.ufunc, neutral, dtype=None) -> np.ndarray:
        """ufunc over each column's steps [lo, hi) of `array` ([L, stop - base]); `neutral`
        if none."""
        out = np.full((n_layers, n_columns), neutral, dtype or array.dtype)
        out[:, :reduced] = ufunc.reduceat(array, starts, axis=1, dtype=dtype)
        out[:, ~nonempty] = neutral
        return out

    # every cell of the range positive (the usual run): each column's steps are its count
    all_positive = not (classes != POSITIVE).any()
    if all_positive:
        none = np.zeros((n_layers, n_columns), np.int32)
        count = {POSITIVE: np.broadcast_to((hi - lo).astype(np.int32), none.shape),
                 ZERO: none, INF: none, BROKEN: none}
    else:
        count = _class_counts(classes, per_column, int((hi - lo).max(initial=0)))
    missing = (count[POSITIVE] + count[ZERO] + count[INF] + count[BROKEN]) == 0
    if reduction == "last":
        index = np.where(present, np.arange(base, stop), -1)
        last_index = np.maximum.accumulate(index, axis=1)[:, np.maximum(hi - 1 - base, 0)]
        out = np.take_along_axis(
            v, np.maximum(last_index - base, 0), axis=1).astype(np.float64)
        return np.where(missing, np.nan, out), missing
    positive = count[POSITIVE] > 0
    is_positive = True if all_positive else classes == POSITIVE
    if reduction == "mean_log10":
        # log10 in float64 of the positive ratios, 0 elsewhere
        if all_positive:
            logs = np.log10(v, dtype=np.float64)
        else:
            logs = np.zeros(v.shape)
            np.log10(v, out=logs, where=is_positive, dtype=np.float64)
        logs = per_column(logs, np.add, 0.0)
        out = np.where(
            positive,
            10.0 ** (logs / np.maximum(count[POSITIVE], 1)),
            np.where(count[INF] > 0, np.inf, 0.0),
        )
    elif reduction == "max":
        largest = per_column(np.where(is_positive, v, np.float32(0)), np.maximum, 0.0)
        out = np.where(count[INF] > 0, np.inf, largest.astype(np.float64))
    else:  # min
        smallest = per_column(np.where(is_positive, v, np.float32(np.inf)), np.minimum, np.inf)
        out = np.where(count[ZERO] > 0, 0.0, smallest.astype(np.float64))
    out = np.where(count[BROKEN] > 0, np.nan, out)
    return np.where(missing, np.nan, out), missing


# A cell's class as one int64 with a 16-bit field per class counted: one sum counts them all.
_CLASS_FIELDS = np.zeros(5, np.int64)
_CLASS_FIELDS[[POSITIVE, ZERO, INF, BROKEN]] = [1, 1 << 16, 1 << 32, 1 << 48]


def _class_counts(classes: np.ndarray, per_column, most_steps: int) -> dict[int, np.ndarray]:
    """{class: int32[L, C]} of POSITIVE, ZERO, INF, BROKEN: how many of each a column holds
    (`per_column` sums over the columns' steps; `most_steps`: the most steps of a column)."""
    if most_steps >= 1 << 16:  # a field could overflow: one sum per class
        return {c: per_column(classes == c, np.add, 0, np.int32) for c in (POSITIVE, ZERO, INF, BROKEN)}
    sums = per_column(_CLASS_FIELDS[classes], np.add, 0, np.int64)
    return {
        c: ((sums >> (16 * field)) & 0xFFFF).astype(np.int32)
        for field, c in enumerate((POSITIVE, ZERO, INF, BROKEN))
    }


@dataclasses.dataclass(frozen=True)
class Held:
    """Runs of held cells: layer `rows[i]`, columns `first[i]` .. `first[i] + count[i] − 1`,
    all showing the ratio the layer logged at step `step[i]` (before those columns)."""

    rows: np.ndarray  # int64[n]
    first: np.ndarray  # int64[n]
    count: np.ndarray  # int64[n]
    step: np.ndarray  # int64[n]

    @classmethod
    def none(cls) -> "Held":
        empty = np.zeros(0, np.int64)
        return cls(empty, empty, empty, empty)

    @property
    def cells(self) -> int:
        return int(self.count.sum())


def hold_gaps(
    matrix: RunMatrix, columns: Columns, values: np.ndarray, missing: np.ndarray
) -> tuple[np.ndarray, np.ndarray, Held]:
    """Fills the missing cells of `reduce_columns` that lie inside their layer's logged range.

    A layer logged less often than the columns are wide leaves columns without a step of its
    own between two that have one: such a cell takes the ratio of the layer's last logged
    step before the column (whatever it is: 0, +inf, NaN included), held until the column of
    the layer's next logged step. Cells before a layer's first logged step or after its last
    stay missing.

    Args:
        matrix: the run's ratios.
        columns: columns made by `make_columns`.
        values, missing: what `reduce_columns` returned for them.

    Returns:
        (values, missing, held): the cells with the held ones filled (no longer missing), and
        where they are.
    """
    n_steps = len(matrix.steps)
    if not n_steps or not missing.any():
        return values, missing, Held.none()
    lo = np.searchsorted(matrix.steps, columns.start)  # first step index in each column
    hi = np.searchsorted(matrix.steps, np.append(columns.start[1:], columns.end + 1))
    # of the layers with a missing cell (the others hold none): the last logged index before
    # each column (-1: none), and the layer's last logged index
    source = np.full(missing.shape, -1, np.int64)  # [L, C]
    layer_last = np.full(len(matrix.tags), -1, np.int64)
    for row in np.flatnonzero(missing.any(axis=1)):
        logged = np.flatnonzero(matrix.present[row])
        if len(logged):
            before = np.searchsorted(logged, lo) - 1  # the last logged index < lo
            source[row] = np.where(before >= 0, logged[np.maximum(before, 0)], -1)
            layer_last[row] = logged[-1]
    held = missing & (source >= 0) & (layer_last[:, None] >= hi[None, :])
    if not held.any():
        return values, missing, Held.none()
    rows, cols = np.nonzero(held)  # row-major: by row, then column
    src = source[rows, cols]
    values = values.copy()
    values[rows, cols] = matrix.values[rows, src]
    missing = missing & ~held
    new = np.ones(len(rows), bool)
    new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1] + 1) | (src[1:] != src[:-1])
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, len(rows)))
    held_runs = Held(
        rows[starts].astype(np.int64),
        cols[starts].astype(np.int64),
        count.astype(np.int64),
        matrix.steps[src[starts]].astype(np.int64),
    )
    return values, missing, held_runs

"""The facts of each cell (layer × logged step) that the reasons' conditions read
(reasons.py), computed for a block of steps at once. Every fact of a cell depends on its own
step only (the peers are the other layers at that step), and on what the layer did at earlier
steps only through `moved_before` and its group: so a block of one step, as the online
judgement (online.py) computes it, gives what the same step gives inside a whole run.

Peers: a layer's group is its kind (`metadata.layer_kind`) and whether it grows from zero
(the first update that moved it found it at exactly 0: +inf; its ratio is then 1/k at its
k-th update whatever its learning rate); a layer joins that group at the step it first moves,
before which it has no positive ratio and so is no one's peer either way.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_wur_plugin.judgement.thresholds import (
    MIN_PEERS,
    OUTLIER_CONFIRM_FACTOR,
    RUN_MOVING_FROM,
)


@dataclasses.dataclass(frozen=True)
class Cells:
    """The facts of a block of cells, each an array [L, C] (layers × the block's steps)."""

    values: np.ndarray  # float64: the ratios, NaN where not present
    present: np.ndarray  # a ratio was logged
    skipped: np.ndarray  # logged at a step the optimizer skipped (every ratio 0 by design)
    judged: np.ndarray  # logged, not skipped
    finite: np.ndarray  # judged, finite
    positive: np.ndarray  # judged, finite, > 0
    broken: np.ndarray  # logged, NaN or negative (no ratio)
    infinite: np.ndarray  # logged, +inf
    nonfinite: np.ndarray  # logged, NaN or ±inf
    below: np.ndarray  # finite, below the counting band's low edge
    above: np.ndarray  # finite, above its high edge
    out_of_band: np.ndarray  # below or above
    run_moving: np.ndarray  # another layer (or the `moving` evidence) moves at this step
    moved_before: np.ndarray  # the layer had a judged ratio > 0 at an earlier step
    peers_ok: np.ndarray  # positive, and the peers' median is known and moving
    gap: np.ndarray  # float64: log10 of the ratio over its peers' median (NaN: none)
    confirmed: np.ndarray  # also OUTLIER_CONFIRM_FACTOR times from its group's median


def cells_of(
    values: np.ndarray,
    present: np.ndarray,
    skipped_steps: np.ndarray,
    group_rows: list[list[int]],
    counting_band: tuple[float, float],
    moved_before: np.ndarray,
    moving: np.ndarray | None = None,
) -> Cells:
    """The facts of a block of steps of every layer.

    Args:
        values: [L, C] the ratios (any float dtype; judged as float64).
        present: bool[L, C]: a ratio was logged.
        skipped_steps: bool[C]: the steps the optimizer skipped.
        group_rows: the rows of each group of peers (module docstring); every row whose
            ratio is positive somewhere in the block is in one.
        counting_band: (low, high) that `below` and `above` count against.
        moved_before: bool[L, C]: the layer had a judged ratio > 0 at an earlier step.
        moving: bool[L, C], more evidence that the run moves (`others_moving`); None: none.

    Returns:
        The block's Cells.
    """
    v = values.astype(np.float64)
    p = present
    skipped = p & skipped_steps[None, :]
    judged = p & ~skipped
    with np.errstate(invalid="ignore"):
        # (against 0 and inf, in the ratios' own dtype: both exact in any float)
        is_finite = np.isfinite(values)
        finite = judged & is_finite
        positive = finite & (values > 0)
        broken = p & ~(values >= 0)  # NaN or negative
        infinite = p & (values == np.inf)
        nonfinite = p & ~is_finite
        below = finite & (v < counting_band[0])
        above = finite & (v > counting_band[1])
        # the run moves at a step when another layer's finite ratio is at least
        # RUN_MOVING_FROM
        run_moving = others_at_least(finite & (v >= RUN_MOVING_FROM))
    log_v = positive_log10(v, positive)
    if moving is not None:
        run_moving = run_moving | moving
    # the peers' median of log10 ratio, per layer and step (NaN: too few peers), and the
    # group's median, the layer included (NaN: too few layers); ranked by the ratios as
    # given (log10 keeps their order)
    ranked = np.where(positive, values, np.nan)
    if len(group_rows) == 1 and np.array_equal(group_rows[0], np.arange(len(v))):  # every row
        peer_log, group_log = group_medians(log_v, ranked)
    else:
        peer_log = np.full(v.shape, np.nan)
        group_log = np.full(v.shape, np.nan)
        for rows in group_rows:
            if len(rows) > MIN_PEERS:  # (fewer: neither median, NaN)
                peer_log[rows], group_log[rows] = group_medians(log_v[rows], ranked[rows])
    with np.errstate(invalid="ignore"):
        peers_ok = positive & (peer_log >= np.log10(RUN_MOVING_FROM))
        # the gap to the group's median confirms it: among a few layers, one odd layer drags
        # the others' leave-one-out median toward itself and makes them look odd too
        confirmed = np.abs(log_v - group_log) >= np.log10(OUTLIER_CONFIRM_FACTOR)
    return Cells(
        values=v, present=p, skipped=skipped, judged=judged, finite=finite, positive=positive,
        broken=broken, infinite=infinite, nonfinite=nonfinite, below=below, above=above,
        out_of_band=below | above,
        run_moving=run_moving, moved_before=moved_before, peers_ok=peers_ok,
        gap=log_v - peer_log, confirmed=confirmed,
    )


def positive_log10(values: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """float64 of the same shape: log10 of `values` where `positive`, NaN elsewhere."""
    out = np.full(values.shape, np.nan)
    return np.log10(values, out=out, where=positive, dtype=np.float64)


def group_medians(
    log_v: np.ndarray, ratios: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(the peers' median, NaN with fewer than MIN_PEERS peers; the group's median, the layer
    included, NaN with fewer than MIN_PEERS + 1 layers) of each cell of `log_v` [R, C], the
    rows of one group, over the non-NaN values of its column.

    Args:
        log_v: float64[R, C], log10 of positive ratios, NaN elsewhere.
        ratios: [R, C] the ratios `log_v` is the float64 log10 of, NaN where `log_v` is (any
            float dtype: the columns are sorted in it, cheaper in float32); None: `log_v`'s
            columns are sorted.
    """
    return _medians(log_v, MIN_PEERS, MIN_PEERS + 1, ratios)


def others_at_least(reaches: np.ndarray) -> np.ndarray:
    """bool[L, S]: at each (i, j), whether `reaches` (bool[L, S]) holds in column j at a row
    other than i."""
    return (reaches.sum(axis=0)[None, :] - reaches) > 0


def _medians(
    values: np.ndarray, min_others: int, min_layers: int, ratios: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(the leave-one-out medians: at each (i, j), the median of column j's non-NaN values in
    the rows other than i, NaN where fewer than `min_others` of them; the group's medians: of
    column j's non-NaN values, row i included, NaN where fewer than `min_layers`) of
    `values` [L, S], from one sort of each column (of `ratios`, whose float64 log10 `values`
    is, when given: log10 keeps their order, so the k-th smallest value is the log10 of the
    k-th smallest ratio).

    With a column's n non-NaN values sorted, r_0 <= ... <= r_{n-1}, the k-th smallest of
    the others of a cell holding v is r_k when v > r_k, else r_{k+1} (removing one copy of
    v); a NaN cell's others are all n. A median is the mean of the two middle values: of a
    cell's others, by where v lies against the two middle ones, one of three per column.
    The arrays returned may be read-only broadcasts."""
    n_rows, n_cols = values.shape
    least = max(min_others, 1)
    if n_cols == 0 or (n_rows < min_layers and n_rows - 1 < least):
        # too few rows for either median anywhere (a column's count is at most n_rows)
        return np.full(values.shape, np.nan), np.full(values.shape, np.nan)
    if n_cols == 1:
        return _column_medians(values, least, min_layers, ratios)
    valid = ~np.isnan(values)
    count = valid.sum(axis=0)
    # of all n, the two middle ones; of a cell's others, the (lo)-th and (hi)-th smallest
    lo, hi = np.maximum(count - 2, 0) // 2, np.maximum(count - 1, 0) // 2
    ks = np.stack([(count - 1) // 2, count // 2, lo, lo + 1, hi, hi + 1])
    # [6, S]: r_k of each column, of its values (or ratios) ascending, NaN last
    r_k = order_statistics(values if ratios is None else ratios,
                           np.minimum(np.maximum(ks, 0), n_rows - 1))
    if ratios is not None:
        r_k = np.log10(r_k, dtype=np.float64)
    r_mid, r_mid_next, r_lo, r_lo_next, r_hi, r_hi_next = r_k
    middle = (r_mid + r_mid_next) / 2  # of all n
    group = np.broadcast_to(np.where(count >= min_layers, middle, np.nan), values.shape)
    if n_rows < 2:
        return np.full(values.shape, np.nan), group
    enough = count - 1 >= least  # a non-NaN cell's others
    above = np.where(enough, (r_lo + r_hi) / 2, np.nan)  # v > r_hi
    between = np.where(enough, (r_lo + r_hi_next) / 2, np.nan)  # r_lo < v <= r_hi
    below = np.where(enough, (r_lo_next + r_hi_next) / 2, np.nan)  # v <= r_lo
    of_nan = np.where(count >= least, middle, np.nan)  # a NaN cell: all n are its others
    peer = np.where(values > r_hi, above,
                    np.where(values > r_lo, between, np.where(valid, below, of_nan)))
    return peer, group


def _column_medians(
    values: np.ndarray, least: int, min_layers: int, ratios: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """`_medians` of a block of one column (a step judged while training, online.py): the
    same numbers by the same float64 operations, the column's order statistics taken as
    Python floats (a handful of array operations instead of a few dozen)."""
    n_rows = values.shape[0]
    valid = ~np.isnan(values)
    count = int(np.count_nonzero(valid))
    lo, hi = max(count - 2, 0) // 2, max(count - 1, 0) // 2
    ranks = [min(max(k, 0), n_rows - 1)
             for k in ((count - 1) // 2, count // 2, lo, lo + 1, hi, hi + 1)]
    r_k = np.sort(values[:, 0] if ratios is None else ratios[:, 0])[ranks]
    if ratios is not None:
        r_k = np.log10(r_k, dtype=np.float64)
    r_mid, r_mid_next, r_lo, r_lo_next, r_hi, r_hi_next = r_k.tolist()
    middle = (r_mid + r_mid_next) / 2  # of all n
    group = np.full(values.shape, middle if count >= min_layers else np.nan)
    if n_rows < 2:
        return np.full(values.shape, np.nan), group
    if count - 1 < least:  # too few others for any cell but a NaN one
        below = between = above = np.nan
    else:
        above = (r_lo + r_hi) / 2  # v > r_hi
        between = (r_lo + r_hi_next) / 2  # r_lo < v <= r_hi
        below = (r_lo_next + r_hi_next) / 2  # v <= r_lo
    of_nan = middle if count >= least else np.nan  # a NaN cell: all n are its others
    peer = np.where(values > r_hi, above,
                    np.where(values > r_lo, between, np.where(valid, below, of_nan)))
    return peer, group


# Rows of a column sorted at once: numpy sorts up to 512 float32 (256 float64) in a sorting
# network, many times faster per value than longer rows; longer columns are sorted in two
# parts and the ranks looked up in both.
_NETWORK_ROWS = {4: 512, 8: 256}


def order_statistics(values: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The ks[i, j]-th smallest value of column j of `values` [R, C], NaN counted as larger
    than any value (np.sort's order), for each i: [K, C] in `values`' dtype.

    Args:
        values: float[R, C] (NaN allowed).
        ks: int[K, C], each in [0, R).

    Returns:
        [K, C]: np.sort(values, axis=0)[ks[i, j], j] at (i, j), except that a rank at or past
        the column's count of non-NaN values may give +inf where np.sort gives NaN.
    """
    n_rows, n_cols = values.shape
    if n_cols == 0:
        return np.zeros(ks.shape, values.dtype)
    part = _NETWORK_ROWS.get(values.dtype.itemsize, n_rows)
    if n_rows <= part or n_rows > 2 * part:  # one sort of each column
        return _sorted_columns(values, n_rows)[np.arange(n_cols), ks]
    half = (n_rows + 1) // 2
    both = _sorted_columns(values, half)
    a, b = both[:, :half], both[:, half:]
    first = ks.min(axis=0)
    span = int((ks - first).max()) + 1  # (the medians' ranks: 3 in a row)
    if span <= 3:
        return np.take_along_axis(_run_of_two(a, b, first, span), ks - first, axis=0)
    return np.concatenate([_run_of_two(a, b, k, 1) for k in ks])


def _sorted_columns(values: np.ndarray, split: int) -> np.ndarray:
    """[C, R]: each column of `values` [R, C], its rows before `split` ascending and those
    from it ascending, NaN last in each (transposed _ROWS rows at a time: each of them read
    whole, each column written _ROWS values at a time; a transposition of the whole matrix
    at once, or of narrow tiles of its columns, is slower once it outgrows the caches)."""
    n_rows, n_cols = values.shape
    columns = np.empty((n_cols, n_rows), values.dtype)
    for r0 in range(0, n_rows, _ROWS):
        columns[:, r0:r0 + _ROWS] = values[r0:r0 + _ROWS].T
    columns[:, :split].sort(axis=1)
    if split < n_rows:
        columns[:, split:].sort(axis=1)
    return columns


_ROWS = 64


def _run_of_two(a: np.ndarray, b: np.ndarray, k: np.ndarray, m: int) -> np.ndarray:
    """[m, C]: the k[j]-th to (k[j] + m - 1)-th smallest of rows a[j] and b[j] together
    (each ascending, NaN last, NaN taken as +inf), by a search of how many of the k[j] + 1
    smallest are a[j]'s, then a merge of the next ones."""
    cols = np.arange(len(k))
    n_a, n_b = a.shape[1], b.shape[1]

    def at(rows: np.ndarray, i: np.ndarray, n: int) -> np.ndarray:  # NaN past the row
        return np.where((i >= 0) & (i < n), rows[cols, np.clip(i, 0, n - 1)], np.nan)

    lo, hi = np.maximum(k + 1 - n_b, 0), np.minimum(k + 1, n_a)
    with np.errstate(invalid="ignore"):
        while True:
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) // 2  # (where open: mid < n_a and 0 <= k - mid < n_b)
            from_a, from_b = at(a, mid, n_a), at(b, k - mid, n_b)
            more = (from_a < from_b) | (np.isnan(from_b) & ~np.isnan(from_a))
            lo = np.where(open_ & more, mid + 1, lo)
            hi = np.where(open_ & ~more, mid, hi)
        i, j = lo, k + 1 - lo  # the k + 1 smallest: a's first i, b's first j
        out = [np.maximum(np.where(i > 0, at(a, i - 1, n_a), -np.inf),
                          np.where(j > 0, at(b, j - 1, n_b), -np.inf))]
        for _ in range(m - 1):
            from_a, from_b = at(a, i, n_a), at(b, j, n_b)
            take_a = (from_a <= from_b) | np.isnan(from_b)
            out.append(np.where(take_a, from_a, from_b))
            i, j = i + take_a, j + ~take_a
    out = np.stack(out)
    return np.where(np.isnan(out), np.inf, out).astype(a.dtype, copy=False)

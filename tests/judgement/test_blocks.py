"""The conditions of a block computed in the ratios' float32 (judgement/blocks.py) against
cells.cells_of's float64 cells then reasons.evaluate, on random blocks full of the values
that break shortcuts (test_cells.py's), ratios set to the float32 neighbours of each
threshold of the peers' rules, blocks of every cell clean (the shortcuts by the block's
range), and columns of more than 512 layers (order statistics from two sorted parts)."""

from __future__ import annotations

import numpy as np
import pytest

from judgement_blocks import random_block

from tb_wur_plugin.judgement import blocks
from tb_wur_plugin.judgement import reasons as table
from tb_wur_plugin.judgement.cells import cells_of, order_statistics
from tb_wur_plugin.judgement.thresholds import (
    DEFAULT_BAND,
    FAST_OUTLIER_FACTOR,
    MIN_PEERS,
    OUTLIER_CONFIRM_FACTOR,
    RUN_MOVING_FROM,
    SLOW_OUTLIER_FACTOR,
)

# every condition the judgement keeps or reads, and the facts that blocks.py computes itself
CONDITIONS = {
    **{fact: fact for fact in ("present", "skipped", "judged", "finite", "positive", "broken",
                               "infinite", "nonfinite", "below", "above", "out_of_band",
                               "run_moving", "moved_before", "peers_ok", "confirmed")},
    **table.conditions(table.REASONS),
}
# log10 gaps the peers' rules compare against
GAPS = (-np.log10(SLOW_OUTLIER_FACTOR), np.log10(FAST_OUTLIER_FACTOR), np.log10(RUN_MOVING_FROM),
        -np.log10(OUTLIER_CONFIRM_FACTOR), np.log10(OUTLIER_CONFIRM_FACTOR))


def _neighbours(x: float, rng: np.random.Generator) -> np.float32:
    """A float32 within 2 ulps of x."""
    v = np.float32(x)
    for _ in range(int(rng.integers(-2, 3)) % 5):
        v = np.nextafter(v, np.float32(np.inf if rng.random() < 0.5 else 0))
    return v


def _at_thresholds(values, present, skipped, group_rows, rng):
    """Sets a few judged cells to the float32 neighbours of 10 ** (median + gap), the median
    of the other positive ratios of the cell's group and column (its leave-one-out median) or
    of all of them (its group's median)."""
    judged = present & ~skipped[None, :]
    for _ in range(int(rng.integers(1, 6))):
        rows = group_rows[int(rng.integers(len(group_rows)))]
        i, j = int(rng.choice(rows)), int(rng.integers(values.shape[1]))
        if not judged[i, j]:
            continue
        with np.errstate(invalid="ignore"):
            ok = judged[rows, j] & np.isfinite(values[rows, j]) & (values[rows, j] > 0)
        logs = np.log10(values[rows, j][ok].astype(np.float64))
        others = np.log10(values[[r for r, o in zip(rows, ok) if o and r != i], j]
                          .astype(np.float64))
        pool = others if rng.random() < 0.7 or not len(logs) else logs
        if len(pool) < MIN_PEERS:
            continue
        values[i, j] = _neighbours(10.0 ** (np.median(pool) + rng.choice(GAPS)), rng)


def _same(fast, slow: np.ndarray, key: str) -> None:
    want = slow if isinstance(fast, np.ndarray) else np.full(slow.shape, fast)
    np.testing.assert_array_equal(want if isinstance(fast, bool) else fast, slow, err_msg=key)


def _check(values, present, skipped, group_rows, first_move, first_column, moving, band):
    columns = np.arange(first_column, first_column + values.shape[1])
    cells = cells_of(values, present, skipped, group_rows, band,
                     columns[None, :] > first_move[:, None], moving)
    fast = blocks.conditions_of(values, present, skipped, group_rows, band, first_move,
                                first_column, moving, CONDITIONS)
    for key, condition in CONDITIONS.items():
        _same(fast[key], table.evaluate(condition, cells), key)


@pytest.mark.parametrize("seed", range(40))
def test_every_condition_is_cells_ofs(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        values, present, skipped, group_rows = random_block(rng, always_nan_where_missing=False)
        _at_thresholds(values, present, skipped, group_rows, rng)
        moving = rng.random(values.shape) < 0.1 if rng.random() < 0.5 else None
        first_column = int(rng.integers(0, 5))
        first_move = rng.integers(0, values.shape[1] + 6, len(values))
        band = DEFAULT_BAND if rng.random() < 0.5 else (1e-3, 3e-3)
        _check(values, present, skipped, group_rows, first_move, first_column, moving, band)


@pytest.mark.parametrize("seed", range(10))
def test_clean_blocks_and_long_columns(seed):
    """Every cell logged, judged, finite and > 0 (the block's range decides some conditions
    whole), in one group or two, of up to 1,100 layers, ratios at the thresholds."""
    rng = np.random.default_rng(100 + seed)
    for n_rows in (3, 40, 513, 1100):
        n_cols = int(rng.integers(1, 9))
        level = 10.0 ** rng.uniform(-7, 0, (n_rows, 1))
        values = (level * 10.0 ** rng.normal(0, 0.3, (n_rows, n_cols))).astype(np.float32)
        present, skipped = np.ones(values.shape, bool), np.zeros(n_cols, bool)
        if rng.random() < 0.5:
            group_rows = [list(range(n_rows))]
        else:
            split = int(rng.integers(1, n_rows))
            group_rows = [list(range(split)), list(range(split, n_rows))]
        _at_thresholds(values, present, skipped, group_rows, rng)
        first_move = np.zeros(n_rows, int) if rng.random() < 0.5 \
            else rng.integers(0, n_cols + 1, n_rows)
        _check(values, present, skipped, group_rows, first_move, 0, None, DEFAULT_BAND)


@pytest.mark.parametrize("op", ["<", "<=", ">=", ">"])
def test_a_float64_threshold_is_one_float32_bound(op):
    rng = np.random.default_rng(len(op))
    x = np.concatenate([
        (10.0 ** rng.uniform(-12, 1, 2000)).astype(np.float32),
        np.array([0, -1e-3, np.inf, -np.inf, np.nan, 1e-45], np.float32),
    ])
    compare = table.COMPARE_OPS[op]
    for t in (1e-9, RUN_MOVING_FROM, 1e-4, 1e-2, 0.5, 1e-3, 0.0, 1e39, -1e39,
              float(np.float32(1e-3)), float(np.float32(1e-3)) * (1 + 2 ** -30)):
        bound_op, bound = blocks._bound(op, t)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(
                table.COMPARE_OPS[bound_op](x, bound), compare(x.astype(np.float64), t),
                err_msg=f"{op} {t!r}")
        assert bound.dtype == np.float32


@pytest.mark.parametrize("n_rows", [1, 2, 511, 512, 513, 1000, 1024, 1025, 2000])
def test_order_statistics_are_np_sorts(n_rows):
    """Any ranks, and the medians' three in a row; NaN last; ties."""
    rng = np.random.default_rng(n_rows)
    for trial in range(20):
        n_cols = int(rng.integers(1, 20))
        dtype = np.float32 if trial % 3 else np.float64
        values = rng.normal(size=(n_rows, n_cols)).astype(dtype)
        if trial % 2:
            values = np.round(values, 1)
        values[rng.random(values.shape) < rng.uniform(0, 1)] = np.nan
        count = (~np.isnan(values)).sum(axis=0)
        lo, hi = np.maximum(count - 2, 0) // 2, np.maximum(count - 1, 0) // 2
        ks = np.stack([(count - 1) // 2, count // 2, lo, lo + 1, hi, hi + 1]) if trial % 4 \
            else rng.integers(0, n_rows, (3, n_cols))
        ks = np.minimum(np.maximum(ks, 0), n_rows - 1)
        got = order_statistics(values, ks)
        want = np.sort(values, axis=0)[ks, np.arange(n_cols)]
        known = ks < count[None, :]
        np.testing.assert_array_equal(got[known], want[known])
        assert np.all(np.isnan(got[~known]) | (got[~known] == np.inf))


@pytest.mark.parametrize("seed", range(10))
def test_only_where_logged_conditions_hold_at_no_missing_cell(seed):
    """`only_where_logged` names the conditions cells_of never holds at a cell without a
    logged ratio (whatever the value there), and not run_moving or moved_before, which do."""
    rng = np.random.default_rng(200 + seed)
    seen_at_missing = set()
    for _ in range(10):
        values, present, skipped, group_rows = random_block(rng, always_nan_where_missing=False)
        moved_before = rng.random(values.shape) < 0.5
        cells = cells_of(values, present, skipped, group_rows, DEFAULT_BAND, moved_before,
                         rng.random(values.shape) < 0.3)
        for key, condition in CONDITIONS.items():
            at_missing = table.evaluate(condition, cells) & ~present
            if blocks.only_where_logged(condition):
                assert not at_missing.any(), key
            elif at_missing.any():
                seen_at_missing.add(key)
    assert {"run_moving", "moved_before"} <= seen_at_missing
    assert not any(map(blocks.only_where_logged, ("run_moving", "moved_before")))

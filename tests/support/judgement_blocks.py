"""Random blocks of ratios for the judgement's block tests (test_cells.py, test_blocks.py):
small matrices full of the values that break shortcuts."""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.judgement.thresholds import RUN_MOVING_FROM

# NaN, ±inf, 0, a negative ratio, a subnormal, ratios at and either side of the thresholds
SPECIAL = np.array([
    0.0, np.nan, np.inf, -np.inf, -1e-3, 1e-45, 1e-9, RUN_MOVING_FROM, 1e-4, 1e-2, 0.5, 1e-3,
    1e-3, 2e-3,
], np.float32)


def random_block(rng: np.random.Generator, always_nan_where_missing: bool = True):
    """(values float32[L, C], present bool[L, C], skipped bool[C], group_rows): a block of up
    to 9 layers and 12 steps: special values, ties across a whole column, missing and skipped
    steps, 1-3 groups. A missing cell holds NaN, or, with `always_nan_where_missing` False, in
    half of the blocks whatever value was drawn for it."""
    n_rows, n_cols = int(rng.integers(1, 10)), int(rng.integers(1, 13))
    values = (10.0 ** rng.normal(-3, 1.5, (n_rows, n_cols))).astype(np.float32)
    special = rng.random((n_rows, n_cols)) < rng.uniform(0, 0.6)
    values[special] = rng.choice(SPECIAL, special.sum())
    if rng.random() < 0.3:  # ties across a whole column
        values[:, rng.integers(n_cols)] = values[0, 0]
    present = rng.random((n_rows, n_cols)) < rng.uniform(0.5, 1)
    if always_nan_where_missing or rng.random() < 0.5:
        values[~present] = np.nan
    skipped = rng.random(n_cols) < 0.2
    groups = rng.integers(0, int(rng.integers(1, 4)), n_rows)
    group_rows = [list(np.flatnonzero(groups == g)) for g in np.unique(groups)]
    return values, present, skipped, group_rows

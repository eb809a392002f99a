"""The facts of a block of cells (judgement/cells.py) against their definitions computed cell
by cell, on small random matrices full of the values that break shortcuts: NaN, ±inf, 0,
negative ratios, subnormals, ties, ratios either side of the thresholds, missing and skipped
steps, groups of every size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judgement_blocks import random_block

from tb_wur_plugin.judgement import cells as cells_module
from tb_wur_plugin.judgement.thresholds import (
    DEFAULT_BAND,
    MIN_PEERS,
    OUTLIER_CONFIRM_FACTOR,
    RUN_MOVING_FROM,
)


def _block(rng: np.random.Generator):
    """`random_block`'s block, NaN where missing, and moved_before bool[L, C]."""
    values, present, skipped, group_rows = random_block(rng)
    moved_before = rng.random(values.shape) < 0.5
    return values, present, skipped, group_rows, moved_before


def _median(values: list[float]) -> float:
    return float(np.median(np.array(values, np.float64)))


def _by_definition(values, present, skipped, group_rows):
    """(run_moving, log10 ratio, peers' median, group's median), cell by cell."""
    v = values.astype(np.float64)
    n_rows, n_cols = v.shape
    judged = present & ~skipped[None, :]
    log_v = np.full(v.shape, np.nan)
    run_moving = np.zeros(v.shape, bool)
    for i in range(n_rows):
        for j in range(n_cols):
            if judged[i, j] and math.isfinite(v[i, j]) and v[i, j] > 0:
                log_v[i, j] = np.log10(v[i, j])
            run_moving[i, j] = any(
                judged[k, j] and math.isfinite(v[k, j]) and v[k, j] >= RUN_MOVING_FROM
                for k in range(n_rows) if k != i)
    peer, group = np.full(v.shape, np.nan), np.full(v.shape, np.nan)
    for rows in group_rows:
        for j in range(n_cols):
            column = [log_v[k, j] for k in rows if not np.isnan(log_v[k, j])]
            for i in rows:
                others = [log_v[k, j] for k in rows if k != i and not np.isnan(log_v[k, j])]
                if len(others) >= MIN_PEERS:
                    peer[i, j] = _median(others)
                if len(column) >= MIN_PEERS + 1:
                    group[i, j] = _median(column)
    return run_moving, log_v, peer, group


@pytest.mark.parametrize("seed", range(40))
def test_the_facts_of_a_block_are_their_definitions(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        values, present, skipped, group_rows, moved_before = _block(rng)
        moving = rng.random(values.shape) < 0.1 if rng.random() < 0.5 else None
        c = cells_module.cells_of(values, present, skipped, group_rows, DEFAULT_BAND,
                                  moved_before, moving)
        run_moving, log_v, peer, group = _by_definition(values, present, skipped, group_rows)
        if moving is not None:
            run_moving = run_moving | moving
        np.testing.assert_array_equal(c.run_moving, run_moving)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(c.peers_ok, c.positive & (peer >= np.log10(RUN_MOVING_FROM)))
            np.testing.assert_array_equal(
                c.confirmed, np.abs(log_v - group) >= np.log10(OUTLIER_CONFIRM_FACTOR))
        np.testing.assert_array_equal(c.gap, log_v - peer)  # NaN where NaN, else bit for bit
        # the group's medians from the logs themselves (the reasons' words) are the same
        for rows in group_rows:
            from_logs = cells_module.group_medians(log_v[rows])
            np.testing.assert_array_equal(from_logs[0], peer[rows])
            np.testing.assert_array_equal(from_logs[1], group[rows])


@pytest.mark.parametrize("seed", range(20))
def test_a_column_alone_has_the_facts_it_has_in_its_block(seed):
    """A block of one step (the judgement while training takes its medians in a path of its
    own) gives each cell's facts bit for bit as the same step inside a wider block, with
    groups of up to 1,100 layers (columns sorted in one part and in two)."""
    rng = np.random.default_rng(seed)
    blocks = [_block(rng) for _ in range(8)]
    for n_rows in (300, 700, 1100):
        values = (10.0 ** rng.normal(-3, 1.5, (n_rows, 3))).astype(np.float32)
        special = rng.random(values.shape) < 0.2
        values[special] = rng.choice([0.0, np.nan, np.inf, 1e-3], special.sum())
        values[:, 1] = values[0, 1]  # one column of ties
        present = rng.random(values.shape) < 0.9
        values[~present] = np.nan
        groups = [list(range(0, n_rows, 2)), list(range(1, n_rows, 2))]
        blocks.append((values, present, np.array([False, True, False]), groups,
                       rng.random(values.shape) < 0.5))
    for values, present, skipped, group_rows, moved_before in blocks:
        whole = cells_module.cells_of(values, present, skipped, group_rows, DEFAULT_BAND,
                                      moved_before)
        for j in range(values.shape[1]):
            alone = cells_module.cells_of(values[:, j:j + 1], present[:, j:j + 1],
                                          skipped[j:j + 1], group_rows, DEFAULT_BAND,
                                          moved_before[:, j:j + 1])
            for fact in ("gap", "peers_ok", "confirmed", "run_moving", "judged"):
                np.testing.assert_array_equal(getattr(alone, fact), getattr(whole, fact)[:, j:j + 1],
                                              err_msg=fact)


@pytest.mark.parametrize("seed", range(20))
def test_a_layers_median_and_last_are_their_definitions(seed):
    """judge_layers' median: np.median of the float64 finite ratios of judged steps; last:
    the ratio at the last logged step (the matrix holds float32)."""
    from tb_wur_plugin.judgement import judge
    from tb_wur_plugin.read.heatmap import RunMatrix

    rng = np.random.default_rng(seed)
    values, present, skipped, _, _ = _block(rng)
    matrix = RunMatrix(tuple(f"l{i}" for i in range(len(values))),
                       np.arange(values.shape[1], dtype=np.int64), values, present, skipped)
    for row, layer in enumerate(judge.judge_layers(matrix)):
        v = values[row].astype(np.float64)
        finite = v[present[row] & ~skipped & np.isfinite(v)]
        assert layer["median"] == (float(np.median(finite)) if len(finite) else None)
        logged = np.flatnonzero(present[row])
        want = float(v[logged[-1]]) if len(logged) else None
        assert layer["last"] == want or (math.isnan(want) and math.isnan(layer["last"]))


@pytest.mark.parametrize("shape", ["random", "ties", "equal", "sorted", "skewed"])
def test_the_median_of_a_long_layer_is_np_median(shape):
    """Of many steps the two middle ratios are bracketed from a sample first: whatever the
    ratios' order and ties, the median is np.median's."""
    from tb_wur_plugin.judgement import judge
    from tb_wur_plugin.read.heatmap import RunMatrix

    rng = np.random.default_rng(len(shape))
    for n in (4097, 5000, 20_001, 20_002):
        row = (10.0 ** rng.normal(-3, 1, n)).astype(np.float32)
        if shape == "ties":
            row = rng.choice(row[:5], n)
        elif shape == "equal":
            row[:] = row[0]
        elif shape == "sorted":
            row = np.sort(row)
        elif shape == "skewed":  # the sample's stride lands on the small half only
            row[::n // 1024] = 1e-9
        present = np.ones((1, n), bool)
        matrix = RunMatrix(("l",), np.arange(n, dtype=np.int64), row[None, :], present,
                           np.zeros(n, bool))
        (layer,) = judge.judge_layers(matrix)
        assert layer["median"] == float(np.median(row.astype(np.float64))), n

"""Binning, reductions, flags and the wire encoding, against naive references."""

import math

import numpy as np
import pytest

from tb_wur_plugin.judgement import judge
from tb_wur_plugin.judgement import threads
from tb_wur_plugin.read import heatmap
from tb_wur_plugin.web import heatmap_wire


def _random_matrix(rng, n_layers=6, n_steps=80):
    series = []
    for layer in range(n_layers):
        steps = np.sort(rng.choice(np.arange(0, 3 * n_steps, 3), size=rng.integers(1, n_steps), replace=False))
        # float32 values: the precision writers store and the matrix holds
        values = (10.0 ** rng.uniform(-6, 0, size=len(steps))).astype(np.float32).astype(np.float64)
        special = rng.random(len(steps))
        values[special < 0.05] = 0.0
        values[(special > 0.05) & (special < 0.08)] = np.inf
        values[(special > 0.08) & (special < 0.1)] = np.nan
        series.append((f"layer{layer}", steps, values))
    return series


def _reference(values, reduction):
    """The documented reduction of the ratios of one column of one layer (None: missing)."""
    if not values:
        return None
    if reduction == "last":
        return values[-1]
    if any(not (v >= 0) for v in values):
        return math.nan
    positive = [v for v in values if 0 < v < math.inf]
    if reduction == "mean_log10":
        if positive:
            return 10 ** (sum(math.log10(v) for v in positive) / len(positive))
        return math.inf if math.inf in values else 0.0
    return max(values) if reduction == "max" else min(values)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("reduction", heatmap.REDUCTIONS)
def test_columns_cover_the_range_and_reduce_exactly_their_steps(seed, reduction):
    rng = np.random.default_rng(seed)
    series = _random_matrix(rng)
    matrix = heatmap.RunMatrix.from_series(series)
    start = int(rng.integers(-5, 60))
    end = int(rng.integers(start, 260))
    max_columns = int(rng.integers(1, 120))
    columns = heatmap.make_columns(matrix.steps, start, end, max_columns)
    n = len(columns.start)
    assert 1 <= n <= max_columns and columns.start[0] == start
    assert np.all(np.diff(columns.start) > 0) and columns.start[-1] <= end
    values, missing = heatmap.reduce_columns(matrix, columns, reduction)
    bounds = list(columns.start) + [end + 1]
    for k in range(n):
        inside = [s for s in matrix.steps if bounds[k] <= s < bounds[k + 1]]
        assert columns.count[k] == len(inside)
        if inside:
            assert (columns.first[k], columns.last[k]) == (inside[0], inside[-1])
        for row, (tag, steps, vals) in enumerate(series):
            picked = [v for s, v in zip(steps, vals) if bounds[k] <= s < bounds[k + 1]]
            want = _reference(picked, reduction)
            assert missing[row, k] == (want is None), (tag, k)
            if want is None:
                continue
            got = values[row, k]
            assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12)


def test_one_column_per_step_when_they_fit():
    matrix = heatmap.RunMatrix.from_series([("a", np.array([0, 10, 20]), np.array([1e-3, 2e-3, 3e-3]))])
    columns = heatmap.make_columns(matrix.steps, 0, 20, 3)
    np.testing.assert_array_equal(columns.start, [0, 10, 20])
    values, missing = heatmap.reduce_columns(matrix, columns, "last")
    # the matrix holds float32, the precision every writer stores
    np.testing.assert_array_equal(values, np.float32([[1e-3, 2e-3, 3e-3]]))
    assert not missing.any()


@pytest.mark.parametrize("seed", range(8))
def test_columns_are_equal_step_ranges(seed):
    rng = np.random.default_rng(seed)
    every = int(rng.integers(1, 7))
    steps = np.arange(int(rng.integers(0, 9)), 400, every)
    start, end = int(steps[0]), int(rng.integers(steps[0], 400))
    max_columns = int(rng.integers(1, 500))
    columns = heatmap.make_columns(steps, start, end, max_columns)
    widths = np.diff(np.append(columns.start, end + 1))
    assert len(columns.start) <= max_columns and columns.start[0] == start
    assert np.all(widths[:-1] == widths[0]) and 1 <= widths[-1] <= widths[0]
    if -(-(end - start + 1) // every) <= max_columns:
        # one column per logged step: the width is the logging interval
        assert widths[0] == (every if end - start >= every else end - start + 1)
    else:
        assert widths[0] % every == 0  # every bin holds as many logged steps


def test_runs_logged_every_2_and_every_5_steps_get_a_column_per_step():
    every2 = np.arange(0, 21, 2)
    every5 = np.arange(0, 21, 5)
    a = heatmap.RunMatrix.from_series([("w", every2, 1e-3 * (1 + every2))])
    b = heatmap.RunMatrix.from_series([("w", every5, 1e-3 * (1 + every5)), ("late", every5[2:], every5[2:] * 1e-4)])
    union = np.union1d(a.steps, b.steps)
    columns = heatmap.make_columns(union, 0, 20, 1000)
    np.testing.assert_array_equal(columns.start, np.arange(21))
    for matrix, every in ((a, 2), (b, 5)):
        values, missing = heatmap.reduce_columns(matrix, columns, "mean_log10")
        values, missing, held = heatmap.hold_gaps(matrix, columns, values, missing)
        # each step shows the layer's last logged ratio: measured at its own steps, held between
        want = 1e-3 * (1 + (np.arange(21) // every) * every)
        np.testing.assert_allclose(values[0], want)
        assert not missing[0].any()
        cells = {(int(r), int(k)): int(s) for r, f, n, s in zip(held.rows, held.first, held.count, held.step)
                 for k in range(f, f + n)}
        assert {k for r, k in cells if r == 0} == {k for k in range(21) if k % every}
        assert all(s == (k // every) * every for (r, k), s in cells.items() if r == 0)
        assert held.cells == {2: 10, 5: 16 + 8}[every]  # b's "late" layer: held at 11-14, 16-19
    # nothing before a layer's first logged step nor after its last
    values, missing = heatmap.reduce_columns(b, columns, "last")
    values, missing, held = heatmap.hold_gaps(b, columns, values, missing)
    assert missing[1, :10].all() and not missing[1, 10:].any()
    c = heatmap.make_columns(union, 0, 23, 1000)
    values, missing = heatmap.reduce_columns(a, c, "last")
    values, missing, _ = heatmap.hold_gaps(a, c, values, missing)
    assert missing[0, 21:].all()


def test_held_cells_take_any_ratio_and_binned_columns_hold_too():
    steps = np.array([0, 7, 14, 21])
    values = np.array([np.nan, 0.0, np.inf, 1e-3])
    matrix = heatmap.RunMatrix.from_series([("w", steps, values)])
    columns = heatmap.make_columns(np.arange(22), 0, 21, 11)  # bins of 2 steps
    np.testing.assert_array_equal(columns.start, np.arange(0, 22, 2))
    reduced, missing = heatmap.reduce_columns(matrix, columns, "max")
    filled, missing, held = heatmap.hold_gaps(matrix, columns, reduced, missing)
    assert not missing.any()
    # bins 0-1 (step 0), 6-7 (7), 14-15 (14), 20-21 (21) are measured; the others held
    assert list(zip(held.first, held.count, held.step)) == [(1, 2, 0), (4, 3, 7), (8, 2, 14)]
    np.testing.assert_array_equal(
        filled[0], [np.nan, np.nan, np.nan, 0, 0, 0, 0, np.inf, np.inf, np.inf, np.float32(1e-3)])


def test_held_cells_are_those_of_their_definition_on_random_runs():
    """hold_gaps against its definition, cell by cell, on random runs (layers logged at
    random steps, some never, columns of one or several steps): a cell missing from the
    reduction is held when its layer logged a step before the column and its last logged
    step is at or after the column's end; it then shows the ratio of that earlier step."""
    rng = np.random.default_rng(8)
    held_any = 0
    for _ in range(60):
        n_layers, n_steps = int(rng.integers(1, 8)), int(rng.integers(1, 120))
        steps = np.sort(rng.choice(np.arange(3 * n_steps), size=n_steps, replace=False))
        values = (10.0 ** rng.uniform(-6, 0, size=(n_layers, n_steps))).astype(np.float32)
        values[rng.random(values.shape) < 0.1] = np.nan
        present = rng.random(values.shape) < rng.uniform(0.05, 1.0)
        present[int(rng.integers(n_layers))] &= rng.random() < 0.7  # sometimes a layer never logs
        matrix = heatmap.RunMatrix(tuple(f"l{i}" for i in range(n_layers)), steps, values,
                                   present, None)
        start = int(rng.integers(0, 3 * n_steps))
        end = int(rng.integers(start, 3 * n_steps + 2))
        columns = heatmap.make_columns(matrix.steps, start, end, int(rng.integers(1, 40)))
        reduced, missing = heatmap.reduce_columns(matrix, columns, "last")
        filled, still_missing, held = heatmap.hold_gaps(matrix, columns, reduced, missing)
        ends = np.append(columns.start[1:], columns.end + 1)
        expected_steps = {}
        for row in range(n_layers):
            logged = matrix.steps[present[row]]
            for k, (first, stop) in enumerate(zip(columns.start, ends)):
                earlier = logged[logged < first]
                if missing[row, k] and len(earlier) and logged[-1] >= stop:
                    expected_steps[row, k] = int(earlier[-1])
        got_steps = {(int(r), int(k)): int(s)
                     for r, f, n, s in zip(held.rows, held.first, held.count, held.step)
                     for k in range(f, f + n)}
        assert got_steps == expected_steps
        for (row, k), step in expected_steps.items():
            np.testing.assert_array_equal(filled[row, k],
                                          values[row, np.searchsorted(steps, step)])
        np.testing.assert_array_equal(still_missing,
                                      missing & ~np.isin(np.arange(missing.size).reshape(
                                          missing.shape), [r * missing.shape[1] + k
                                                           for r, k in expected_steps]))
        held_any += len(expected_steps)
    assert held_any > 100


@pytest.mark.parametrize("reduction", heatmap.REDUCTIONS)
def test_an_empty_range_is_one_missing_column(reduction):
    matrix = heatmap.RunMatrix.from_series([("a", np.array([0, 10]), np.array([1e-3, 2e-3]))])
    columns = heatmap.make_columns(matrix.steps, 3, 7, 100)
    assert len(columns.start) == 1 and columns.count[0] == 0
    values, missing = heatmap.reduce_columns(matrix, columns, reduction)
    assert missing.all() and np.isnan(values).all()


def test_encoding_rounds_to_three_significant_digits_like_javascript():
    values = np.array([[1.235e-3, 1.125, 9.995e-3, 0.0, np.inf, np.nan, 1e-41, 1e30, 123.4, 1e-40]])
    missing = np.zeros_like(values, bool)
    missing[0, 5] = False
    codes = heatmap_wire.encode_cells(values, missing)
    decoded = heatmap_wire.decode_cells(codes)
    # as JavaScript: (0.001235).toPrecision(3) == "0.00123", 1.125 -> "1.13", 0.009995 -> "0.0100"
    assert [f"{v:.2e}" for v in decoded[0, :3]] == ["1.23e-03", "1.13e+00", "1.00e-02"]
    assert list(codes[0, 3:8]) == [heatmap_wire.CODE_ZERO, heatmap_wire.CODE_INF, heatmap_wire.CODE_NAN,
                                   heatmap_wire.CODE_TINY, heatmap_wire.CODE_HUGE]
    assert decoded[0, 8] == 123.0 and decoded[0, 9] == pytest.approx(1e-40)
    assert heatmap_wire.encode_cells(values, np.ones_like(values, bool)).max() == heatmap_wire.CODE_MISSING


def test_encoding_matches_python_formatting_on_random_ratios():
    rng = np.random.default_rng(1)
    values = 10.0 ** rng.uniform(-12, 3, size=20000)
    decoded = heatmap_wire.decode_cells(heatmap_wire.encode_cells(values, np.zeros(values.shape, bool)))
    assert [f"{v:.2e}" for v in decoded] == [f"{v:.2e}" for v in values]


def test_encoding_block_by_block_is_each_cells_own_code(monkeypatch):
    """encode_cells takes its cells a block at a time: each cell's code, over blocks of a
    2-D array (its rows longer than a block, the last block short), is the code of that cell
    encoded alone, for ratios, near ties, specials and missing cells."""
    monkeypatch.setattr(heatmap_wire, "_BLOCK_CELLS", 700)
    rng = np.random.default_rng(5)
    values = 10.0 ** rng.uniform(-45, 25, size=(3, 1234))
    values.flat[::13] = (rng.integers(100, 999, values.size)[::13] + 0.5) * 1e-5
    values.flat[::17] = np.array([0.0, np.inf, -1.0, np.nan])[rng.integers(0, 4, values.size)[::17]]
    missing = rng.random(values.shape) < 0.1
    codes = heatmap_wire.encode_cells(values, missing)
    assert codes.shape == values.shape and codes.dtype == np.uint16
    alone = [heatmap_wire.encode_cells(np.array([v]), np.array([m]))[0]
             for v, m in zip(values.ravel(), missing.ravel())]
    assert codes.ravel().tolist() == alone


def test_pack_round_trips_arrays_and_header():
    arrays = {"codes": np.arange(0, 60000, 7, dtype=np.uint16), "start": np.array([0.0, 5.5]),
              "count": np.array([3, 4], np.uint32)}
    header, unpacked = heatmap_wire.unpack(heatmap_wire.pack({"a": [1, "b"]}, arrays))
    assert header == {"a": [1, "b"]}
    for name, array in arrays.items():
        np.testing.assert_array_equal(unpacked[name], array)
        assert unpacked[name].dtype == array.dtype


@pytest.mark.parametrize("seed", range(4))
def test_skipped_steps_per_column_and_not_judged_by_the_flags(seed):
    rng = np.random.default_rng(seed)
    series = _random_matrix(rng)
    steps = np.unique(np.concatenate([s for _, s, _ in series]))
    skipped = np.sort(rng.choice(steps, size=len(steps) // 5, replace=False))
    # as the writer guarantees: every ratio of a skipped step is 0
    series = [(tag, s, np.where(np.isin(s, skipped), 0.0, v)) for tag, s, v in series]
    matrix = heatmap.RunMatrix.from_series(series, np.append(skipped, 10**6))  # unlogged: dropped
    assert matrix.skipped_mask.sum() == len(skipped)
    columns = heatmap.make_columns(matrix.steps, 0, int(steps[-1]), int(rng.integers(1, 60)))
    counts = heatmap.skipped_per_column(matrix, columns)
    bounds = list(columns.start) + [columns.end + 1]
    want = [sum(bounds[k] <= s < bounds[k + 1] for s in skipped) for k in range(len(counts))]
    assert list(counts) == want
    # the flags are those of the run without its skipped steps, plus how many were skipped
    kept = [(tag, s[~np.isin(s, skipped)], v[~np.isin(s, skipped)]) for tag, s, v in series]
    without = judge.flag_layers(heatmap.RunMatrix.from_series(kept), 1e-4, 1e-2)
    without = {f["tag"]: f for f in without}
    flagged = judge.flag_layers(matrix, 1e-4, 1e-2)
    assert [f["tag"] for f in flagged] == list(without)
    for f in flagged:
        tag_steps = {t: s for t, s, _ in series}[f["tag"]]
        assert f["skipped_steps"] == int(np.isin(tag_steps, skipped).sum())
        assert f["logged_steps"] == len(tag_steps)
        other = without[f["tag"]]
        assert other["skipped_steps"] == 0
        for key in f:
            # last: the ratio at the last logged step, a skipped one included (the contract)
            if key not in ("logged_steps", "skipped_steps", "last"):
                assert f[key] == other[key], (key, f, other)


@pytest.mark.parametrize("reduction", heatmap.REDUCTIONS)
def test_reducing_in_blocks_of_rows_by_threads_changes_nothing(monkeypatch, reduction):
    matrix = heatmap.RunMatrix.from_series(
        _random_matrix(np.random.default_rng(11), n_layers=9, n_steps=120), [3, 30])
    columns = heatmap.make_columns(matrix.steps, 0, int(matrix.steps[-1]), 37)
    whole = heatmap.hold_gaps(matrix, columns, *heatmap.reduce_columns(matrix, columns, reduction))
    monkeypatch.setattr(heatmap, "BLOCK_CELLS", 1)  # one row at a time
    monkeypatch.setattr(heatmap, "_BLOCKS_PER_ITEM", 2)  # five items, shared by the threads
    monkeypatch.setattr(threads, "THREADS", 2)
    blocked = heatmap.RunMatrix(matrix.tags, matrix.steps, matrix.values, matrix.present,
                                matrix.skipped)  # classes computed anew, in blocks too
    again = heatmap.hold_gaps(blocked, columns, *heatmap.reduce_columns(blocked, columns, reduction))
    np.testing.assert_array_equal(again[0], whole[0])
    np.testing.assert_array_equal(again[1], whole[1])
    held, held_whole = again[2], whole[2]
    assert held.cells and held.cells == held_whole.cells
    for field in ("rows", "first", "count", "step"):
        np.testing.assert_array_equal(getattr(held, field), getattr(held_whole, field))


def test_a_range_is_reduced_in_blocks_of_its_own_cells(monkeypatch):
    """A reduction's row blocks hold about BLOCK_CELLS cells of the range asked (not of the
    run's whole rows), and a range of few cells is still cut into two blocks a thread."""
    matrix = heatmap.RunMatrix.from_series(
        _random_matrix(np.random.default_rng(4), n_layers=40, n_steps=1000), [])
    columns = heatmap.make_columns(matrix.steps, 300, 449, 10)
    width = int(np.count_nonzero((matrix.steps >= 300) & (matrix.steps <= 449)))
    assert 0 < 4 * width < len(matrix.steps)
    whole = heatmap.reduce_columns(matrix, columns, "mean_log10")
    rows_of_blocks = []
    reduce_rows = heatmap._reduce_rows

    def recorded(v, *args):
        rows_of_blocks.append(len(v))
        return reduce_rows(v, *args)

    monkeypatch.setattr(heatmap, "_reduce_rows", recorded)
    monkeypatch.setattr(threads, "THREADS", 2)
    monkeypatch.setattr(heatmap, "BLOCK_CELLS", 4 * width)
    got = heatmap.reduce_columns(matrix, columns, "mean_log10")
    assert sorted(rows_of_blocks) == [4] * 10
    monkeypatch.setattr(heatmap, "BLOCK_CELLS", 1 << 20)  # the range in one block, but
    rows_of_blocks.clear()
    again = heatmap.reduce_columns(matrix, columns, "mean_log10")
    assert sorted(rows_of_blocks) == [10] * 4  # two blocks for each of the two threads
    for reduced in (got, again):
        np.testing.assert_array_equal(reduced[0], whole[0])
        np.testing.assert_array_equal(reduced[1], whole[1])


@pytest.mark.parametrize("reduction", heatmap.REDUCTIONS)
def test_a_column_of_more_than_65535_steps_reduces_exactly(reduction):
    """Counts of a column's classes are summed in 16-bit fields of one int64 unless a
    column holds 2**16 steps or more: then one sum per class."""
    rng = np.random.default_rng(5)
    n = 70_000
    values = (10.0 ** rng.uniform(-6, 0, n)).astype(np.float32).astype(np.float64)
    values[rng.random(n) < 0.01] = 0.0
    values[rng.random(n) < 0.01] = np.inf
    series = [("a", np.arange(n), values), ("b", np.arange(n), values[::-1].copy())]
    if reduction != "max":  # one NaN: max, min and mean_log10 are NaN
        series[1][2][123] = np.nan
    matrix = heatmap.RunMatrix.from_series(series)
    for columns in (1, 3):  # 70,000 steps in one column; about 23,334 in each of three
        cols = heatmap.make_columns(matrix.steps, 0, n - 1, columns)
        got, missing = heatmap.reduce_columns(matrix, cols, reduction)
        assert not missing.any()
        bounds = list(cols.start) + [n]
        for row, (_, _, v) in enumerate(series):
            for k in range(len(cols.start)):
                want = _reference(list(v[bounds[k]:bounds[k + 1]]), reduction)
                assert (math.isnan(want) and math.isnan(got[row, k])) or got[row, k] == pytest.approx(
                    want, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("reduction", heatmap.REDUCTIONS)
def test_a_block_of_positive_ratios_reduces_as_any_block(seed, reduction):
    """A block of rows whose every cell of the range is a positive ratio (the usual run) is
    reduced without counting classes: its rows come out bit for bit as when the same rows
    share a block with a row of every other class."""
    rng = np.random.default_rng(seed)
    n_steps = int(rng.integers(1, 300))
    steps = np.sort(rng.choice(np.arange(3 * n_steps), n_steps, replace=False))
    series = [(f"p{i}", steps, (10.0 ** rng.uniform(-8, 0, n_steps)).astype(np.float32))
              for i in range(5)]
    odd = np.array([0.0, np.inf, np.nan, -1.0] * n_steps, np.float32)[:n_steps]
    start = int(rng.integers(-3, steps[-1] + 1))
    end = int(rng.integers(start, 3 * n_steps + 3))
    columns = heatmap.make_columns(steps, start, end, int(rng.integers(1, 80)))
    positive = heatmap.RunMatrix.from_series(series)
    with_odd = heatmap.RunMatrix.from_series(series + [("odd", steps[::2], odd[::2])])
    assert with_odd.values.size <= heatmap.BLOCK_CELLS  # one block: classes counted
    alone, alone_missing = heatmap.reduce_columns(positive, columns, reduction)
    shared, shared_missing = heatmap.reduce_columns(with_odd, columns, reduction)
    np.testing.assert_array_equal(alone, shared[:5])
    np.testing.assert_array_equal(alone_missing, shared_missing[:5])


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_work_shared_by_threads_comes_back_in_order_and_raises(monkeypatch, n_threads):
    monkeypatch.setattr(threads, "THREADS", n_threads)
    items = list(range(11))
    seen = []

    def square(x: int) -> int:
        seen.append(x)
        return x * x

    assert list(threads.in_threads(square, items)) == [x * x for x in items]
    assert sorted(seen) == items  # each item once

    def fail_at_seven(x: int) -> int:
        if x == 7:
            raise ValueError("seven")
        return x

    with pytest.raises(ValueError, match="seven"):
        list(threads.in_threads(fail_at_seven, items))


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 3_517])
def test_gzip_in_threads_is_one_member_any_reader_reads(monkeypatch, size):
    """Pieces deflated apart make one gzip member: Python's gzip and zlib, and the gzip
    command, read back the bytes, pieces of 1,000 bytes shared by two threads."""
    import gzip
    import subprocess
    import zlib

    monkeypatch.setattr(heatmap_wire, "_PIECE_BYTES", 1000)
    monkeypatch.setattr(threads, "THREADS", 2)
    rng = np.random.default_rng(size)
    data = (rng.integers(0, 4, size, dtype=np.uint8) * 60).tobytes()  # compressible
    payload = heatmap_wire.gzip_in_threads(data)
    assert gzip.decompress(payload) == data
    reader = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one member, nothing after it
    assert reader.decompress(payload) == data and reader.eof and not reader.unused_data
    assert subprocess.run(["gzip", "-dc"], input=payload, capture_output=True,
                          check=True).stdout == data


def test_a_matrix_classes_are_computed_once_by_concurrent_readers(monkeypatch):
    """Readers that ask for a matrix's classes at once wait for one computation and get the
    same array; another matrix's are computed meanwhile, by its own lock."""
    import threading

    rng = np.random.default_rng(3)
    values = rng.choice(np.array([1e-3, 0.0, np.inf, np.nan, -1.0], np.float32), (40, 300))
    matrices = [heatmap.RunMatrix(tuple(f"l{i}" for i in range(40)), np.arange(300), values,
                                  rng.random(values.shape) < 0.9) for _ in range(2)]
    calls, start = [], threading.Barrier(5)
    cell_classes = heatmap.cell_classes

    def counted(v, present):
        calls.append(threading.get_ident())
        return cell_classes(v, present)

    monkeypatch.setattr(heatmap, "cell_classes", counted)
    got = [None] * 5

    def read(k):
        start.wait()
        got[k] = matrices[0 if k < 4 else 1].classes

    readers = [threading.Thread(target=read, args=(k,)) for k in range(5)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=60)
    assert all(g is got[0] for g in got[:4]) and got[4] is not got[0]
    assert len(calls) == 2 * len(list(heatmap.row_blocks(values.shape)))
    for matrix, classes in ((matrices[0], got[0]), (matrices[1], got[4])):
        np.testing.assert_array_equal(classes, cell_classes(matrix.values, matrix.present))


def test_computed_once_lets_two_objects_compute_at_once():
    """`threads.computed_once`: one object's computation waits for the other's to begin,
    which a lock shared by every object (Python 3.11's cached_property) would never let
    happen; a second reader of the same object gets the one value."""
    import threading

    began = {name: threading.Event() for name in "ab"}

    class Waits:
        def __init__(self, name, other):
            self.name, self.other, self.computed = name, other, 0

        @threads.computed_once
        def value(self):
            self.computed += 1
            began[self.name].set()
            assert began[self.other].wait(timeout=10), "the other object's computation waited"
            return self.name * 2

    a, b = Waits("a", "b"), Waits("b", "a")
    got = {}
    readers = [threading.Thread(target=lambda o=o, k=k: got.__setitem__(k, o.value))
               for k, o in ((0, a), (1, b), (2, a))]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=30)
    assert got == {0: "aa", 1: "bb", 2: "aa"} and a.computed == b.computed == 1

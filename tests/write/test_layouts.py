"""Every layout the writers have written reads back alike, through the real TensorBoard in both
loaders, every route, `tb-wur report` and `read_ratios`:
- the packed layout (protocol version 3) and the committed fixtures of the older ones
  (tests/support/layout_fixtures.py), each alone, of the same data;
- a run whose first part is an old layout and whose continuation is packed (an upgrade
  between two event files of one run);
- a packed run whose set of layers changes midway (a layer added after step k);
- a packed run of 100,000 logged steps, all of them kept by default.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import layout_fixtures as fixtures
from framework_servers import both_loaders
from tb_wur_plugin import metadata
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin.writer import SummaryWriter

PER_TAG = ("per_tag_every_step", "per_tag_once")  # the same data and series as "packed"
LAST = fixtures.STEPS[-1]
CONTINUED = LAST + 2  # the mixed runs' packed part starts there
ADDED_AT = 10  # layers_change: "late/kernel" logged from this step on
LONG_STEPS = 100_000


def _write_layers_change(run_dir: str) -> None:
    with SummaryWriter(run_dir) as writer:
        for step in range(20):
            ratios = {"early/kernel": 1e-3 * (1 + step), "early/bias": 2e-3}
            if step >= ADDED_AT:
                ratios["late/kernel"] = 5e-4 * step
            writer.add_ratios(ratios, step, shapes={"early/kernel": (3, 2), "early/bias": (2,),
                                                    "late/kernel": (2, 2)})
            if step % 5 == 0:
                writer.add_histograms({tag: np.full(4, value, np.float32)
                                       for tag, value in ratios.items()}, step)


def _write_long(run_dir: str) -> None:
    with SummaryWriter(run_dir) as writer:
        for step in range(LONG_STEPS):
            writer.add_ratios({"a/kernel": 1e-3 + step * 1e-9, "a/bias": 1e-4}, step,
                              shapes={"a/kernel": (4, 4), "a/bias": (4,)})


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("layouts")
    for layout in fixtures.OLD_LAYOUTS:
        shutil.copytree(fixtures.FIXTURES / layout, root / layout)
        mixed = root / f"mixed_{layout}"
        shutil.copytree(fixtures.FIXTURES / layout, mixed)
        fixtures.write_with(SummaryWriter(mixed), first_step=CONTINUED)
    fixtures.write_with(SummaryWriter(root / "packed"))
    both = root / "packed_twice"  # the reference of the mixed runs: both parts packed
    fixtures.write_with(SummaryWriter(both))
    fixtures.write_with(SummaryWriter(both), first_step=CONTINUED)
    _write_layers_change(str(root / "layers_change"))
    _write_long(str(root / "long"))
    return str(root)


@pytest.fixture(scope="module")
def servers(logdir):
    last = {layout: LAST for layout in fixtures.OLD_LAYOUTS} | {
        "packed": LAST, "packed_twice": CONTINUED + LAST, "layers_change": 19,
        "long": LONG_STEPS - 1,
    } | {f"mixed_{layout}": CONTINUED + LAST for layout in fixtures.OLD_LAYOUTS}
    with both_loaders(logdir, last) as servers:
        yield servers


def _get(server, path: str) -> bytes:
    status, _, body = server.get(path)
    assert status == 200, (path, status, body[:300])
    return body


def _json(server, path: str):
    return json.loads(_get(server, path))


def _without_run(value):
    if isinstance(value, dict):
        return {k: ("RUN" if k in ("run", "run_a", "run_b") else _without_run(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_without_run(v) for v in value]
    return value


def _routes(run: str) -> list[str]:
    tags = [tag for tag, _ in fixtures.LAYERS]
    return [
        f"/data/plugin/wur/export?run={run}&format=json",
        f"/data/plugin/wur/flags?run={run}",
        f"/data/plugin/wur/flags?run={run}&low=5e-4&high=2e-3&patience=2",
        f"/data/plugin/wur/suggestions?run={run}",
        *(f"/data/plugin/wur/histograms?run={run}&tag={tag}" for tag in tags),
        *(f"/data/plugin/wur/series?run={run}&tag={tag}"
          for tag in [*tags, metadata.LEARNING_RATE_TAG, metadata.SKIPPED_STEP_TAG]),
    ]


def _heatmap(server, run: str, **query) -> tuple[dict, dict]:
    arguments = "".join(f"&{k}={v}" for k, v in query.items())
    header, arrays = heatmap_wire.unpack(_get(server, f"/data/plugin/wur/heatmap?run={run}{arguments}"))
    return _without_run(header), {k: v.tolist() for k, v in arrays.items()}


def _run_entry(server, run: str) -> dict:
    return next(r for r in server_runs(server) if r["run"] == run)


def server_runs(server) -> list[dict]:
    return _json(server, "/data/plugin/wur/runs")["runs"]


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("layout", PER_TAG)
def test_an_old_layout_reads_as_the_packed_one_through_every_route(servers, loader, layout):
    server = servers[loader]
    assert _without_run(_run_entry(server, layout)) == _without_run(_run_entry(server, "packed"))
    for old_path, new_path in zip(_routes(layout), _routes("packed")):
        assert _without_run(_json(server, old_path)) == _without_run(_json(server, new_path)), old_path
    old_csv = _get(server, f"/data/plugin/wur/export?run={layout}&format=csv")
    assert old_csv == _get(server, "/data/plugin/wur/export?run=packed&format=csv")
    assert len(old_csv.decode().splitlines()) == 1 + len(fixtures.STEPS) * len(fixtures.LAYERS)
    for query in ({}, {"columns": 7}, {"reduction": "max", "start": 4, "end": 30}):
        assert _heatmap(server, layout, **query) == _heatmap(server, "packed", **query)
    compare = _heatmap_compare(server, layout, "packed")
    assert set(compare) == {1.0}  # every common cell: ratio A / ratio B = 1


def _heatmap_compare(server, run_a: str, run_b: str) -> set[float]:
    header, arrays = heatmap_wire.unpack(
        _get(server, f"/data/plugin/wur/compare?run_a={run_a}&run_b={run_b}"))
    values = heatmap_wire.decode_cells(arrays["codes"])
    return {float(v) for v in values[np.isfinite(values)]}


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_wur_summary_ops_read_their_values_beside_the_packed_ones(servers, loader):
    """`wur_summary.scalar` and `histogram` stay one layer per call; their values read as the
    writer's (no skipped-step marker, no shapes: those are the writer's own)."""
    server = servers[loader]
    ops = _json(server, "/data/plugin/wur/export?run=tf_summary_ops&format=json")
    packed = _json(server, "/data/plugin/wur/export?run=packed&format=json")
    assert list(packed) == [tag for tag, _ in fixtures.LAYERS]
    assert sorted(ops) == sorted(packed)  # no model position: by tag
    for tag in ops:
        assert [p[1:] for p in ops[tag]] == [p[1:] for p in packed[tag]]
        for route in ("histograms", "series"):
            a = _json(server, f"/data/plugin/wur/{route}?run=tf_summary_ops&tag={tag}")
            b = _json(server, f"/data/plugin/wur/{route}?run=packed&tag={tag}")
            keep = ("steps", "counts", "values")
            assert {k: a[k] for k in keep if k in a} == {k: b[k] for k in keep if k in b}


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("layout", fixtures.OLD_LAYOUTS)
def test_a_run_upgraded_midway_reads_both_parts(servers, loader, layout):
    """An old layout's file, then a packed continuation in a second file of the same run."""
    server = servers[loader]
    mixed = _json(server, f"/data/plugin/wur/export?run=mixed_{layout}&format=json")
    both = _json(server, "/data/plugin/wur/export?run=packed_twice&format=json")
    assert sorted(mixed) == sorted(both)
    for tag in mixed:
        assert [p[1:] for p in mixed[tag]] == [p[1:] for p in both[tag]], tag
        steps = [p[1] for p in mixed[tag]]
        assert steps == [*fixtures.STEPS, *(CONTINUED + s for s in fixtures.STEPS)]
        histograms = _json(server, f"/data/plugin/wur/histograms?run=mixed_{layout}&tag={tag}")
        assert histograms["counts"] == _json(
            server, f"/data/plugin/wur/histograms?run=packed_twice&tag={tag}")["counts"]
    if layout in PER_TAG:  # the same series as packed_twice, marker and shapes included
        entry = _without_run(_run_entry(server, f"mixed_{layout}"))
        assert entry == _without_run(_run_entry(server, "packed_twice"))
        assert entry["skipped_at"] == [fixtures.SKIPPED_STEP, CONTINUED + fixtures.SKIPPED_STEP]
        for query in ({}, {"columns": 9}):
            assert _heatmap(server, f"mixed_{layout}", **query) == _heatmap(
                server, "packed_twice", **query)
        for path in ("flags", "suggestions"):
            assert _without_run(_json(server, f"/data/plugin/wur/{path}?run=mixed_{layout}")) == \
                _without_run(_json(server, f"/data/plugin/wur/{path}?run=packed_twice"))


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_a_layer_added_midway_has_its_own_steps(servers, loader):
    server = servers[loader]
    entry = _run_entry(server, "layers_change")
    layers = {layer["tag"]: layer for layer in entry["layers"]}
    assert [layer["tag"] for layer in entry["layers"]] == ["early/kernel", "early/bias", "late/kernel"]
    assert (layers["early/kernel"]["first_step"], layers["early/kernel"]["logged_steps"]) == (0, 20)
    assert (layers["late/kernel"]["first_step"], layers["late/kernel"]["last_step"],
            layers["late/kernel"]["logged_steps"]) == (ADDED_AT, 19, 20 - ADDED_AT)
    assert all(layer["has_histograms"] for layer in entry["layers"])
    export = _json(server, "/data/plugin/wur/export?run=layers_change&format=json")
    assert [p[1:] for p in export["late/kernel"]] == [
        [s, pytest.approx(5e-4 * s, rel=1e-6)] for s in range(ADDED_AT, 20)]
    assert [p[1:] for p in export["early/kernel"]] == [
        [s, pytest.approx(1e-3 * (1 + s), rel=1e-6)] for s in range(20)]
    histograms = _json(server, "/data/plugin/wur/histograms?run=layers_change&tag=late/kernel")
    assert histograms["steps"] == [10, 15]
    header, arrays = heatmap_wire.unpack(_get(server, "/data/plugin/wur/heatmap?run=layers_change"))
    rows = header["runs"][0]["tags"]
    codes = arrays["codes_0"].reshape(len(rows), -1)
    late = heatmap_wire.decode_cells(codes[rows.index("late/kernel")])
    assert np.isnan(late[:ADDED_AT]).all() and np.isfinite(late[ADDED_AT:]).all()


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_a_run_of_100000_steps_keeps_every_step_by_default(servers, loader):
    entry = _run_entry(servers[loader], "long")
    assert [(layer["first_step"], layer["last_step"], layer["logged_steps"])
            for layer in entry["layers"]] == [(0, LONG_STEPS - 1, LONG_STEPS)] * 2
    rows = _get(servers[loader], "/data/plugin/wur/export?run=long&format=csv").decode()
    parsed = list(csv.reader(io.StringIO(rows)))
    assert len(parsed) == 1 + 2 * LONG_STEPS
    assert [row[1] for row in parsed[1:LONG_STEPS + 1]] == [str(s) for s in range(LONG_STEPS)]


def _report(logdir: str, load_fast: str) -> dict:
    result = subprocess.run(
        [shutil.which("tb-wur") or os.path.join(os.path.dirname(sys.executable), "tb-wur"),
         "report", logdir, "--format", "json",
         f"--load_fast={load_fast}", "--run", "^(packed|per_tag|mixed|tf_summary|layers)"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {run["run"]: run for run in json.loads(result.stdout)["runs"]}


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_the_report_reads_every_layout_alike(logdir, load_fast):
    runs = _report(logdir, load_fast)
    for layout in PER_TAG:
        assert _without_run(runs[layout]) == _without_run(runs["packed"])
        assert _without_run(runs[f"mixed_{layout}"]) == _without_run(runs["packed_twice"])
    by_tag = {layer["tag"]: layer for layer in runs["packed"]["layers"]}
    assert by_tag["out/bias"]["reason"] == "nan"
    assert by_tag["dense/kernel"]["logged_steps"] == len(fixtures.STEPS)
    ops = {layer["tag"]: layer for layer in runs["tf_summary_ops"]["layers"]}
    assert {t: (v["logged_steps"], v["last"]) for t, v in ops.items()} == {
        t: (v["logged_steps"], v["last"]) for t, v in by_tag.items()}
    changed = {layer["tag"]: layer for layer in runs["layers_change"]["layers"]}
    assert changed["late/kernel"]["logged_steps"] == 20 - ADDED_AT


@pytest.mark.parametrize("load_fast", [True, False])
def test_read_ratios_reads_every_layout_alike(logdir, load_fast):
    import pandas

    import tb_wur_plugin

    frame = tb_wur_plugin.read_ratios(logdir, run="^(packed|per_tag|tf_summary)", load_fast=load_fast)
    assert list(frame.columns) == ["run", "tag", "step", "wall_time", "ratio"]
    assert sorted(set(frame["run"])) == ["packed", "packed_twice", *PER_TAG, "tf_summary_ops"]
    packed = frame[frame["run"] == "packed"].drop(columns="run").reset_index(drop=True)
    assert list(packed["tag"].unique()) == [tag for tag, _ in fixtures.LAYERS]  # model order
    expected = fixtures.ratios()
    for row in packed.itertuples():
        want = np.float32(expected[row.step][row.tag])
        assert (np.isnan(row.ratio) and np.isnan(want)) or row.ratio == float(want)
    by_tag = packed.sort_values(["tag", "step"], kind="stable").reset_index(drop=True)
    for layout in (*PER_TAG, "tf_summary_ops"):
        other = frame[frame["run"] == layout].drop(columns="run").reset_index(drop=True)
        if layout == "tf_summary_ops":  # no model position: layers by tag
            other = other.sort_values(["tag", "step"], kind="stable").reset_index(drop=True)
            pandas.testing.assert_frame_equal(other[["tag", "step", "ratio"]],
                                              by_tag[["tag", "step", "ratio"]])
        else:
            pandas.testing.assert_frame_equal(other, packed)


def test_read_ratios_without_pandas_gives_numpy_columns(logdir, monkeypatch):
    import tb_wur_plugin

    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    columns = tb_wur_plugin.read_ratios(logdir, run="^packed$", load_fast=False)
    assert list(columns) == ["run", "tag", "step", "wall_time", "ratio"]
    assert columns["step"].dtype == np.int64 and columns["ratio"].dtype == np.float64
    assert len(columns["ratio"]) == len(fixtures.STEPS) * len(fixtures.LAYERS)


def test_read_ratios_says_what_is_wrong(tmp_path, logdir):
    import tb_wur_plugin

    with pytest.raises(FileNotFoundError, match="no such directory"):
        tb_wur_plugin.read_ratios(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("not a logdir")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        tb_wur_plugin.read_ratios(str(tmp_path / "file"))
    with pytest.raises(ValueError, match="selects no run"):
        tb_wur_plugin.read_ratios(logdir, run="^nothing$", load_fast=False)
    with pytest.raises(ValueError, match="not a regular expression"):
        tb_wur_plugin.read_ratios(logdir, run="(", load_fast=False)
    with pytest.raises(ValueError, match="holds no wur ratios"):
        tb_wur_plugin.read_ratios(str(tmp_path), load_fast=False)

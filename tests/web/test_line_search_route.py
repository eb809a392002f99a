"""`/line_search` and `/runs`' has_line_search, over data written by
`armijo.StochasticArmijo.minimize`, in-process and through the real tensorboard in both
loaders; the line-search tags are never heatmap, export or flags rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from backend import Backend
from tb_server import TensorBoardServer
from tb_wur_plugin import armijo, metadata, wur_summary
from tb_wur_plugin.web import heatmap_wire

STEPS = [0, 1, 2, 3, 4, 5, 9, 12]


def _write(logdir):
    """searched: the line search at STEPS, with the ratios of its two variables logged by
    watch at each; plain: ratios only; only_search: the line search without ratios.
    Returns {step: StepResult as floats} of `searched`."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(32, 5)))
    y = tf.constant((rng.normal(size=32) > 0).astype(np.float64))
    w = tf.Variable(tf.zeros([5], tf.float64), name="w")
    b = tf.Variable(tf.zeros([], tf.float64), name="b")

    def loss_fn():
        z = tf.linalg.matvec(x, w) + b
        return tf.reduce_mean(tf.nn.softplus(z) - y * z)

    search = armijo.StochasticArmijo(reset="keep", initial_step_size=50.0)
    minimize = tf.function(lambda k: search.minimize(loss_fn, [w, b], step=k))
    results = {}
    writer = tf.summary.create_file_writer(f"{logdir}/searched")
    with writer.as_default():
        for k in STEPS:
            with wur_summary.watch([w, b], step=k):
                r = minimize(tf.constant(k, tf.int64))
            results[k] = {
                "step_size": float(np.float32(r.step_size.numpy())),
                "backtracks": int(r.backtracks.numpy()),
            }
    writer.close()

    writer = tf.summary.create_file_writer(f"{logdir}/plain")
    with writer.as_default():
        for k in range(3):
            wur_summary.scalar("dense/kernel", 1e-3, step=k)
    writer.close()

    search2 = armijo.StochasticArmijo(reset="initial")
    v = tf.Variable(3.0)
    writer = tf.summary.create_file_writer(f"{logdir}/only_search")
    with writer.as_default():
        for k in range(4):
            search2.minimize(lambda: (v - 1.0) ** 2, [v], step=k)
    writer.close()
    return results


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("line_search"))
    return logdir, _write(logdir)


def _check(answer, results):
    assert set(answer) == {"steps", "step_size", "backtracks"}
    assert answer["steps"] == STEPS
    assert answer["step_size"] == [results[k]["step_size"] for k in STEPS]
    assert answer["backtracks"] == [results[k]["backtracks"] for k in STEPS]
    assert all(isinstance(b, int) for b in answer["backtracks"])
    assert answer["backtracks"][0] > 0  # the first search backtracked from 50


def _check_runs(runs):
    by_run = {r["run"]: r for r in runs["runs"]}
    assert by_run["searched"]["has_line_search"] is True
    assert by_run["only_search"]["has_line_search"] is True
    assert by_run["plain"]["has_line_search"] is False
    # the line-search tags are no layers
    assert [l["tag"] for l in by_run["searched"]["layers"]] == ["w", "b"]
    assert by_run["only_search"]["layers"] == []


def test_line_search_in_process(written):
    logdir, results = written
    backend = Backend(logdir)
    _check(backend.json("line_search", run="searched"), results)
    only = backend.json("line_search", run="only_search")
    assert only["steps"] == [0, 1, 2, 3] and len(only["step_size"]) == 4
    _check_runs(backend.json("runs"))


def test_line_search_errors(written):
    backend = Backend(written[0])
    for params, code in [
        ({"run": "plain"}, 404),
        ({"run": "nowhere"}, 404),
        ({}, 400),
        ({"run": ["searched", "searched"]}, 400),
    ]:
        response = backend.get("line_search", **params)
        assert response.status_code == code, (params, response.get_data(as_text=True))
    assert backend.client.post("/data/plugin/wur/line_search?run=searched").status_code == 405


def test_line_search_tags_are_never_rows(written):
    backend = Backend(written[0])
    header, _ = backend.heatmap(run="searched")
    assert header["runs"][0]["tags"] == ["w", "b"]
    exported = backend.json("export", run="searched", format="json")
    assert list(exported) == ["w", "b"]
    csv_text = backend.get("export", run="searched", format="csv").get_data(as_text=True)
    assert "_wur/" not in csv_text
    flags = backend.json("flags", run="searched", low="1e-30", high="1e-29")
    assert {f["tag"] for f in flags["layers"]} <= {"w", "b"}
    assert all(not t.startswith("_wur/") for t in (f["tag"] for f in flags["layers"]))
    # a run holding only the line search has no ratio rows: 404 like any run without ratios
    assert backend.get("export", run="only_search", format="json").status_code == 404
    assert backend.get("heatmap", run="only_search").status_code == 404


def test_non_finite_values_are_tensorboard_json_strings(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "odd"))
    content = {
        metadata.LINE_SEARCH_STEP_SIZE: [1.0, math.nan, math.inf],
        metadata.LINE_SEARCH_BACKTRACKS: [0.0, 2.0, 1.0],
    }
    with writer.as_default():
        # step 2 first, then 0, then 1: the answer is by step; step 1 written twice (kept twice)
        for step, k in [(2, 2), (0, 0), (1, 1), (1, 1)]:
            for series, values in content.items():
                tf.summary.write(
                    metadata.line_search_tag(series), tf.constant(values[k], tf.float32), step=step,
                    metadata=metadata.create_summary_metadata(metadata.KIND_LINE_SEARCH, series=series),
                )
    writer.close()
    response = Backend(str(tmp_path)).get("line_search", run="odd")
    assert response.status_code == 200
    answer = json.loads(response.get_data())
    assert answer == {
        "steps": [0, 1, 1, 2],
        "step_size": [1.0, "NaN", "NaN", "Infinity"],
        "backtracks": [0, 2, 2, 1],
    }


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_line_search_through_tensorboard(written, load_fast):
    logdir, results = written
    with TensorBoardServer(logdir, load_fast) as server:
        runs = server.wait_for(
            lambda d: {"searched", "plain", "only_search"} <= {r["run"] for r in d["runs"]}
            and all(r["run"] != "searched" or len(r["layers"]) == 2 for r in d["runs"]),
            "/data/plugin/wur/runs",
        )
        _check_runs(runs)
        _check(server.get_json("/data/plugin/wur/line_search?run=searched"), results)
        status, _, _ = server.get("/data/plugin/wur/line_search?run=plain")
        assert status == 404
        status, _, _ = server.get("/data/plugin/wur/line_search")
        assert status == 400
        status, _, body = server.get("/data/plugin/wur/heatmap?run=searched", {"Accept-Encoding": "gzip"})
        header, _ = heatmap_wire.unpack(body)
        assert header["runs"][0]["tags"] == ["w", "b"]
        assert list(server.get_json("/data/plugin/wur/export?run=searched&format=json")) == ["w", "b"]

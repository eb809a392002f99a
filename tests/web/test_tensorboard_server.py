"""The real `tensorboard` command, both loaders, a run of 5,000 logged steps."""

import csv
import io
import json

import numpy as np
import pytest
import tensorflow as tf

from out_of_order_runs import write_out_of_order_runs
from tb_server import TensorBoardServer
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import wur_summary

STEPS = 5000
TAGS = ("model/dense/kernel", "model/dense/bias", "model/head/kernel")


@pytest.fixture(scope="module")
def long_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("long")
    writer = tf.summary.create_file_writer(str(logdir / "long_run"))

    @tf.function
    def log(step):
        for index, tag in enumerate(TAGS):
            wur_summary.scalar(tag, 1e-3 * (index + 1) * (1.0 + tf.cast(step, tf.float64) / STEPS), step=step)

    with writer.as_default():
        log.python_function(tf.constant(0, tf.int64))  # eagerly, so the writes are ordered
        for step in range(1, STEPS):
            log(tf.constant(step, tf.int64))
    writer.close()
    return str(logdir)


def _expected(tag_index, step):
    """The ratio written, as stored (float32)."""
    return float(np.float32(1e-3 * (tag_index + 1) * (1.0 + step / STEPS)))


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_every_step_reaches_the_heatmap_and_the_export(long_logdir, load_fast):
    with TensorBoardServer(long_logdir, load_fast) as server:
        runs = server.wait_for(
            lambda d: d["runs"] and d["runs"][0]["layers"]
            and d["runs"][0]["layers"][0]["logged_steps"] == STEPS,
            "/data/plugin/wur/runs",
        )
        assert [l["tag"] for l in runs["runs"][0]["layers"]] == list(TAGS)

        status, headers, body = server.get(
            f"/data/plugin/wur/heatmap?run=long_run&columns={STEPS}", {"Accept-Encoding": "gzip"}
        )
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        header, arrays = heatmap_wire.unpack(body)
        assert header["columns"] == STEPS
        np.testing.assert_array_equal(arrays["column_first"], np.arange(STEPS))
        codes = arrays[header["runs"][0]["codes"]].reshape(len(TAGS), STEPS)
        want = np.array([[_expected(i, s) for s in range(STEPS)] for i in range(len(TAGS))])
        got = heatmap_wire.decode_cells(codes)
        assert [f"{v:.2e}" for v in got.ravel()] == [f"{v:.2e}" for v in want.ravel()]

        header, arrays = heatmap_wire.unpack(
            server.get("/data/plugin/wur/heatmap?run=long_run&columns=1000")[2]
        )  # exact binning: 5 steps per column
        assert header["columns"] == 1000
        assert set(arrays["column_count"]) == {5}

        status, headers, body = server.get("/data/plugin/wur/export?run=long_run&format=csv")
        assert status == 200
        rows = list(csv.reader(io.StringIO(body.decode())))[1:]
        for index, tag in enumerate(TAGS):
            mine = [r for r in rows if r[0] == tag]
            assert [int(r[1]) for r in mine] == list(range(STEPS))
            # 9 significant digits name each stored float32 exactly
            np.testing.assert_array_equal(
                np.float32([float(r[3]) for r in mine]),
                np.float32([_expected(index, s) for s in range(STEPS)]),
            )
        exported = json.loads(server.get("/data/plugin/wur/export?run=long_run&format=json")[2])
        assert all(len(exported[tag]) == STEPS for tag in TAGS)
        assert "Traceback" not in server.output()


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_an_explicit_samples_flag_wins(long_logdir, load_fast):
    with TensorBoardServer(long_logdir, load_fast, ("--samples_per_plugin=wur=50",)) as server:
        runs = server.wait_for(
            lambda d: d["runs"] and d["runs"][0]["layers"], "/data/plugin/wur/runs"
        )
        assert runs["runs"][0]["layers"][0]["logged_steps"] == 50


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_skipped_steps_survive_sampling_with_the_ratios(tmp_path, load_fast):
    """watch around a LossScaleOptimizer that skips every third step, 10 steps kept per tag:
    every kept step that was skipped is marked in the heatmap, and only those."""
    import keras

    variables = [tf.Variable(np.ones(4, np.float32), name="net/w")]
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-3))
    writer = tf.summary.create_file_writer(str(tmp_path / "skips"))
    with writer.as_default():
        for step in range(150):
            grad = tf.fill((4,), np.inf) if step % 3 == 0 else tf.ones(4)
            with wur_summary.watch(variables, step=step):
                optimizer.apply([optimizer.scale_loss(grad)], variables)
    writer.close()
    with TensorBoardServer(str(tmp_path), load_fast, ("--samples_per_plugin=wur=10",)) as server:
        runs = server.wait_for(
            lambda d: d["runs"] and d["runs"][0]["last_step"] == 149, "/data/plugin/wur/runs"
        )
        assert runs["runs"][0]["layers"][0]["logged_steps"] == 10
        header, arrays = heatmap_wire.unpack(server.get("/data/plugin/wur/heatmap?run=skips")[2])
    # equal step columns over the kept steps' range: the columns holding a kept step
    measured = arrays["column_count"] > 0
    steps = arrays["column_first"][measured].astype(int)
    skipped = list(arrays[header["runs"][0]["skipped"]][measured])
    assert len(steps) == 10 and skipped == [int(step % 3 == 0) for step in steps]
    assert any(skipped) and not all(skipped)
    assert sum(arrays[header["runs"][0]["skipped"]]) == sum(skipped)  # none elsewhere
    assert runs["runs"][0]["skipped_steps"] == sum(skipped)
    codes = arrays[header["runs"][0]["codes"]][measured]
    assert [code == heatmap_wire.CODE_ZERO for code in codes] == [bool(s) for s in skipped]


def test_series_is_by_step_with_the_fast_loader(tmp_path):
    """Steps written out of order, and a restarted run: /series is ascending and gives the
    export's points in the export's order."""
    write_out_of_order_runs(str(tmp_path))
    with TensorBoardServer(str(tmp_path), True) as server:
        server.wait_for(
            lambda d: [r["last_step"] for r in d["runs"]] == [11, 9], "/data/plugin/wur/runs"
        )
        for run in ("shuffled", "restarted"):
            series = server.get_json(f"/data/plugin/wur/series?run={run}&tag=net/w")
            assert series["steps"] and series["steps"] == sorted(series["steps"])
            exported = json.loads(server.get(f"/data/plugin/wur/export?run={run}&format=json")[2])
            assert [(s, v) for _, s, v in exported["net/w"]] == list(
                zip(series["steps"], series["values"])
            )
        assert "Traceback" not in server.output()

"""WeightUpdateRatioCallback on Keras's JAX and PyTorch backends: a subprocess per backend
(KERAS_BACKEND is fixed when keras is imported) fits a small model with a nested layer,
histograms on, beside a numpy reference that copies the weights at batch begins only;
the runs are read back through the plugin in both loaders of the real `tensorboard`. A
second subprocess per backend fits with stop_on={"nan"} over a NaN batch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from framework_servers import assert_ratios_match, both_loaders, export
from suite_paths import ROOT, SUPPORT

pytest.importorskip("jax")
pytest.importorskip("torch")

# backend -> the optimizer its run trains with (SGD with momentum, Adam)
RUNS = {"jax": "momentum", "torch": "adam"}
LOGGED = [0, 3, 6]  # update_freq=3 over 2 epochs of 4 steps


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("keras_backends"))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    workers = {
        backend: subprocess.Popen(
            [sys.executable, os.path.join(SUPPORT, "keras_backend_worker.py"),
             os.path.join(logdir, backend), optimizer],
            env={**env, "KERAS_BACKEND": backend}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for backend, optimizer in RUNS.items()
    }
    reports = {}
    for backend, worker in workers.items():
        try:
            out, err = worker.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, err = worker.communicate()
        assert worker.returncode == 0, f"{backend} worker failed:\n{err[-3000:]}"
        reports[backend] = json.loads(out.strip().splitlines()[-1])
    with both_loaders(logdir, {f"{b}/train": LOGGED[-1] for b in RUNS}) as servers:
        yield servers, reports


@pytest.mark.parametrize("backend", sorted(RUNS))
def test_no_tensorflow_on_the_backend(served, backend):
    _, reports = served
    report = reports[backend]
    assert report["backend"] == backend and report["iterations"] == 8
    assert report["tf_loaded_by_keras"] == []  # `import keras` loads none either
    assert report["tf_loaded_by_tb_wur_plugin_keras"] == []
    assert report["tf_loaded_after_fit"] is False  # nor fit, the callback and its writes
    # Keras dispatched batch ends to its thread pool: the callback did not prevent it
    assert report["async_train"] and report["batch_ends_off_main_thread"]


def _expected(report):
    return {tag: {int(s): r for s, r in report["ratios"][tag].items()} for tag in report["tags"]}


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("backend", sorted(RUNS))
def test_ratios_match_the_numpy_reference(served, backend, loader):
    servers, reports = served
    want = _expected(reports[backend])
    assert all(sorted(points) == LOGGED for points in want.values())
    assert math.isinf(want["sequential/first/bias"][0])  # zero-initialised, moved: +inf
    got = export(servers[loader], f"{backend}/train")
    assert_ratios_match(got, want, rtol=1e-5)  # tags in model order, variable paths


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("backend", sorted(RUNS))
def test_histograms_learning_rate_and_descriptions(served, backend, loader):
    servers, reports = served
    server, report = servers[loader], reports[backend]
    runs = {r["run"]: r for r in server.get_json("/data/plugin/wur/runs")["runs"]}
    run = runs[f"{backend}/train"]
    assert [layer["tag"] for layer in run["layers"]] == report["tags"]
    assert all(layer["has_histograms"] for layer in run["layers"])
    assert run["has_learning_rate"] and run["skipped_steps"] == 0
    assert run["layers"][3]["description"] == (
        "Weight-update ratio of sequential/block/inner/kernel: shape [6, 5], float32")
    for tag in report["tags"]:
        got = server.get_json(f"/data/plugin/wur/histograms?run={backend}/train&tag={tag}")
        assert got["steps"] == LOGGED
        assert got["counts"] == [report["counts"][tag][str(s)] for s in LOGGED], tag
    rates = server.get_json(f"/data/plugin/wur/series?run={backend}/train&tag=_wur/learning_rate")
    assert rates["kind"] == "learning_rate" and rates["steps"] == LOGGED
    assert rates["values"] == pytest.approx([report["rates"][str(s)] for s in LOGGED], rel=1e-7)


NAN_STEP = 3  # the NaN batch of keras_stop_worker.py


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """keras_stop_worker.py's fit on each backend, both at once: {backend: (logdir, its
    JSON)}."""
    logdir = str(tmp_path_factory.mktemp("keras_backends_stop"))
    outputs = _run_on_every_backend("keras_stop_worker.py", logdir, str(NAN_STEP))
    return {backend: (os.path.join(logdir, backend), json.loads(out.strip().splitlines()[-1]))
            for backend, out in outputs.items()}


def _run_on_every_backend(worker: str, logdir: str, *args: str) -> dict[str, str]:
    """tests/support/WORKER LOGDIR/BACKEND ARGS on each backend of RUNS, all at once: {backend:
    its stdout}; fails naming the backend whose worker failed."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    workers = {
        backend: subprocess.Popen(
            [sys.executable, os.path.join(SUPPORT, worker), os.path.join(logdir, backend), *args],
            env={**env, "KERAS_BACKEND": backend}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for backend in RUNS
    }
    outputs = {}
    for backend, process in workers.items():
        try:
            out, err = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        assert process.returncode == 0, f"{backend} worker failed:\n{err[-3000:]}"
        outputs[backend] = out
    return outputs


@pytest.mark.parametrize("backend", sorted(RUNS))
def test_stop_on_ends_fit_after_the_nan_step_with_the_reports_flags(stopped, backend):
    """A NaN batch at NAN_STEP: every layer's ratio (and spectral ratio) is NaN there, the
    flags fire at that step, read at the next batch's begin, and `fit` ends at that batch's
    end; the flags are those `tb-wur report` gives the written run."""
    from training_flags import fired, reported

    logdir, result = stopped[backend]
    assert result["backend"] == backend
    assert result["iterations"] == NAN_STEP + 2
    flags = result["flags"]
    assert result["on_flag"] == flags
    assert {(f["metric"], f["tag"]) for f in flags} == {
        ("frobenius", "net/hidden/kernel"), ("frobenius", "net/hidden/bias"),
        ("frobenius", "net/out/kernel"), ("frobenius", "net/out/bias"),
        ("spectral", "net/hidden/kernel"), ("spectral", "net/out/kernel")}
    assert {(f["reason"], f["since"], f["step"]) for f in flags} == {("nan", NAN_STEP, NAN_STEP)}
    assert fired(flags) == reported(logdir, "train", ("frobenius", "spectral"))
    assert len(result["told"]) == len(flags)
    assert all(m.startswith(f"WUR step {NAN_STEP}: net/") for m in result["told"])


@pytest.fixture(scope="module")
def steps_per_execution(tmp_path_factory):
    """keras_steps_per_execution_worker.py on JAX and PyTorch, both at once: {backend:
    (logdir, its result)}."""
    logdir = str(tmp_path_factory.mktemp("keras_steps_per_execution"))
    results = {}
    for backend, out in _run_on_every_backend(
            "keras_steps_per_execution_worker.py", logdir).items():
        report = json.loads(out.strip().splitlines()[-1])
        assert report["backend"] == backend
        results[backend] = (os.path.join(logdir, backend), report["result"])
    return results


@pytest.mark.parametrize("every", [1, 2, 3, 4, 7])
def test_jax_steps_per_execution_logs_the_single_update_of_each_logged_step(
    steps_per_execution, every
):
    """steps_per_execution=3 on JAX (24 steps in executions of 3, 3 and 2 per epoch): the
    logged steps are 0, every, 2·every, ... wherever they fall in an execution, and their
    ratios, histograms and learning rates are those of their own update, against numpy on
    the weights the jitted train step handed out before and after every step."""
    from helpers import assert_ratios_close, read_events, ratio_series
    from tb_wur_plugin import metadata

    logdir, results = steps_per_execution["jax"]
    result = results[str(every)]
    assert result["iterations"] == 24 and result["recorded_steps"] == list(range(24))
    assert result["train_step_restored"]
    logged_steps = list(range(0, 24, every))
    run = os.path.join(logdir, f"every{every}", "train")
    logged = {(tag, step): r for tag, points in ratio_series(run).items()
              for step, r in points.items()}
    expected = {(tag, int(step)): r for tag, points in result["ratios"].items()
                for step, r in points.items()}
    assert {step for _, step in expected} == set(logged_steps)
    assert_ratios_close(logged, expected, rtol=1e-5)
    events = read_events(run)
    for tag, points in result["counts"].items():
        got = {step: np.asarray(c).tolist() for step, c, _ in events[metadata.histogram_tag(tag)]}
        assert got == {int(step): c for step, c in points.items()}, tag
    rates = {step: float(v) for step, v, _ in events[metadata.LEARNING_RATE_TAG]}
    assert rates == pytest.approx({s: 0.05 * 0.9 ** s for s in logged_steps}, rel=1e-6)


def test_jax_steps_per_execution_fit_that_raised_leaves_keras_its_own_function(
    steps_per_execution
):
    """A fit with the callback raises after its first execution (steps 0-2), leaving the
    callback's train function on the model; the next fit, without the callback, runs
    Keras's own and leaves it there."""
    _, results = steps_per_execution["jax"]
    assert results["interrupted"] == {"left": "stepwise", "after": "iterator_step",
                                      "iterations": 7}


def test_jax_steps_per_execution_stop_on_ends_fit_at_the_step_that_fires(steps_per_execution):
    """A NaN batch at step 4, in the execution of steps 3-5: the flags fire at step 4 and
    that execution makes no further step. (The first layer's bias stays finite: relu's
    gradient is 0 at a NaN input.)"""
    _, results = steps_per_execution["jax"]
    assert results["stopped"] == {"iterations": 5, "flags": [
        [tag, "nan", 4] for tag in ("net/first/kernel", "net/head/bias", "net/head/kernel")]}


def test_torch_steps_per_execution_above_one_is_refused(steps_per_execution):
    """Keras's torch trainer refuses steps_per_execution > 1 when it makes its train
    function; set on a model whose function is made, the callback refuses it at fit's
    start, naming the backend, before it opens a file."""
    _, errors = steps_per_execution["torch"]
    assert "`steps_per_execution` must be 1 with the PyTorch backend" in errors["keras"]
    assert "steps_per_execution=2 on Keras's torch backend" in errors["callback"]
    assert "refuses steps_per_execution > 1" in errors["callback"]
    assert errors["files"] == []



_SNAPSHOT_SCRIPT = """
import json, tempfile
import keras, numpy as np
from tb_wur_plugin.keras_backends.array_backends import Logger
model = keras.Sequential([keras.Input((300,)), keras.layers.Dense(600), keras.layers.Dense(3)])
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
x, y = np.ones((4, 300), "float32"), np.zeros((4, 3), "float32")
logger = Logger(model, tempfile.mkdtemp(), None, False, False, {})
watched = Logger.watched(model)
storages = []
for step in range(3):
    before = logger.snapshot(watched)
    storages.append([t.data_ptr() for t in before])
    model.train_on_batch(x, y)
    logger.record(watched, before, step)
logger.close()
print(json.dumps(storages))
"""


def test_torch_snapshots_reuse_their_copies():
    """On PyTorch a logged step's snapshot is written into the last one's copies: no new
    memory at each logged step, as with `watch` (the ratios: the tests above)."""
    env = {**os.environ, "KERAS_BACKEND": "torch", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    worker = subprocess.run([sys.executable, "-c", _SNAPSHOT_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=240)
    assert worker.returncode == 0, worker.stderr[-3000:]
    first, *later = json.loads(worker.stdout.strip().splitlines()[-1])
    assert len(first) == 4 and all(storages == first for storages in later)

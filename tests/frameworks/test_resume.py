"""Resumed runs lose nothing (issue 25): a PyTorch run resumed from a checkpoint in a new
process (`watch(first_step=None)`) and a Keras `fit` resumed from a saved model
(`optimizer.iterations` restored) continue their steps, and both parts survive in both
TensorBoard loaders; one active writer per run directory (PyTorch handles, Keras callbacks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import resume_worker  # noqa: E402
from framework_servers import both_loaders, export  # noqa: E402
from tb_wur_plugin import torch as wur_torch  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

EVERY = 3
FIRST_STEPS, MORE_STEPS = 7, 8  # steps 0-6, then 7-14: logged 0, 3, 6 | 9, 12
LOGGED = [0, 3, 6, 9, 12]
WORKER = resume_worker.__file__


def _torch_run(run_dir: str, checkpoint: str, out: str) -> dict[str, dict[int, float]]:
    """Train, checkpoint, resume in a new process; the reference ratios of both parts."""
    model, optimizer = resume_worker.model_and_optimizer()
    handle = wur_torch.watch(optimizer, model, run_dir, every=EVERY)
    assert handle.steps == 0  # a fresh Adam: from 0
    want = resume_worker.train(model, optimizer, FIRST_STEPS, EVERY, 0, seed=0)
    handle.remove()
    resume_worker.save(model, optimizer, checkpoint)
    subprocess.run(
        [sys.executable, WORKER, run_dir, checkpoint, str(MORE_STEPS), str(EVERY), out],
        check=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    with open(out) as f:
        resumed = json.load(f)
    assert resumed["first_step"] == FIRST_STEPS  # Adam's restored state[p]["step"]
    assert resumed["steps"] == FIRST_STEPS + MORE_STEPS
    for tag, points in resumed["ratios"].items():
        want[tag].update({int(step): ratio for step, ratio in points.items()})
    return want


def _keras_run(log_dir: str, saved: str, out: str) -> dict[str, dict[int, float]]:
    """Fit, save the model (optimizer included), fit more in a new process after
    `keras.saving.load_model`; the reference ratios of both parts."""
    model = resume_worker.keras_model()
    want = resume_worker.keras_fit(model, log_dir, FIRST_STEPS, EVERY, seed=0)
    assert int(model.optimizer.iterations) == FIRST_STEPS
    model.save(saved)
    subprocess.run(
        [sys.executable, WORKER, "--keras", log_dir, saved, str(MORE_STEPS), str(EVERY), out],
        check=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    with open(out) as f:
        resumed = json.load(f)
    assert resumed["first_step"] == FIRST_STEPS  # optimizer.iterations, restored
    assert resumed["steps"] == FIRST_STEPS + MORE_STEPS
    assert sorted(resumed["ratios"]) == sorted(want)  # the same tags after loading
    for tag, points in resumed["ratios"].items():
        want[tag].update({int(step): ratio for step, ratio in points.items()})
    return want


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{run: reference ratios} of the resumed runs, all in one logdir."""
    logdir = str(tmp_path_factory.mktemp("resumed"))
    work = tmp_path_factory.mktemp("resume_work")
    runs = {"torch": _torch_run(os.path.join(logdir, "torch"), str(work / "checkpoint.pt"),
                                str(work / "resumed.json"))}
    pytest.importorskip("keras")
    runs["keras/train"] = _keras_run(os.path.join(logdir, "keras"), str(work / "model.keras"),
                                     str(work / "keras_resumed.json"))
    return logdir, runs


def test_the_references_continue_their_steps(runs):
    _, references = runs
    for run, ratios in references.items():
        assert ratios, run
        for tag, points in ratios.items():
            assert sorted(points) == LOGGED, (run, tag)


@pytest.mark.parametrize("run", ["torch", "keras/train"])
def test_both_parts_of_a_resumed_run_survive_in_both_loaders(runs, run):
    logdir, references = runs
    with both_loaders(logdir, {r: LOGGED[-1] for r in references}) as servers:
        for loader, server in servers.items():
            got = export(server, run)
            want = references[run]
            assert sorted(got) == sorted(want), (loader, run)
            for tag in want:
                assert sorted(got[tag]) == LOGGED, (loader, run, tag)
                np.testing.assert_allclose(
                    [got[tag][s] for s in LOGGED], [want[tag][s] for s in LOGGED],
                    rtol=1e-5, err_msg=f"{loader} {run} {tag}",
                )


# --- first_step ----------------------------------------------------------------------------


class _Capture(SummaryWriter):
    def __init__(self, logdir):
        super().__init__(logdir)
        self.steps: list[int] = []

    def add_ratios(self, ratios, step, **kwargs):
        self.steps.append(step)
        super().add_ratios(ratios, step, **kwargs)


def _steps(model, optimizer, n):
    for _ in range(n):
        model(torch.ones(2, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def test_an_explicit_first_step(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = _Capture(str(tmp_path / "run"))
    handle = wur_torch.watch(optimizer, model, writer, every=4, first_step=5)
    assert handle.steps == 5
    _steps(model, optimizer, 8)  # steps 5-12
    handle.remove()
    assert writer.steps == [8, 12] and handle.steps == 13
    writer = _Capture(str(tmp_path / "other"))
    with wur_torch.watch(optimizer, model, writer, every=2, first_step=np.int64(4)):
        _steps(model, optimizer, 3)  # steps 4-6
    assert writer.steps == [4, 6]


def test_first_step_none_counts_the_optimizers_updates(tmp_path, recwarn):
    model = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(model.parameters(), lr=1e-2)
    with wur_torch.watch(adam, model, str(tmp_path / "fresh")) as handle:
        assert handle.steps == 0  # a fresh optimizer
    _steps(model, adam, 5)  # not watched
    writer = _Capture(str(tmp_path / "adam"))
    with wur_torch.watch(adam, model, writer, every=3) as handle:
        assert handle.steps == 5  # state[p]["step"], a tensor
        _steps(model, adam, 3)  # steps 5, 6, 7
    assert writer.steps == [6]
    adam.state[model.bias]["step"] = 11  # a number; the largest one counts
    with wur_torch.watch(adam, model, str(tmp_path / "number")) as handle:
        assert handle.steps == 11
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)  # keeps no state
    _steps(model, sgd, 2)
    with wur_torch.watch(sgd, model, str(tmp_path / "sgd")) as handle:
        assert handle.steps == 0
    assert not recwarn.list
    momentum = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _steps(model, momentum, 2)  # momentum buffers, no count
    with pytest.warns(UserWarning, match="first_step") as caught:
        handle = wur_torch.watch(momentum, model, str(tmp_path / "momentum"))
    assert handle.steps == 0 and caught[0].filename == __file__
    handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when given
        with wur_torch.watch(momentum, model, str(tmp_path / "given"), first_step=2) as handle:
            assert handle.steps == 2


def test_first_step_bad_arguments(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for bad in (1.0, "3", True, [1]):
        with pytest.raises(TypeError, match="first_step"):
            wur_torch.watch(optimizer, model, str(tmp_path), first_step=bad)
    with pytest.raises(ValueError, match="first_step must be >= 0, got -1"):
        wur_torch.watch(optimizer, model, str(tmp_path), first_step=-1)
    assert not os.listdir(tmp_path)  # no file opened


# --- one active writer per run directory ----------------------------------------------------


def _event_files(directory) -> list[str]:
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_a_second_handle_on_a_run_directory_raises_until_the_first_is_removed(tmp_path):
    model = torch.nn.Linear(3, 2)
    first_optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(model.parameters(), lr=0.1)
    run_dir = str(tmp_path / "run")
    first = wur_torch.watch(first_optimizer, model, run_dir, every=1)
    files = _event_files(run_dir)
    message = re.escape(repr(run_dir)) + ".*remove\\(\\) on the first handle"
    with pytest.raises(RuntimeError, match=message):
        wur_torch.watch(other, model, run_dir)
    for spelling in (run_dir + os.sep, os.path.relpath(run_dir),
                     os.path.join(str(tmp_path), ".", "run")):
        with pytest.raises(RuntimeError, match="already the run directory"):
            wur_torch.watch(other, model, spelling)
    with SummaryWriter(run_dir) as writer:  # a writer of the same directory
        with pytest.raises(RuntimeError, match="already the run directory"):
            wur_torch.watch(other, model, writer)
    assert len(_event_files(run_dir)) == len(files) + 1  # only the writer's own file
    with wur_torch.watch(other, model, str(tmp_path / "elsewhere")):  # another run: fine
        pass
    _steps(model, first_optimizer, 2)
    first.remove()  # frees the directory
    with wur_torch.watch(other, model, run_dir) as second:
        assert second.active
    with wur_torch.watch(first_optimizer, model, run_dir):  # freed again
        pass


def test_one_writer_passed_to_two_handles_is_one_run(tmp_path):
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    model = torch.nn.Linear(3, 2)
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(2)]
    for writer in (SummaryWriter(str(tmp_path / "ours")), TorchWriter(str(tmp_path / "torch"))):
        handle = wur_torch.watch(optimizers[0], model, writer)
        with pytest.raises(RuntimeError, match="remove\\(\\) on the first handle"):
            wur_torch.watch(optimizers[1], model, writer)
        handle.remove()
        wur_torch.watch(optimizers[1], model, writer).remove()  # freed
        writer.close()


def test_handles_of_other_ranks_claim_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(wur_torch, "_rank", lambda: 1)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handles = [wur_torch.watch(optimizer, model, str(tmp_path)) for _ in range(2)]
    for handle in handles:
        handle.remove()


def test_two_keras_callbacks_on_one_log_dir_raise_and_the_failed_fit_frees_it(tmp_path):
    keras = pytest.importorskip("keras")
    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 2), "float32")
    log_dir = str(tmp_path / "logs")
    callbacks = [WeightUpdateRatioCallback(log_dir, update_freq=1) for _ in range(2)]
    with pytest.raises(RuntimeError, match=re.escape(os.path.join(log_dir, "train"))):
        model.fit(x, y, batch_size=2, verbose=0, callbacks=callbacks)
    # The fit that raised holds nothing: a new callback, or the first one again, may write.
    model.fit(x, y, batch_size=2, verbose=0,
              callbacks=[WeightUpdateRatioCallback(log_dir, update_freq=1)])
    model.fit(x, y, batch_size=2, verbose=0, callbacks=callbacks[:1])
    # During a fit, a PyTorch handle of the same run directory raises too.
    seen = []

    class WatchDuringFit(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            linear = torch.nn.Linear(1, 1)
            with pytest.raises(RuntimeError, match="WeightUpdateRatioCallback"):
                wur_torch.watch(torch.optim.SGD(linear.parameters(), lr=1), linear,
                                os.path.join(log_dir, "train"))
            seen.append(batch)

    model.fit(x, y, batch_size=2, verbose=0,
              callbacks=[WeightUpdateRatioCallback(log_dir, update_freq=1), WatchDuringFit()])
    assert seen == [0, 1]

"""tb_wur_plugin.lightning.WeightUpdateRatioCallback (issue 26 §2): automatic optimization,
manual optimization with two optimizers, a fit resumed from a checkpoint, and DDP on two
processes; ratios against
a numpy reference of the parameters around each update (the torch optimizers' own step
hooks), steps = trainer.global_step before the update, read back through both TensorBoard
loaders in the TensorBoardLogger's run directory beside its own scalars; stop_on ends the
fit at the step that fires."""

from __future__ import annotations

import glob
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402
from helpers import read_packed  # noqa: E402
from lightning_ddp_worker import Regression  # noqa: E402
from suite_paths import SUPPORT  # noqa: E402
from trainer_helpers import UpdateReference, assert_matches, read_back  # noqa: E402
from tb_wur_plugin.lightning import WeightUpdateRatioCallback  # noqa: E402

STEPS, EVERY = 30, 5
LOGGED = list(range(0, STEPS, EVERY))
RUN = "lightning_logs/version_0"


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                       batch_size=8)


class _Auto(Regression):
    def __init__(self):
        super().__init__()
        self.references: list[UpdateReference] = []

    def on_train_start(self):
        self.references = [UpdateReference(self.trainer.optimizers[0], self,
                                           first_step=self.trainer.global_step)]


class _Manual(L.LightningModule):
    """Two optimizers stepped by hand: `a`'s every batch, `b`'s every other batch, so that
    `trainer.global_step` (which counts both) runs 0, 1, 2 | 3 | 4, 5 | 6 | ..."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.automatic_optimization = False
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 1)
        self.references: list[UpdateReference] = []

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.b(torch.tanh(self.a(x))), y)
        self.log("loss", loss)
        opts = self.optimizers()
        stepped = opts if index % 2 == 0 else opts[:1]
        for opt in stepped:
            opt.zero_grad()
        self.manual_backward(loss)
        for opt in stepped:
            opt.step()

    def configure_optimizers(self):
        return [torch.optim.Adam(self.a.parameters(), lr=1e-2),
                torch.optim.SGD(self.b.parameters(), lr=1e-2)]

    def on_train_start(self):
        opts = self.trainer.optimizers
        step_of = lambda: self.trainer.global_step  # noqa: E731
        self.references = [UpdateReference(opts[0], self.a, prefix="optimizer_0/a/", step_of=step_of),
                           UpdateReference(opts[1], self.b, prefix="optimizer_1/b/", step_of=step_of)]


def _fit(module, save_dir, max_steps, ckpt_path=None, spectral=False, callback=None, version=0):
    callback = callback or WeightUpdateRatioCallback(spectral=spectral)
    trainer = L.Trainer(max_steps=max_steps, log_every_n_steps=EVERY, accelerator="cpu",
                        logger=TensorBoardLogger(str(save_dir), version=version),
                        callbacks=[callback], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, _data(), ckpt_path=ckpt_path)
    for reference in module.references:
        reference.remove()
    return trainer


def test_automatic_optimization(tmp_path):
    module = _Auto()
    _fit(module, tmp_path, STEPS, spectral=True)
    assert module.references[0].step == STEPS
    for loader, (got, scalars) in read_back(str(tmp_path), RUN, LOGGED[-1]).items():
        assert_matches(got, module.references[0].at(LOGGED))
        assert "loss" in scalars, (loader, scalars)
    spectral = read_packed(str(tmp_path / RUN)).spectral  # spectral=True: the matrices
    assert spectral, "no spectral ratios"
    assert_matches({t: dict(points) for t, points in spectral.items()},
                   module.references[0].at(LOGGED, spectral=True), rtol=1e-3)


def _first_at_or_after_each_multiple(updates: list[int], every: int) -> list[int]:
    """The steps, among an optimizer's `updates`, at or after each multiple of `every`."""
    logged, next_multiple = [], 0
    for step in updates:
        if step >= next_multiple:
            logged.append(step)
            next_multiple = (step // every + 1) * every
    return logged


def test_manual_optimization_two_optimizers_in_one_run(tmp_path):
    module = _Manual()
    trainer = _fit(module, tmp_path, 45)  # global_step counts both optimizers' steps
    a, b = module.references
    assert trainer.global_step == 45 and len(a.updates) + len(b.updates) == 45
    assert sorted(a.updates + b.updates) == list(range(45))  # one count over both
    want = {}
    for reference in (a, b):
        logged = _first_at_or_after_each_multiple(reference.updates, EVERY)
        assert len(logged) == 9, logged  # once per EVERY global steps each
        want.update(reference.at(logged))
    assert any(s % EVERY for s in _first_at_or_after_each_multiple(b.updates, EVERY))
    last = max(max(points) for points in want.values())
    for loader, (got, scalars) in read_back(str(tmp_path), RUN, last).items():
        assert_matches(got, want)  # optimizer_0/a/..., optimizer_1/b/... in one run
        assert "loss" in scalars, (loader, scalars)
    assert not (tmp_path / RUN / "optimizer_0").exists()


def test_resumed_fit_continues_its_steps(tmp_path):
    half = STEPS // 2
    first = _Auto()
    trainer = _fit(first, tmp_path, half)
    checkpoint = str(tmp_path / "half.ckpt")
    trainer.save_checkpoint(checkpoint)
    second = _Auto()
    _fit(second, tmp_path, STEPS, ckpt_path=checkpoint)
    assert second.references[0].step == STEPS
    want = first.references[0].at([s for s in LOGGED if s < half])
    for tag, points in second.references[0].at([s for s in LOGGED if s >= half]).items():
        want[tag] = {**want[tag], **points}
    for loader, (got, scalars) in read_back(str(tmp_path), RUN, LOGGED[-1]).items():
        assert_matches(got, want)
        assert "loss" in scalars, (loader, scalars)


def test_ddp_two_processes_write_once(tmp_path):
    """strategy="ddp_fork" on 2 CPU processes: each rank's callback watches, rank 0 alone
    writes one event file of ratios (beside the logger's own), equal to the reference of
    the full parameters (every rank holds them under DDP), steps = trainer.global_step."""
    out = str(tmp_path / "result.json")
    worker = os.path.join(SUPPORT, "lightning_ddp_worker.py")
    subprocess.run([sys.executable, worker, str(tmp_path), str(STEPS), str(EVERY), out],
                   check=True, timeout=300, capture_output=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    ranks = [json.load(open(f"{out}.rank_{r}")) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [STEPS, STEPS]
    for tag, points in ranks[0]["ratios"].items():  # DDP: the same updates on both ranks
        np.testing.assert_allclose([ranks[1]["ratios"][tag][s] for s in points],
                                   list(points.values()), rtol=1e-5, err_msg=tag)
    files = glob.glob(str(tmp_path / RUN / "events.out.tfevents.*"))
    assert len([f for f in files if f.endswith(".wur")]) == 1, files
    want = {t: {s: p[str(s)] for s in LOGGED} for t, p in ranks[0]["ratios"].items()}
    for loader, (got, scalars) in read_back(str(tmp_path), RUN, LOGGED[-1]).items():
        assert_matches(got, want)
        assert "loss" in scalars, (loader, scalars)


def test_the_callback_pickles_before_and_after_a_fit(tmp_path):
    """strategy="ddp_spawn" pickles the trainer's callbacks to its ranks (the DDP test forks
    them instead): the callback survives a pickle round trip, new and after a fit, and the
    copy logs its own run."""
    callback = WeightUpdateRatioCallback(every=2)
    assert pickle.loads(pickle.dumps(callback)).every == 2
    _fit(_Auto(), tmp_path, 4, callback=callback)
    _fit(_Auto(), tmp_path, 4, callback=pickle.loads(pickle.dumps(callback)), version=1)
    for version in (0, 1):
        run = tmp_path / "lightning_logs" / f"version_{version}"
        assert glob.glob(str(run / "events.out.tfevents.*.wur")), version


def test_no_tensorboard_logger_and_no_log_dir(tmp_path):
    trainer = L.Trainer(max_steps=1, logger=False, accelerator="cpu", enable_progress_bar=False,
                        callbacks=[WeightUpdateRatioCallback()], enable_checkpointing=False,
                        default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match="TensorBoardLogger"):
        trainer.fit(_Auto(), _data())


class _Poisoned(Regression):
    """`Regression` whose first layer's weight gets one NaN element just before the update
    at `trainer.global_step == at`."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_before_optimizer_step(self, optimizer):
        if self.trainer.global_step == self.at:
            with torch.no_grad():
                self.net[0].weight[0, 0] = float("nan")


def test_stop_on_ends_the_fit_at_the_step_that_fires(tmp_path, caplog):
    """stop_on={"nan"}: the NaN made before update 10 (a logged step) fires that layer's
    flag at step 10 and the fit ends after that batch (global_step 11 of 30)."""
    told = []
    callback = WeightUpdateRatioCallback(stop_on={"nan"}, on_flag=told.append)
    trainer = L.Trainer(max_steps=STEPS, log_every_n_steps=EVERY, accelerator="cpu",
                        logger=TensorBoardLogger(str(tmp_path), version=0),
                        callbacks=[callback], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with caplog.at_level("WARNING", logger="tb_wur_plugin"):
        trainer.fit(_Poisoned(10), _data())
    assert trainer.global_step == 11
    assert [(f.tag, f.reason, f.since, f.step) for f in callback.flags] == [
        ("net/0/weight", "nan", 10, 10)]
    assert told == callback.flags
    assert [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"] == [
        f"WUR step 10: net/0/weight: {callback.flags[0].text}"]


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="spectral"):
        WeightUpdateRatioCallback(spectral="yes")
    with pytest.raises(TypeError, match="histograms"):
        WeightUpdateRatioCallback(histograms=1)
    with pytest.raises(TypeError, match="not a string"):
        WeightUpdateRatioCallback(stop_on="nan")
    with pytest.raises(ValueError, match="unknown reasons"):
        WeightUpdateRatioCallback(stop_on={"exploding"})
    with pytest.raises(TypeError, match="on_flag"):
        WeightUpdateRatioCallback(on_flag="print")

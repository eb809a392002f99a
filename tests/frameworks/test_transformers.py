"""tb_wur_plugin.transformers.WeightUpdateRatioCallback (issue 26 §1): a tiny GPT-2 built
from a config trained by `Trainer` (gradient accumulation 2, logging_steps=5); ratios
against a numpy reference of the parameters around each update (the torch optimizer's own
step hooks), steps = global_step before the update, read back through both TensorBoard
loaders in the same run directory as the Trainer's own scalars; resumed from a checkpoint;
DDP on two processes; stop_on ends the run at the update whose logged step fires."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from helpers import read_packed  # noqa: E402
from suite_paths import SUPPORT  # noqa: E402
from transformers_ddp_worker import Tokens  # noqa: E402
from trainer_helpers import UpdateReference, assert_matches, read_back  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402

STEPS, LOGGING = 30, 5
LOGGED = list(range(0, STEPS, LOGGING))


def _model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _trainer(output_dir, max_steps, callback, model=None, save_steps=None):
    model = model or _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    args = transformers.TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, logging_steps=LOGGING, report_to=["tensorboard"],
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   optimizers=(optimizer, None), callbacks=[callback])
    return trainer, optimizer, model


def test_trainer_ratios_steps_and_run_directory(tmp_path):
    trainer, optimizer, model = _trainer(tmp_path, STEPS,
                                         WeightUpdateRatioCallback(spectral=True))
    reference = UpdateReference(optimizer, model)
    trainer.train()
    reference.remove()
    assert reference.step == STEPS  # one update per 2 micro-batches
    runs = os.listdir(tmp_path / "runs")
    assert len(runs) == 1, runs  # the Trainer's own TensorBoard directory, no other
    run = "runs/" + runs[0]
    want = reference.at(LOGGED)
    for loader, (got, scalars) in read_back(str(tmp_path), run, LOGGED[-1]).items():
        assert_matches(got, want)
        assert "train/loss" in scalars, (loader, scalars)
    spectral = read_packed(str(tmp_path / run)).spectral  # spectral=True: the matrices
    assert_matches({t: dict(points) for t, points in spectral.items()},
                   reference.at(LOGGED, spectral=True), rtol=1e-3)


def test_resumed_training_continues_its_steps(tmp_path, monkeypatch):
    logdir = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logdir))
    half = STEPS // 2
    trainer, optimizer, model = _trainer(tmp_path / "out", half, WeightUpdateRatioCallback(),
                                         save_steps=half)
    first = UpdateReference(optimizer, model)
    trainer.train()
    first.remove()
    checkpoint = tmp_path / "out" / f"checkpoint-{half}"
    assert checkpoint.is_dir()
    trainer, optimizer, model = _trainer(tmp_path / "out", STEPS, WeightUpdateRatioCallback())
    second = UpdateReference(optimizer, model, first_step=half)
    trainer.train(resume_from_checkpoint=str(checkpoint))
    second.remove()
    assert second.step == STEPS
    want = {**first.at([s for s in LOGGED if s < half])}
    for tag, points in second.at([s for s in LOGGED if s >= half]).items():
        want[tag] = {**want[tag], **points}
    for loader, (got, scalars) in read_back(str(tmp_path / "tb"), ".", LOGGED[-1]).items():
        assert_matches(got, want)
        assert "train/loss" in scalars, (loader, scalars)


class _PoisonAt(transformers.TrainerCallback):
    """Makes one weight element NaN just before the update at `step` (after clipping)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            with torch.no_grad():
                model.transformer.h[1].mlp.c_proj.weight[0, 0] = float("nan")


def test_stop_on_ends_the_run_at_the_update_that_fires(tmp_path, caplog):
    """stop_on={"nan"}: a weight made NaN before update 10 (a logged step) fires the NaN
    flag of that layer alone at step 10; the Trainer stops after that update (global_step
    11 of 30), and the flag was logged and passed to on_flag."""
    told = []
    callback = WeightUpdateRatioCallback(stop_on={"nan"}, on_flag=told.append)
    trainer, _, _ = _trainer(tmp_path, STEPS, callback)
    trainer.add_callback(_PoisonAt(10))
    with caplog.at_level("WARNING", logger="tb_wur_plugin"):
        trainer.train()
    assert trainer.state.global_step == 11
    assert [(f.tag, f.reason, f.since, f.step) for f in callback.flags] == [
        ("transformer/h/1/mlp/c_proj/weight", "nan", 10, 10)]
    assert told == callback.flags
    assert [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"] == [
        f"WUR step 10: transformer/h/1/mlp/c_proj/weight: {callback.flags[0].text}"]


def test_no_stop_on_runs_to_the_end_with_the_flags(tmp_path):
    """Without stop_on the same defect only flags: the run goes on to max_steps."""
    callback = WeightUpdateRatioCallback()
    trainer, _, _ = _trainer(tmp_path, 15, callback)
    trainer.add_callback(_PoisonAt(10))
    trainer.train()
    assert trainer.state.global_step == 15
    assert ("transformer/h/1/mlp/c_proj/weight", "nan", 10, 10) in [
        (f.tag, f.reason, f.since, f.step) for f in callback.flags]


def test_bad_arguments():
    with pytest.raises(ValueError, match="every"):
        WeightUpdateRatioCallback(every=0)
    with pytest.raises(TypeError, match="every"):
        WeightUpdateRatioCallback(every=2.5)
    with pytest.raises(TypeError, match="not a string"):
        WeightUpdateRatioCallback(stop_on="nan")
    with pytest.raises(ValueError, match="unknown reasons"):
        WeightUpdateRatioCallback(stop_on={"exploding"})
    with pytest.raises(ValueError, match="patience"):
        WeightUpdateRatioCallback(patience=0)


def test_ddp_two_processes_write_once(tmp_path):
    """`torch.distributed.run` with 2 CPU processes (gloo, accelerate's DDP): each rank's
    callback watches, rank 0 alone writes one event file of ratios into the Trainer's own
    TensorBoard directory, equal to the full parameters' reference (every rank holds them),
    steps = global_step before the update."""
    steps = 20
    out = str(tmp_path / "result.json")
    worker = os.path.join(SUPPORT, "transformers_ddp_worker.py")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         worker, str(tmp_path / "out"), str(steps), str(LOGGING), out],
        timeout=300, capture_output=True, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.load(open(f"{out}.rank_{r}")) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [steps, steps]
    for tag, points in ranks[0]["ratios"].items():  # DDP: the same updates on both ranks
        np.testing.assert_allclose([ranks[1]["ratios"][tag][s] for s in points],
                                   list(points.values()), rtol=1e-5, err_msg=tag)
    (run_dir,) = glob.glob(str(tmp_path / "out" / "runs" / "*"))
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    assert len([f for f in files if f.endswith(".wur")]) == 1, files
    logged = list(range(0, steps, LOGGING))
    want = {t: {s: p[str(s)] for s in logged} for t, p in ranks[0]["ratios"].items()}
    run = "out/runs/" + os.path.basename(run_dir)
    for loader, (got, scalars) in read_back(str(tmp_path), run, logged[-1]).items():
        assert_matches(got, want)
        assert "train/loss" in scalars, (loader, scalars)

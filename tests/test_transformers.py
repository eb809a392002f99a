"""tb_wur_plugin.transformers.WeightUpdateRatioCallback (issue 26 §1): a tiny GPT-2 built
from a config trained by `Trainer` (gradient accumulation 2, logging_steps=5); ratios
against a numpy reference of the parameters around each update (the torch optimizer's own
step hooks), steps = global_step before the update, read back through both TensorBoard
loaders in the same run directory as the Trainer's own scalars; resumed from a checkpoint."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from helpers import read_packed  # noqa: E402
from trainer_helpers import UpdateReference, assert_matches, read_back  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402

STEPS, LOGGING = 30, 5
LOGGED = list(range(0, STEPS, LOGGING))


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 256, length: int = 16, vocab: int = 64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


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
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(),
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


def test_bad_arguments():
    with pytest.raises(ValueError, match="every"):
        WeightUpdateRatioCallback(every=0)
    with pytest.raises(TypeError, match="every"):
        WeightUpdateRatioCallback(every=2.5)

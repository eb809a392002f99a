"""The trainer callbacks' cost (issue 26): a tiny GPT-2 trained for STEPS updates by the
Hugging Face `Trainer.train()` and by a Lightning `Trainer.fit()`, each with no callback,
with the library's `WeightUpdateRatioCallback` (`tb_wur_plugin.transformers`,
`tb_wur_plugin.lightning`), and with `tb_wur_plugin.torch.watch` attached to the same torch
optimizer by a plain callback; every=1 (every step logged) and every=10**9 (no step logged
after step 0). Runs are interleaved in one process; the median time of each, as a ratio to
the same trainer's bare run.

    .venv/bin/python benchmarks/trainers.py [--repeats 5] [--steps 40] [--trainers hf lightning]
    .venv/bin/python benchmarks/trainers.py --smoke     # 1 repeat of 3 steps, no warm-up
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from tb_wur_plugin import lightning as wur_lightning  # noqa: E402
from tb_wur_plugin.torch import watch  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=4096, length=64, vocab=512):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _Watch(transformers.TrainerCallback):
    """torch.watch by hand on the same optimizer: the baseline the callback must match."""

    def __init__(self, log_dir, every):
        self.log_dir, self.every, self.handle = log_dir, every, None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        self.handle = watch(optimizer.optimizer, model, self.log_dir, every=self.every)

    def on_train_end(self, *a, **kw):
        self.handle.remove()


class _LightningWatch(L.Callback):
    """torch.watch by hand on the Lightning trainer's optimizer: the Lightning baseline."""

    def __init__(self, log_dir, every):
        self.log_dir, self.every, self.handle = log_dir, every, None

    def on_train_start(self, trainer, pl_module):
        self.handle = watch(trainer.optimizers[0], pl_module, self.log_dir, every=self.every)

    def on_train_end(self, trainer, pl_module):
        self.handle.remove()


class _LightningGPT2(L.LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, _):
        return self.model(**batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=5e-5)


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=512,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _run_lightning(kind: str, every: int, steps: int) -> float:
    module = _LightningGPT2(_gpt2())
    with tempfile.TemporaryDirectory() as out:
        callbacks = {"bare": [],
                     "callback": [wur_lightning.WeightUpdateRatioCallback(log_dir=out, every=every)],
                     "watch": [_LightningWatch(os.path.join(out, "w"), every)]}[kind]
        trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False,
                            callbacks=callbacks, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        data = torch.utils.data.DataLoader(_Tokens(), batch_size=8)
        start = time.perf_counter()
        trainer.fit(module, data)
        return time.perf_counter() - start


def _run(kind: str, every: int, steps: int) -> float:
    model = _gpt2()
    with tempfile.TemporaryDirectory() as out:
        callbacks = {"bare": [], "callback": [WeightUpdateRatioCallback(every=every)],
                     "watch": [_Watch(os.path.join(out, "w"), every)]}[kind]
        args = transformers.TrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=8, logging_steps=10**6,
            report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no", seed=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(),
                                       callbacks=callbacks)
        start = time.perf_counter()
        trainer.train()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trainers", nargs="+", choices=sorted(RUNS), default=sorted(RUNS))
    parser.add_argument("--smoke", action="store_true", help="1 repeat of 3 steps, no warm-up")
    a = parser.parse_args()
    if a.smoke:
        a.repeats, a.steps = 1, 3
    cases = [(t, k, e) for t in a.trainers for e in (1, 10**9)
             for k in ("bare", "callback", "watch")]
    times = {c: [] for c in cases}
    if not a.smoke:  # a warm-up for the timings (a smoke run's are not read)
        for trainer in a.trainers:
            RUNS[trainer]("bare", 1, 5)
    for _ in range(a.repeats):
        for trainer, kind, every in cases:
            times[(trainer, kind, every)].append(RUNS[trainer](kind, every, a.steps))
    for trainer in a.trainers:
        for every in (1, 10**9):
            bare = statistics.median(times[(trainer, "bare", every)])
            for kind in ("bare", "callback", "watch"):
                t = statistics.median(times[(trainer, kind, every)])
                print(f"{trainer:<10} every={every:<10} {kind:<8} {1e3 * t / a.steps:8.2f} "
                      f"ms/step  x{t / bare:.3f} of bare")


RUNS = {"hf": _run, "lightning": _run_lightning}


if __name__ == "__main__":
    main()

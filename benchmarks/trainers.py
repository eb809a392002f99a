"""The trainer callbacks' cost (issue 26): a GPT-2 trained for STEPS updates by the
Hugging Face `Trainer.train()` and by a Lightning `Trainer.fit()`, each with no callback,
with the library's `WeightUpdateRatioCallback` (`tb_wur_plugin.transformers`,
`tb_wur_plugin.lightning`), and with `tb_wur_plugin.torch.watch` attached to the same torch
optimizer by a plain callback; every=1 (every step logged) and every=10**9 (no step logged
after step 0). Runs are interleaved in one process; per run, the whole training call's time
per step (setup included) and the steady time per step (from the end of update STEPS // 4 to
the end of training: no setup, no first steps; the device synchronized at both ends); the
medians over repeats, as ratios to the same trainer's bare run. Each repeat runs every case
once, in a random order. Then, per repeat, the steady time of the callback over that of
`watch` by hand, beside the two bare runs' (identical work: the noise floor).

Models (--model): tiny, a 4-layer GPT-2 (n_embd 128, vocab 512, batch 8 × 64 tokens);
small, GPT-2 small (12 layers, n_embd 768, 12 heads, vocab 50257; batch 8 × 512 random
tokens); micro, a 2-layer GPT-2 (n_embd 32, vocab 128, batch 8 × 16 tokens), --smoke's.
Random initialisation, nothing downloaded. On --device cuda the matrix products run in TF32
(`torch.set_float32_matmul_precision("high")`), as GPU training runs do.

--fsdp (Hugging Face, --device cuda): every run is a `Trainer` with `fsdp="full_shard"` in
this one process (a distributed environment of one rank is set up when no launcher set one:
accelerate enables FSDP only on GPUs, and falls back to DDP on the CPU).

--check (Hugging Face): before the timings, one 3-step run with the callback (every=1) and a
reference taken by hand around the torch optimizer's own step hooks: ‖Δw‖₂/‖w‖₂ of every
full parameter in float64 (an FSDP2 DTensor gathered with `full_tensor()`); the callback's
ratios are read back (`tb_wur_plugin.read_ratios`) and compared, and the wrapping printed.
With --fsdp, once per FSDP version (1: `FullyShardedDataParallel`, 2: `fully_shard`).
The process exits with status 1 when a check fails.

    .venv/bin/python benchmarks/trainers.py [--repeats 5] [--steps 40] [--trainers hf lightning]
    .venv/bin/python benchmarks/trainers.py --smoke --check  # 1 repeat of 3 micro steps, no warm-up
    python benchmarks/trainers.py --device cuda --model small --trainers hf --fsdp --check
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from tb_wur_plugin import lightning as wur_lightning  # noqa: E402
from tb_wur_plugin import read_ratios  # noqa: E402
from tb_wur_plugin.torch_internals import shards  # noqa: E402
from tb_wur_plugin.torch import watch  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402

MODELS = {
    "tiny": dict(n_layer=4, n_embd=128, n_head=4, vocab_size=512, n_positions=64),
    "small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    "micro": dict(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=16),
}
TOKENS = {"tiny": 64, "small": 512, "micro": 16}  # per sequence; 8 sequences a batch


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, model: str, n: int = 4096):
        self.ids = torch.randint(0, MODELS[model]["vocab_size"], (n, TOKENS[model]),
                                 generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class _Clock:
    """The steady time per step: from the end of update `warm` to the end of training."""

    def __init__(self, warm: int, steps: int):
        self.warm, self.steps, self.start, self.end = warm, steps, math.nan, math.nan

    def step_ended(self, global_step: int) -> None:
        if global_step == self.warm:
            _synchronize()
            self.start = time.perf_counter()

    def train_ended(self) -> None:
        _synchronize()
        self.end = time.perf_counter()

    def per_step(self) -> float:
        return (self.end - self.start) / (self.steps - self.warm)


class _HFClock(transformers.TrainerCallback):
    def __init__(self, clock: _Clock):
        self.clock = clock

    def on_step_end(self, args, state, control, **kw):
        self.clock.step_ended(state.global_step)

    def on_train_end(self, args, state, control, **kw):
        self.clock.train_ended()


class _LightningClock(L.Callback):
    def __init__(self, clock: _Clock):
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.step_ended(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        self.clock.train_ended()


class _Watch(transformers.TrainerCallback):
    """torch.watch by hand on the same optimizer: the baseline the callback must match."""

    def __init__(self, log_dir, every):
        self.log_dir, self.every, self.handle = log_dir, every, None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        self.handle = watch(optimizer.optimizer, model, self.log_dir, every=self.every)

    def on_train_end(self, *a, **kw):
        self.handle.remove()


class _FullReference(transformers.TrainerCallback):
    """{tag: {step: ‖Δw‖₂/‖w‖₂}} of every update, in float64, of the full parameters of the
    model the Trainer hands its callbacks, taken around the torch optimizer's step by its own
    step hooks (registered after the callback's, so they see the same weights); and a
    description of how the model is wrapped."""

    def __init__(self):
        self.ratios: dict[str, dict[int, float]] = {}
        self.wrapping = ""
        self._hooks: list[Any] = []
        self._before: dict[str, torch.Tensor] = {}

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        self.model, self.state = model, state
        inner = optimizer.optimizer  # accelerate's AcceleratedOptimizer wraps the torch one
        self._hooks = [inner.register_step_pre_hook(self._pre),
                       inner.register_step_post_hook(self._post)]
        self.wrapping = _wrapping(model)

    def on_train_end(self, *a, **kw):
        for hook in self._hooks:
            hook.remove()

    def _full_parameters(self) -> dict[str, torch.Tensor]:
        from torch.distributed.tensor import DTensor

        full = {}
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                tensor = p.full_tensor() if isinstance(p, DTensor) else p
                tag = "/".join(s for s in name.split(".") if s != "_fsdp_wrapped_module")
                full[tag] = tensor.detach().double().clone()
        return full

    def _pre(self, *_):
        self._step = int(self.state.global_step)
        self._before = self._full_parameters()

    def _post(self, *_):
        for tag, after in self._full_parameters().items():
            before = self._before[tag]
            ratio = float((after - before).norm() / before.norm())
            self.ratios.setdefault(tag, {})[self._step] = ratio


def _wrapping(model: torch.nn.Module) -> str:
    """The model's class, its FSDP1 modules (and their sharding strategy), its DTensor
    parameters, and whether `watch` takes its sharded path for it."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    fsdp1 = [m for m in model.modules() if isinstance(m, FullyShardedDataParallel)]
    parameters = list(model.parameters())
    dtensors = sum(isinstance(p, DTensor) for p in parameters)
    text = f"{type(model).__name__}"
    if fsdp1:
        text += f", {len(fsdp1)} FullyShardedDataParallel modules ({fsdp1[0].sharding_strategy})"
    text += f", {dtensors} of {len(parameters)} parameters DTensor"
    sharded = torch.distributed.is_initialized() and shards.is_sharded(model)
    return text + f"; watch's sharded path: {sharded}"


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


def _gpt2(model: str):
    torch.manual_seed(0)
    config = transformers.GPT2Config(**MODELS[model], bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


class Setup:
    """What every run shares: the model's size, the device, FSDP or not, the steps; and the
    FSDP version the Trainer chose (read off its accelerator by each FSDP run)."""

    def __init__(self, model: str, device: str, fsdp: bool, steps: int):
        self.model, self.device, self.fsdp, self.steps = model, device, fsdp, steps
        self.data = _Tokens(model)
        self.fsdp_version: int | None = None

    def clock(self) -> _Clock:
        return _Clock(max(1, self.steps // 4), self.steps)


def _run_lightning(setup: Setup, kind: str, every: int) -> tuple[float, float]:
    module = _LightningGPT2(_gpt2(setup.model))
    clock = setup.clock()
    with tempfile.TemporaryDirectory() as out:
        callbacks = {"bare": [],
                     "callback": [wur_lightning.WeightUpdateRatioCallback(log_dir=out, every=every)],
                     "watch": [_LightningWatch(os.path.join(out, "w"), every)]}[kind]
        trainer = L.Trainer(max_steps=setup.steps,
                            accelerator="gpu" if setup.device == "cuda" else "cpu", devices=1,
                            logger=False, callbacks=[*callbacks, _LightningClock(clock)],
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
        data = torch.utils.data.DataLoader(setup.data, batch_size=8)
        start = time.perf_counter()
        trainer.fit(module, data)
        _synchronize()
        return (time.perf_counter() - start) / setup.steps, clock.per_step()


def _hf_trainer(setup: Setup, out: str, callbacks: list, steps: int,
                fsdp_version: int | None = None) -> transformers.Trainer:
    """A Trainer of a fresh GPT-2; with setup.fsdp, `fsdp="full_shard"` and, `fsdp_version`
    given, that FSDP version (else the Trainer's default)."""
    fsdp: dict[str, Any] = {}
    if setup.fsdp:
        fsdp["fsdp"] = "full_shard"
        if fsdp_version is not None:
            fsdp["fsdp_config"] = {"version": fsdp_version}
    args = transformers.TrainingArguments(
        output_dir=out, max_steps=steps, per_device_train_batch_size=8, logging_steps=10**6,
        report_to=[], use_cpu=setup.device == "cpu", disable_tqdm=True, save_strategy="no",
        seed=0, **fsdp)
    trainer = transformers.Trainer(model=_gpt2(setup.model), args=args,
                                   train_dataset=setup.data, callbacks=callbacks)
    if setup.fsdp and not trainer.is_fsdp_enabled:
        raise RuntimeError(f"fsdp='full_shard' but accelerate runs "
                           f"{trainer.accelerator.distributed_type}, not FSDP")
    return trainer


def _run(setup: Setup, kind: str, every: int) -> tuple[float, float]:
    clock = setup.clock()
    with tempfile.TemporaryDirectory() as out:
        callbacks = {"bare": [], "callback": [WeightUpdateRatioCallback(every=every)],
                     "watch": [_Watch(os.path.join(out, "w"), every)]}[kind]
        trainer = _hf_trainer(setup, out, [*callbacks, _HFClock(clock)], setup.steps)
        if setup.fsdp:
            setup.fsdp_version = trainer.accelerator.state.fsdp_plugin.fsdp_version
        start = time.perf_counter()
        trainer.train()
        _synchronize()
        return (time.perf_counter() - start) / setup.steps, clock.per_step()


def check(setup: Setup, fsdp_version: int | None) -> bool:
    """One 3-step Hugging Face run with the callback (every=1) against `_FullReference`;
    prints the wrapping and the worst relative difference; True when they agree (the same
    tags and steps, every ratio within 1e-4, an infinite one, of a zero bias, infinite in both)."""
    reference = _FullReference()
    with tempfile.TemporaryDirectory() as out:
        log_dir = os.path.join(out, "ratios")
        trainer = _hf_trainer(setup, out, [WeightUpdateRatioCallback(log_dir=log_dir, every=1),
                                           reference], 3, fsdp_version)
        plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
        trainer.train()
        frame = read_ratios(log_dir, load_fast=False)
    got = {(t, int(s)): float(r) for t, s, r in zip(frame["tag"], frame["step"], frame["ratio"])}
    want = {(t, s): r for t, points in reference.ratios.items() for s, r in points.items()}
    name = "no FSDP" if fsdp_version is None else f"FSDP version {fsdp_version}"
    print(f"check, {name}: accelerate {trainer.accelerator.distributed_type}"
          f" (fsdp_version {getattr(plugin, 'fsdp_version', None)}); model: {reference.wrapping}")
    if sorted(got) != sorted(want):
        print(f"  FAILED: (tag, step) read back {sorted(got)[:4]}... ({len(got)}) != reference "
              f"{sorted(want)[:4]}... ({len(want)})")
        return False
    infinite = [k for k, r in want.items() if math.isinf(r)]
    if any(not math.isinf(got[k]) for k in infinite):
        print("  FAILED: a ratio infinite in the reference is finite as read back")
        return False
    errors = {k: abs(got[k] - r) / r for k, r in want.items() if not math.isinf(r)}
    worst = max(errors, key=errors.get)
    steps = sorted({s for _, s in want})
    print(f"  {len(reference.ratios)} tags × steps {steps}: worst relative difference "
          f"{errors[worst]:.2e} ({worst[0]}, step {worst[1]}); {len(infinite)} infinite "
          "(zero biases at step 0) in both")
    return errors[worst] <= 1e-4


def _one_rank_environment() -> None:
    """A distributed environment of one rank for accelerate, unless a launcher set one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)).items():
        os.environ.setdefault(key, value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trainers", nargs="+", choices=sorted(RUNS), default=sorted(RUNS))
    parser.add_argument("--model", choices=sorted(MODELS), default=None,
                        help="default tiny (--smoke: micro)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--fsdp", action="store_true",
                        help="Hugging Face only, --device cuda: fsdp='full_shard'")
    parser.add_argument("--check", action="store_true",
                        help="Hugging Face: check the callback's ratios against a reference")
    parser.add_argument("--smoke", action="store_true",
                        help="1 repeat of 3 steps of the micro model, no warm-up")
    a = parser.parse_args()
    a.model = a.model or ("micro" if a.smoke else "tiny")
    if a.fsdp and (a.trainers != ["hf"] or a.device != "cuda"):
        parser.error("--fsdp needs --trainers hf --device cuda (accelerate enables FSDP on GPUs)")
    if a.smoke:
        a.repeats, a.steps = 1, 3
    if a.device == "cuda":
        torch.set_float32_matmul_precision("high")
    if a.fsdp:
        _one_rank_environment()
    setup = Setup(a.model, a.device, a.fsdp, a.steps)
    print(f"model {a.model} ({sum(p.numel() for p in _gpt2(a.model).parameters()) / 1e6:.1f} M "
          f"weights), device {a.device}, fsdp='full_shard': {a.fsdp}; {a.repeats} repeats × "
          f"{a.steps} steps", flush=True)
    failed = False
    if a.check and "hf" in a.trainers:
        for version in ((1, 2) if a.fsdp else (None,)):
            try:
                failed |= not check(setup, version)
            except Exception as e:  # the other version and the timings still run
                print(f"check, FSDP version {version}: FAILED: {type(e).__name__}: {e}")
                failed = True
    cases = [(t, k, e) for t in a.trainers for e in (1, 10**9)
             for k in ("bare", "callback", "watch")]
    times = {c: [] for c in cases}
    if not a.smoke:  # a warm-up for the timings (a smoke run's are not read)
        for trainer in a.trainers:
            RUNS[trainer](Setup(a.model, a.device, a.fsdp, 5), "bare", 1)
    order = random.Random(0)
    for _ in range(a.repeats):
        for trainer, kind, every in order.sample(cases, len(cases)):
            times[(trainer, kind, every)].append(RUNS[trainer](setup, kind, every))
    if a.fsdp:
        print(f"timed runs: FSDP version {setup.fsdp_version} (the Trainer's default)")
    print("trainer    every      kind     whole run: ms/step  × bare | steady: ms/step  × bare")
    for trainer in a.trainers:
        for every in (1, 10**9):
            bare = [statistics.median(t) for t in zip(*times[(trainer, "bare", every)])]
            for kind in ("bare", "callback", "watch"):
                whole, steady = (statistics.median(t) for t in zip(*times[(trainer, kind, every)]))
                print(f"{trainer:<10} every={every:<10} {kind:<8} {1e3 * whole:8.2f} ms/step "
                      f"x{whole / bare[0]:.3f} | {1e3 * steady:8.2f} ms/step x{steady / bare[1]:.3f}")
    print("per repeat, steady time per step: the callback / watch by hand (same every), and "
          "bare every=1 / bare every=10**9 (identical runs: the noise floor); median [min-max]")
    for trainer in a.trainers:
        pairs = [(f"callback / watch, every={every}", (trainer, "callback", every),
                  (trainer, "watch", every)) for every in (1, 10**9)]
        pairs.append(("bare / bare", (trainer, "bare", 1), (trainer, "bare", 10**9)))
        for label, top, bottom in pairs:
            ratios = [x[1] / y[1] for x, y in zip(times[top], times[bottom])]
            print(f"{trainer:<10} {label:<36} {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}-{max(ratios):.3f}]")
    if failed:
        sys.exit(1)


RUNS = {"hf": _run, "lightning": _run_lightning}


if __name__ == "__main__":
    main()

"""Weight-update ratios of a Hugging Face `Trainer` run, from a `TrainerCallback`.

    from tb_wur_plugin.transformers import WeightUpdateRatioCallback

    Trainer(model, args, train_dataset=data, callbacks=[WeightUpdateRatioCallback()]).train()

The callback calls `tb_wur_plugin.torch.watch` on the torch optimizer inside accelerate's
wrapper at train begin and removes the handle at train end; the ratios are watch's (tags,
values, full parameters under DDP/FSDP, written once), and so is the judgement while
training: `WeightUpdateRatioCallback(stop_on={"nan"})` stops the Trainer
(`control.should_training_stop`) at the end of the update whose logged step fires a flag
with such a reason, on every rank alike.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

import torch
from transformers import TrainerCallback

from tb_wur_plugin.event_write import judgement_settings, watch_arguments
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE
from tb_wur_plugin.torch import WatchHandle, watch

__all__ = ["WeightUpdateRatioCallback"]


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's `AcceleratedOptimizer` (itself a
    `torch.optim.Optimizer` subclass whose step hooks never fire), or the optimizer itself."""
    for _ in range(8):
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            break
        optimizer = inner
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"the Trainer's optimizer holds no torch.optim.Optimizer: {optimizer!r}")
    return optimizer


def _trainer_log_dir(args: Any, begun: float) -> str:
    """The directory the Trainer's own `TensorBoardCallback` writes (transformers 5):
    `TENSORBOARD_LOGGING_DIR`, else the `output_dir/runs/<time>_<host>` directory it created
    at this train begin, else the one it would create now; transformers 4: `args.logging_dir`."""
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    if env is not None:
        return os.path.expanduser(env)
    if getattr(args, "logging_dir", None):
        return args.logging_dir
    from transformers.integrations.integration_utils import default_logdir

    runs = os.path.join(args.output_dir, "runs")
    if os.path.isdir(runs):  # the TensorBoardCallback (called before user callbacks) made it
        made = [os.path.join(runs, d) for d in os.listdir(runs)]
        made = [d for d in made if os.path.isdir(d) and os.path.getmtime(d) >= begun - 2.0]
        if made:
            return max(made, key=os.path.getmtime)
    return os.path.join(args.output_dir, default_logdir())


class WeightUpdateRatioCallback(TrainerCallback):
    """Log every trainable parameter's weight-update ratio ‖Δw‖₂/‖w‖₂ of a `Trainer` run.

    One ratio per optimizer update (gradient accumulation: the micro-batches of an update are
    one step), at step = `state.global_step` before the update, every `every` updates
    (steps 0, every, 2·every, ...), with the learning rate beside it. A resumed run
    (`resume_from_checkpoint`) continues its steps from the restored `state.global_step`.
    Distributed (DDP, FSDP through accelerate): the ratios of the full parameters, written
    once by the main process (the callback runs on every rank).

    Args:
      log_dir: where to write; None (default): the directory the Trainer's own TensorBoard
        logging writes (`TENSORBOARD_LOGGING_DIR`, else `output_dir/runs/<time>_<host>`;
        transformers 4: `args.logging_dir`), so the ratios sit beside its scalars.
      every: log every `every` optimizer updates; None (default): `args.logging_steps`
        (an int; a fractional `logging_steps` is taken of the run's `max_steps`).
      histograms: also log each parameter's elementwise ratio histogram.
      spectral: also log spectral ratios ‖ΔW‖₂/‖W‖₂ (passed to `watch`).
      on_flag, stop_on, patience, low, high: the judgement while training (passed to
        `watch`): each flag that fires is logged (logger `tb_wur_plugin`, WARNING), passed
        to `on_flag` and listed in `flags`; once a flag whose reason is in `stop_on` fires,
        the callback sets `control.should_training_stop` at that update's `on_step_end`,
        and the Trainer ends the run after it (`state.global_step` is then the flag's
        `step` + 1), on every rank alike.

    Attributes:
      flags: the flags fired in the current (or last) `train()`, in order.

    Raises:
      ValueError: `every` < 1 (at construction, or the resolved default at train begin);
        `stop_on` names an unknown reason, `patience` < 1, a bad band.
      TypeError: `every` not an int, a bad `on_flag` or `stop_on`, or the Trainer's
        optimizer holds no torch optimizer.

    Example:
      >>> Trainer(model, args, train_dataset=ds,
      ...         callbacks=[WeightUpdateRatioCallback(every=50)]).train()  # doctest: +SKIP
    """

    def __init__(self, log_dir: str | os.PathLike | None = None, every: int | None = None,
                 histograms: bool = False, spectral: bool = False,
                 on_flag: Callable[[Flag], Any] | None = None, stop_on: Iterable[str] = (),
                 patience: int = DEFAULT_PATIENCE, low: float | None = None,
                 high: float | None = None) -> None:
        self.every, self.histograms, self.spectral = watch_arguments(
            every, histograms, spectral, every_may_be_none=True
        )
        self._judgement_settings = judgement_settings(on_flag, stop_on, patience, low, high)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self._handle: WatchHandle | None = None
        self.flags: list[Flag] = []
        self._begun = time.time()

    def _every(self, args: Any, state: Any) -> int:
        if self.every is not None:
            return self.every
        steps = args.logging_steps
        if isinstance(steps, float) and steps < 1:  # a fraction of the run (transformers' rule)
            steps = max(1, int(-(-state.max_steps * steps // 1)))
        steps = int(steps)
        if steps < 1:
            raise ValueError(f"args.logging_steps must be >= 1 for the default every, got {steps}")
        return steps

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begun = time.time()

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        self._remove()
        self.flags = []
        if model is None or optimizer is None:
            raise ValueError("the Trainer passed no model or optimizer to on_train_begin")
        log_dir = self.log_dir if self.log_dir is not None else _trainer_log_dir(args, self._begun)
        self._handle = watch(_torch_optimizer(optimizer), model, log_dir,
                             every=self._every(args, state), histograms=self.histograms,
                             first_step=int(state.global_step), spectral=self.spectral,
                             **self._judgement_settings)
        self.flags = self._handle.flags

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._handle is not None and self._handle.should_stop:
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._remove()

    def _remove(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def __del__(self) -> None:  # a train() that raised calls no on_train_end
        try:
            self._remove()
        except Exception:
            pass

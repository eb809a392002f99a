"""Weight-update ratios of a Lightning run, from a `lightning.pytorch.Callback`.

    from tb_wur_plugin.lightning import WeightUpdateRatioCallback

    Trainer(callbacks=[WeightUpdateRatioCallback()]).fit(module)

At train start the callback calls `tb_wur_plugin.torch.watch` on the trainer's optimizers
(one handle, the parameters they update) and removes it at train end or when the fit
raises; tags and values are watch's, and so is the judgement while training:
`WeightUpdateRatioCallback(stop_on={"nan"})` sets `trainer.should_stop` at the end of the
batch whose logged step fires a flag with such a reason, on every rank alike.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator

import torch

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.loggers import TensorBoardLogger
except ImportError:  # the standalone pytorch_lightning distribution
    from pytorch_lightning import Callback
    from pytorch_lightning.loggers import TensorBoardLogger

from tb_wur_plugin.event_write import judgement_settings, watch_arguments
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE
from tb_wur_plugin.torch import WatchHandle, watch

__all__ = ["WeightUpdateRatioCallback"]


class _Updated(torch.nn.Module):
    """The parameters of `module` that `optimizer` updates, under their names in `module`."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self._named = [(n, p) for n, p in module.named_parameters() if id(p) in ids]

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        return iter(self._named)

    def parameters(self, recurse: bool = True) -> Iterator[Any]:
        return iter(p for _, p in self._named)


class WeightUpdateRatioCallback(Callback):
    """Log every trainable parameter's weight-update ratio ‖Δw‖₂/‖w‖₂ of a Lightning fit.

    Every `every` optimizer steps (steps 0, every, 2·every, ...), step = `trainer.global_step`
    before the update (a resumed fit continues from the restored global step), automatic
    and manual optimization alike, into the run directory itself. One optimizer: the
    parameters it updates, tags as PyTorch `watch`'s. Several optimizers (manual
    optimization, where `trainer.global_step` counts every optimizer's steps): optimizer
    i's parameters tagged `optimizer_<i>/<tag>`, each optimizer logged at its first update
    at or after each multiple of `every`, the learning rate beside them optimizer 0's
    (`watch` with several optimizers).

    Args:
      log_dir: where to write when the trainer has no `TensorBoardLogger` (with one, its
        `log_dir` is used, beside the logger's own scalars).
      every: log every `every` optimizer steps; None (default): `trainer.log_every_n_steps`.
      histograms: also log each parameter's elementwise ratio histogram.
      spectral: also log spectral ratios ‖ΔW‖₂/‖W‖₂ (passed to `watch`).
      on_flag, stop_on, patience, low, high: the judgement while training (passed to
        `watch`): each flag that fires is logged (logger `tb_wur_plugin`, WARNING), passed
        to `on_flag` and listed in `flags`; once a flag whose reason is in `stop_on` fires,
        the callback sets `trainer.should_stop` at that batch's `on_train_batch_end`, and
        the fit ends after it (`trainer.global_step` is then the flag's `step` + 1, unless
        `min_steps` or `min_epochs` keep it going), on every rank alike.

    Attributes:
      flags: the flags fired in the current (or last) fit, in order.

    Raises:
      ValueError: `every` < 1; `stop_on` names an unknown reason, `patience` < 1, a bad
        band; at train start, no `TensorBoardLogger` and no `log_dir`.
      TypeError: `every` not an int, a bad `on_flag` or `stop_on`.

    Example:
      >>> Trainer(max_steps=100, callbacks=[WeightUpdateRatioCallback(every=10)]).fit(m)  # doctest: +SKIP
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

    def _log_dir(self, trainer: Any) -> str:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                return logger.log_dir
        if self.log_dir is None:
            raise ValueError("WeightUpdateRatioCallback: the trainer has no TensorBoardLogger; "
                             "pass log_dir=")
        return self.log_dir

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._remove()
        self.flags = []
        log_dir = self._log_dir(trainer)
        every = self.every if self.every is not None else int(trainer.log_every_n_steps)
        if every < 1:
            raise ValueError(f"trainer.log_every_n_steps must be >= 1, got {every}")
        optimizers = list(trainer.optimizers)
        if not optimizers:
            return
        # One optimizer: the parameters it updates; several: watch keeps each one's own.
        model = _Updated(pl_module, optimizers[0]) if len(optimizers) == 1 else pl_module
        self._handle = watch(optimizers if len(optimizers) > 1 else optimizers[0], model,
                             log_dir, every=every, histograms=self.histograms,
                             first_step=int(trainer.global_step), spectral=self.spectral,
                             **self._judgement_settings)
        self.flags = self._handle.flags

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._handle is not None and self._handle.should_stop:
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._remove()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._remove()

    def _remove(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

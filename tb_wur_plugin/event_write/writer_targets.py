"""Where a face that takes "a log directory or a writer" writes: a path (a new event file
there), a `SummaryWriter`, or another library's TensorBoard writer whose event file takes
the events (`torch.utils.tensorboard.SummaryWriter`, recognised by its methods, so that no
framework is imported here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from tb_wur_plugin.event_write.summary_writer import SummaryWriter
from tb_wur_plugin.event_write.training_judgement import TrainingJudgement
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE

__all__ = ["check_target", "run_dir_of", "open_target"]


def check_target(target: Any, name: str = "log_dir_or_writer") -> None:
    """Raise unless `target` is a path, a `SummaryWriter` or a TensorBoard writer with an
    event file writer (`_get_file_writer()`) and `flush()`.

    Raises:
      TypeError: `target` is none of these (the message names the argument `name`).
    """
    if isinstance(target, (SummaryWriter, str, os.PathLike)) or _is_file_writer_owner(target):
        return
    raise TypeError(
        f"{name} must be a path, a tb_wur_plugin.writer.SummaryWriter or a "
        f"torch.utils.tensorboard.SummaryWriter, got {type(target).__name__}"
    )


def run_dir_of(target: Any) -> str:
    """The run directory that `target` (checked by `check_target`) writes into."""
    if isinstance(target, SummaryWriter):
        return target.logdir
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    return target.get_logdir()


def open_target(
    target: Any,
    on_flag: Callable[[Flag], Any] | None = None,
    stop_on: Iterable[str] = (),
    patience: int = DEFAULT_PATIENCE,
    low: float | None = None,
    high: float | None = None,
) -> tuple[SummaryWriter, bool]:
    """The writer to write to, and whether it was opened here (then its user closes it):
    a `SummaryWriter` passed in as is (with its own judgement while training); a path: a
    new `SummaryWriter` there; another library's writer: a `SummaryWriter` whose events go
    into that writer's event file (recreated by it if its user closed it). A writer opened
    here judges what it writes with `on_flag`, `stop_on`, `patience`, `low` and `high`
    (`TrainingJudgement`); the caller decides what these mean beside a `SummaryWriter`
    passed in, which keeps its own.

    Raises:
      ValueError: `target` is a closed `SummaryWriter`; a bad `stop_on`, `patience` or band.
      TypeError: a bad `on_flag` or `stop_on`.
    """
    if isinstance(target, SummaryWriter):
        if target.closed:
            raise ValueError(f"{target!r} is closed")
        return target, False
    settings = dict(on_flag=on_flag, stop_on=stop_on, patience=patience, low=low, high=high)
    if isinstance(target, (str, os.PathLike)):
        return SummaryWriter(target, **settings), True

    def add_event(event) -> None:
        target._get_file_writer().add_event(event, step=event.step, walltime=event.wall_time)

    return SummaryWriter.writing_events_to(add_event, target.flush, target.get_logdir(),
                                           judgement=TrainingJudgement(**settings)), False


def _is_file_writer_owner(target: Any) -> bool:
    return callable(getattr(target, "_get_file_writer", None)) and callable(
        getattr(target, "flush", None)
    )

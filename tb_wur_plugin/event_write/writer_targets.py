"""Where a face that takes "a log directory or a writer" writes: a path (a new event file
there), a `SummaryWriter`, or another library's TensorBoard writer whose event file takes
the events (`torch.utils.tensorboard.SummaryWriter`, recognised by its methods, so that no
framework is imported here).
"""

from __future__ import annotations

import os
from typing import Any

from tb_wur_plugin.event_write.summary_writer import SummaryWriter

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


def open_target(target: Any) -> tuple[SummaryWriter, bool]:
    """The writer to write to, and whether it was opened here (then its user closes it):
    a `SummaryWriter` passed in as is; a path: a new `SummaryWriter` there; another
    library's writer: a `SummaryWriter` whose events go into that writer's event file
    (recreated by it if its user closed it).

    Raises:
      ValueError: `target` is a closed `SummaryWriter`.
    """
    if isinstance(target, SummaryWriter):
        if target.closed:
            raise ValueError(f"{target!r} is closed")
        return target, False
    if isinstance(target, (str, os.PathLike)):
        return SummaryWriter(target), True

    def add_event(event) -> None:
        target._get_file_writer().add_event(event, step=event.step, walltime=event.wall_time)

    return SummaryWriter.writing_events_to(add_event, target.flush, target.get_logdir()), False


def _is_file_writer_owner(target: Any) -> bool:
    return callable(getattr(target, "_get_file_writer", None)) and callable(
        getattr(target, "flush", None)
    )

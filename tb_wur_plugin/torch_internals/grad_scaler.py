"""The steps `torch.amp.GradScaler` skips, seen from outside the training loop.

`scaler.step(optimizer)` does not call `optimizer.step()` when the gradients are not finite,
so the optimizer's step hooks never see that step. While some owner (a PyTorch `watch`
handle) listens to an optimizer, `GradScaler.step` is wrapped (on the class, once) to compare
the owner's count of `optimizer.step()` calls before and after: unchanged, the step was
skipped, and the owner is told. With no listener left, the class gets its own `step` back.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import torch

__all__ = ["notify_skipped_steps", "stop_notifying"]


class _Listener(NamedTuple):
    owner: Any
    steps: Callable[[], int]
    skipped: Callable[[], None]


_LISTENERS: dict[int, list[_Listener]] = {}  # id(optimizer) -> its listeners


def notify_skipped_steps(
    optimizer: torch.optim.Optimizer,
    owner: Any,
    steps: Callable[[], int],
    skipped: Callable[[], None],
) -> None:
    """Call `skipped()` after each `GradScaler.step(optimizer)` that did not call
    `optimizer.step()`, until `stop_notifying(optimizer, owner)`.

    Args:
      optimizer: the optimizer whose skipped steps to report.
      owner: who listens (the key `stop_notifying` takes).
      steps: the owner's count of `optimizer.step()` calls (read before and after).
      skipped: called when that count did not change.
    """
    _LISTENERS.setdefault(id(optimizer), []).append(_Listener(owner, steps, skipped))
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is None or getattr(scaler.step, "_wur_original", None) is not None:
        return
    original = scaler.step

    @functools.wraps(original)
    def step(self, optimizer, *args, **kwargs):
        listeners = _LISTENERS.get(id(optimizer))
        if not listeners:
            return original(self, optimizer, *args, **kwargs)
        counted = [(listener, listener.steps()) for listener in listeners]
        result = original(self, optimizer, *args, **kwargs)
        for listener, steps_before in counted:
            if listener.steps() == steps_before:  # optimizer.step() was not called
                listener.skipped()
        return result

    step._wur_original = original
    scaler.step = step


def stop_notifying(optimizer: torch.optim.Optimizer, owner: Any) -> None:
    """Stop reporting `optimizer`'s skipped steps to `owner` (idempotent); the last listener
    gone, `GradScaler.step` is the class's own again."""
    listeners = _LISTENERS.get(id(optimizer), [])
    listeners[:] = [listener for listener in listeners if listener.owner is not owner]
    if not listeners:
        _LISTENERS.pop(id(optimizer), None)
    scaler = torch.amp.GradScaler
    original = getattr(scaler.step, "_wur_original", None)
    if not _LISTENERS and original is not None and "step" in vars(scaler):
        scaler.step = original

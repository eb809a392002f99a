"""The arguments every face that watches training takes alike, checked in one place: how
often to log (`every`; the Keras callback's `update_freq`), and whether to log histograms
and spectral ratios. PyTorch `watch`, JAX `log_update_ratios`, the Keras callback and the
Hugging Face and Lightning callbacks call `watch_arguments`, so that one wrong value gets
one message whichever face it is given to.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["WatchArguments", "watch_arguments", "positive_int", "flag"]


class WatchArguments(NamedTuple):
    """The checked arguments: `every` (None where the face allows it: a default it takes
    later, e.g. the trainer's logging interval), `histograms`, `spectral`."""

    every: int | None
    histograms: bool
    spectral: bool


def watch_arguments(
    every: Any,
    histograms: Any,
    spectral: Any,
    *,
    every_name: str = "every",
    every_unit: str = "",
    every_may_be_none: bool = False,
) -> WatchArguments:
    """`every`, `histograms` and `spectral` checked, in that order.

    Args:
      every: log every this many optimizer steps: an int >= 1 (a numpy integer too; not a
        bool), or None where `every_may_be_none`.
      histograms: a bool: also log the elementwise histograms.
      spectral: a bool: also log the spectral ratios.
      every_name: the name of `every` in the face's signature (the messages say it).
      every_unit: what `every` counts, for the messages (e.g. "(optimizer steps)").
      every_may_be_none: whether None is a valid `every`.

    Returns:
      The `WatchArguments`, `every` as a Python int (or None).

    Raises:
      TypeError: `every` is not an int (or None where allowed), `histograms` or `spectral`
        not a bool.
      ValueError: `every` is below 1.
    """
    return WatchArguments(
        positive_int(every, every_name, every_unit, none_allowed=every_may_be_none),
        flag(histograms, "histograms"),
        flag(spectral, "spectral"),
    )


def positive_int(
    value: Any, name: str, unit: str = "", *, none_allowed: bool = False
) -> int | None:
    """`value` as an int >= 1 (None passes where `none_allowed`).

    Args:
      value: the value given.
      name: its argument's name, for the messages.
      unit: what it counts, for the messages (e.g. "(milliseconds)").
      none_allowed: whether None is valid (and returned as is).

    Raises:
      TypeError: `value` is not an int or a numpy integer (bools are not), nor None where
        allowed: "NAME must be an int >= 1 UNIT[ or None], got VALUE".
      ValueError: `value` is below 1: "NAME must be >= 1 UNIT[ or None], got VALUE".
    """
    if value is None and none_allowed:
        return None
    expected = " ".join(part for part in (">= 1", unit, "or None" if none_allowed else "") if part)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int {expected}, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be {expected}, got {value}")
    return int(value)


def flag(value: Any, name: str) -> bool:
    """`value` if it is a bool.

    Raises:
      TypeError: `value` is not a bool: "NAME must be a bool, got VALUE".
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value

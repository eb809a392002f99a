"""A scalar series' points as numpy columns, the form in which the backend reads and hands
on a run's points (run_data, export, tb_private): (steps int64, wall times float64, values
float64), in the order the data provider keeps the points."""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

PointColumns = tuple[np.ndarray, np.ndarray, np.ndarray]
# A tensor series' points: (steps int64, wall times float64, [each point's value]).
TensorColumns = tuple[np.ndarray, np.ndarray, list[np.ndarray]]

_STEP = operator.attrgetter("step")
_WALL_TIME = operator.attrgetter("wall_time")
_VALUE = operator.attrgetter("value")


def of_points(points: Sequence[Any], value_of: Callable[[Any], float] = _VALUE) -> PointColumns:
    """The columns of `points` (objects with `step` and `wall_time`, and a value that
    `value_of` gives: by default their `value`), in their order: one pass per field in C
    (`map` over an attribute getter), no Python code per point but `value_of`'s."""
    n = len(points)
    return (
        np.fromiter(map(_STEP, points), np.int64, n),
        np.fromiter(map(_WALL_TIME, points), np.float64, n),
        np.fromiter(map(value_of, points), np.float64, n),
    )


def stacked_float32(values: list[np.ndarray], width: int) -> np.ndarray | None:
    """float32[len(values), width]: the values of a tensor series' points (`TensorColumns`), stacked; None
    unless each is a float32 vector of `width` (the caller then reads them one by one)."""
    if not all(v.dtype == np.float32 and v.shape == (width,) for v in values):
        return None
    if not values:
        return np.zeros((0, width), np.float32)
    # each value is a view of its proto's bytes: one join, one copy
    return np.frombuffer(b"".join(values), np.dtype("<f4")).reshape(len(values), width)

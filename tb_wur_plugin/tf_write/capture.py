"""Capture of an optimizer's update: Δw as the optimizer passes it to the variables'
`assign`, `assign_add` and `assign_sub`, so that a ratio needs no second read of the
weights."""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import tensorflow as tf


_ASSIGNS = {"assign": None, "assign_add": 1, "assign_sub": -1}  # method: sign of Δw
_SPARSE_UPDATES = (
    "scatter_add", "scatter_sub", "scatter_update", "scatter_max", "scatter_min",
    "scatter_mul", "scatter_div", "scatter_nd_add", "scatter_nd_sub", "scatter_nd_update",
    "scatter_nd_max", "scatter_nd_min", "batch_scatter_update",
)


@contextlib.contextmanager
def captured_changes(variables: Sequence[tf.Variable]) -> Iterator[list[tf.Tensor | None]]:
    """Record the changes made to `variables` in the block by their `assign`, `assign_add`
    and `assign_sub` methods, through which Keras optimizers make every update (weight
    decay and constraints included).

    Updates made by other means (raw ops on the variable's handle) are not seen: use it
    only around updates made through those methods.

    Args:
      variables: the `tf.Variable`s whose updates to record.

    Yields:
      A list, filled on exit, with per variable ±Δw as those calls computed it (for
      `assign`, the new value minus the value read just before), their sum if there were
      several; None where Δw cannot be known so: no such call, a sparse update
      (`scatter_*`, `tf.IndexedSlices`), or a value computed in another graph than the
      block's (in a conditional's branch, as `LossScaleOptimizer` applies its updates, or
      in another `tf.function`).
    """
    parts: list[list[tuple[int, tf.Tensor]] | None] = [[] for _ in variables]
    saved = []

    def assign_recorder(index, variable, original, sign):
        def assign(value, *args, **kwargs):
            if parts[index] is not None:
                if isinstance(value, tf.IndexedSlices):
                    parts[index] = None
                else:
                    value = tf.convert_to_tensor(value, dtype=variable.dtype)
                    if sign is None:  # read before the assignment, in program order
                        parts[index].append((1, value - variable.value()))
                    else:
                        parts[index].append((sign, value))
            return original(value, *args, **kwargs)
        return assign

    def sparse_recorder(index, original):
        def update(*args, **kwargs):
            parts[index] = None
            return original(*args, **kwargs)
        return update

    try:
        for index, variable in enumerate(variables):
            for method in (*_ASSIGNS, *_SPARSE_UPDATES):
                original = getattr(variable, method, None)
                if original is None:
                    continue
                saved.append((variable, method, variable.__dict__.get(method, _MISSING)))
                if method in _ASSIGNS:
                    wrapper = assign_recorder(index, variable, original, _ASSIGNS[method])
                else:
                    wrapper = sparse_recorder(index, original)
                setattr(variable, method, wrapper)
        changes: list[tf.Tensor | None] = [None] * len(variables)
        yield changes
    finally:
        for variable, method, previous in reversed(saved):
            if previous is _MISSING:
                delattr(variable, method)
            else:
                setattr(variable, method, previous)
    for index, made in enumerate(parts):
        if not made or not all(_in_this_graph(change) for _, change in made):
            continue
        changes[index] = made[0][1] if len(made) == 1 else tf.add_n(
            [change if sign > 0 else -change for sign, change in made]
        )


_MISSING = object()


def _in_this_graph(tensor: tf.Tensor) -> bool:
    if tf.executing_eagerly():
        return not tf.is_symbolic_tensor(tensor)
    return getattr(tensor, "graph", None) is tf.compat.v1.get_default_graph()

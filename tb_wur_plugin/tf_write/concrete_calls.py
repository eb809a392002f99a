"""Eager calls of a `tf.function` through the concrete function kept for the same arguments
(`ConcreteCalls`): what `watch`'s eager `record` and the eager snapshot call at a logged step."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import tensorflow as tf


class ConcreteCalls:
    """Eager calls of a `tf.function` of many arguments, each through the concrete function
    found for the same arguments before. `tf.function`'s own dispatch works out the type
    of every argument at every call, a cost that grows with their number (hundreds: a
    model's variables, their snapshots, their tags), and dominates a logged step of a
    small model; calling the concrete function only converts its tensors.

    The caller names what selects the concrete function: `key`, hashable, made of the
    Python arguments and the tensors' dtypes and shapes, and `held`, the variables among
    the arguments. Variables are arguments of the traced function, not captured by it; a
    concrete function is kept for the variables themselves (which fixes their shapes,
    dtypes and aliasing, the rest of what selects it) by identity, held weakly (a kept
    function keeps no model alive) and checked at each call (a freed variable's id taken
    by another one is not mistaken for it). The most recent few are kept.
    """

    _KEPT = 8

    def __init__(self, function: Any):
        self._function = function
        self._kept: dict[tuple, tuple[list[weakref.ref], Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, key: tuple, held: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        """`function(*args, **kwargs)`, through a kept concrete function where there is one
        for `key` and `held`."""
        key = (key, tuple(map(id, held)))
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and all(ref() is value for ref, value in zip(kept[0], held)):
            return kept[1](*args, **kwargs)
        concrete = self._function.get_concrete_function(*args, **kwargs)
        with self._lock:
            self._kept.pop(key, None)
            self._kept[key] = ([weakref.ref(value) for value in held], concrete)
            while len(self._kept) > self._KEPT:
                del self._kept[next(iter(self._kept))]
        return concrete(*args, **kwargs)


def tensor_types(tensors: Sequence[tf.Tensor | None]) -> tuple:
    """The dtype and shape of each of `tensors` (None for None), for `ConcreteCalls`."""
    return tuple(None if t is None else (t.dtype, tuple(t.shape)) for t in tensors)

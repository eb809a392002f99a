"""The `apply_gradients` calls of `tf.compat.v1.train` optimizers made in a block, captured so
that each can be built a second time, as the same update made after other ops.

A TF1 optimizer builds its update from `grads_and_vars` and its own state: slot variables
(created once per variable: a second build finds and reuses them), non-slot variables such
as Adam's beta power accumulators (created once per graph, reused likewise, and advanced by
each build's `_finish`) and the `global_step` passed to it (incremented by each build). A
second build is therefore a second, independent op that makes exactly the same update with
the same state; running either of the two ops once makes one step.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, NamedTuple

import tensorflow as tf


class CapturedCall(NamedTuple):
    """One `optimizer.apply_gradients(grads_and_vars, *args, **kwargs)` made in the block."""

    function: Callable[..., Any]  # the optimizer class's own apply_gradients
    optimizer: Any
    grads_and_vars: tuple
    args: tuple
    kwargs: dict
    result: Any  # the op it returned

    def updated_variables(self) -> list[tf.Variable]:
        """The variables this call updates (those with a gradient), in its order."""
        return [v for g, v in self.grads_and_vars if g is not None]

    def build_again(self) -> Any:
        """The same update built anew (new ops, the same slots and global_step)."""
        return self.function(self.optimizer, self.grads_and_vars, *self.args, **self.kwargs)


@contextlib.contextmanager
def captured_apply_gradients(graph: tf.Graph) -> Iterator[list[CapturedCall]]:
    """Record the outermost `apply_gradients` calls of `tf.compat.v1.train.Optimizer`s made
    by this thread into `graph` while the block runs (calls an optimizer makes inside its own
    `apply_gradients`, as wrapping optimizers do, belong to the outer call). Each call is made
    as usual and returns what it returns; the yielded list holds them once the block exits.

    Raises:
      RuntimeError: on entry, if this thread is already in such a block.
    """
    if getattr(_state, "recorder", None) is not None:
        raise RuntimeError(
            "tb_wur_plugin.compat.v1.watch blocks cannot be nested; use one block around "
            "all the apply_gradients calls of the step"
        )
    calls: list[CapturedCall] = []
    _state.recorder = (graph, calls)
    _state.depth = 0
    _install()
    try:
        yield calls
    finally:
        _state.recorder = None
        _uninstall()


def _recording_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        recorder = getattr(_state, "recorder", None)
        depth = getattr(_state, "depth", 0)
        outermost = (
            recorder is not None and depth == 0
            and tf.compat.v1.get_default_graph() is recorder[0]
        )
        if outermost:
            grads_and_vars = tuple(grads_and_vars)  # a zip(...) is read once
        _state.depth = depth + 1
        try:
            result = original(self, grads_and_vars, *args, **kwargs)
        finally:
            _state.depth = depth
        if outermost:
            recorder[1].append(
                CapturedCall(original, self, grads_and_vars, args, dict(kwargs), result)
            )
        return result

    apply_gradients.__wrapped__ = original
    apply_gradients.__doc__ = original.__doc__
    return apply_gradients


_state = threading.local()
_lock = threading.Lock()
_users = 0
_originals: dict[type, Callable[..., Any]] = {}


def _optimizer_classes() -> list[type]:
    """`tf.compat.v1.train.Optimizer` and its subclasses that define apply_gradients."""
    found, pending = [], [tf.compat.v1.train.Optimizer]
    while pending:
        cls = pending.pop()
        if cls in found:
            continue
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if "apply_gradients" in cls.__dict__]


def _install() -> None:
    """Wrap apply_gradients in every optimizer class (once for all blocks in progress)."""
    global _users
    with _lock:
        _users += 1
        if _users > 1:
            return
        for cls in _optimizer_classes():
            original = cls.__dict__["apply_gradients"]
            _originals[cls] = original
            setattr(cls, "apply_gradients", _recording_wrapper(original))


def _uninstall() -> None:
    global _users
    with _lock:
        _users -= 1
        if _users:
            return
        for cls, original in _originals.items():
            setattr(cls, "apply_gradients", original)
        _originals.clear()


@contextlib.contextmanager
def unchanged_collections(graph: tf.Graph) -> Iterator[None]:
    """Leave `graph`'s collections as they were before the block (a second build adds its op
    to TRAIN_OP, which must keep naming only the optimizer's own train op).

    Raises:
      RuntimeError: the block created variables (an optimizer whose second build does not
        reuse its state; its update could not be the same).
    """
    keys = graph.get_all_collection_keys()
    before = {key: list(graph.get_collection(key)) for key in keys}
    variables = _variable_ids(graph)
    yield
    created = [v.name for v in _all_variables(graph) if id(v) not in variables]
    for key in graph.get_all_collection_keys():
        if key not in before:
            graph.clear_collection(key)
        elif graph.get_collection(key) != before[key]:
            graph.get_collection_ref(key)[:] = before[key]
    if created:
        raise RuntimeError(
            "tb_wur_plugin.compat.v1.watch: building the optimizer's update a second time "
            f"created new variables {created[:5]}; this optimizer does not reuse its state "
            "across apply_gradients calls, so the update cannot be built again exactly"
        )


def _all_variables(graph: tf.Graph) -> list[Any]:
    return [
        v for key in (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        for v in graph.get_collection(key)
    ]


def _variable_ids(graph: tf.Graph) -> set[int]:
    return {id(v) for v in _all_variables(graph)}

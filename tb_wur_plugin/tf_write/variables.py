"""The variables `watch` and the callback log: which ones, under which tags, whether this
process logs them (the distribution policy), and their snapshot."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import tensorflow as tf

from tb_wur_plugin.metadata import unique_tags
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.tf_write.concrete_calls import ConcreteCalls


class WatchedVariable(NamedTuple):
    """A variable whose ratio is logged, and its tag."""

    tag: str
    variable: tf.Variable


def watched_variables(variables: Any) -> list[WatchedVariable]:
    """The trainable floating-point variables among `variables`, each with a unique tag.

    The tag is the Keras variable path, else the TensorFlow name without ':0'. A path
    taken by an earlier variable gets the first suffix '_1', '_2', ... that is no variable's
    path. Integer and non-trainable variables, and repeats, are skipped.

    Args:
      variables: a `tf.Variable` or Keras variable, or an iterable of them.

    Returns:
      The `WatchedVariable`s, in the order of `variables`.

    Raises:
      TypeError: something in `variables` is not a variable.
      ValueError: a path is in the plugin's reserved namespace.
    """
    if isinstance(variables, (tf.Variable, str, bytes)) or hasattr(variables, "path"):
        variables = [variables]
    try:
        candidates = list(variables)
    except TypeError:
        raise TypeError(
            f"variables must be a variable or an iterable of variables, got "
            f"{type(variables).__name__}"
        ) from None
    kept: list[tuple[str, tf.Variable]] = []
    seen: set[int] = set()
    for candidate in candidates:
        variable = tf_variable(candidate)
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        if not getattr(candidate, "trainable", True) or not variable.dtype.is_floating:
            continue
        kept.append((_variable_path(candidate), variable))
    tags = unique_tags(path for path, _ in kept)
    return [WatchedVariable(tag, variable) for tag, (_, variable) in zip(tags, kept)]


def writes_summaries(watched: Sequence[WatchedVariable] = (), strategy: Any = None) -> bool:
    """Whether this process logs the ratios of `watched`.

    False on the workers of a multi-worker strategy other than the chief
    (`MultiWorkerMirroredStrategy` worker 0), whose synchronous updates are the chief's, so
    that each step is logged once. Asks `extended.should_save_summary` of `strategy`, of
    the strategy of each distributed variable in `watched` and of the current strategy.

    Args:
      watched: the variables to log.
      strategy: a `tf.distribute` strategy to ask as well (the model's), or None.

    Returns:
      Whether this process writes their ratios.

    Raises:
      NotImplementedError: under a `ParameterServerStrategy`, whose workers update the
        variables asynchronously, so that no update can be observed alone.
    """
    strategies = [tf.distribute.get_strategy(), strategy] + [
        w.variable.distribute_strategy
        for w in watched
        if isinstance(w.variable, tf.distribute.DistributedValues)
    ]
    writes = True
    for candidate in {id(s): s for s in strategies if s is not None}.values():
        if isinstance(candidate, _ASYNCHRONOUS_STRATEGIES):
            raise NotImplementedError(
                f"weight-update ratios cannot be logged under {type(candidate).__name__}: its "
                "workers update the variables asynchronously, so the change made by one "
                "update cannot be observed. Use MirroredStrategy or "
                "MultiWorkerMirroredStrategy (synchronous updates)."
            )
        try:
            writes = writes and bool(candidate.extended.should_save_summary)
        except (AttributeError, NotImplementedError):
            pass
    return writes


_ASYNCHRONOUS_STRATEGIES = (
    tf.distribute.experimental.ParameterServerStrategy,
    tf.compat.v1.distribute.experimental.ParameterServerStrategy,
)


def snapshot(watched: Sequence[WatchedVariable]) -> list[tf.Tensor]:
    """The current values of the watched variables (copied only when later overwritten).

    Eagerly, the variables of one device (not a strategy's distributed variables) are read
    by one call of a traced function (`ConcreteCalls`), not one eager read each."""
    variables = [w.variable for w in watched]
    if (not tf.executing_eagerly() or len(variables) < 2
            or any(isinstance(v, tf.distribute.DistributedValues) for v in variables)):
        return [v.value() for v in variables]
    return _read_values_calls((), variables, variables)


def _read_values(variables: list[tf.Variable]) -> list[tf.Tensor]:
    return [v.value() for v in variables]


_read_values_calls = ConcreteCalls(tf.function(_read_values))


def tf_variable(candidate: Any, caller: str = "wur_summary.watch") -> tf.Variable:
    """The `tf.Variable` of `candidate`: itself, or the one a Keras 3 variable of the
    TensorFlow backend wraps.

    Raises:
      TypeError: `candidate` is neither (the message names `caller`), e.g. a
        `ShardedVariable`.
    """
    if isinstance(candidate, tf.Variable):
        return candidate
    if tf_private.is_sharded_variable(candidate):
        raise TypeError(
            f"{caller}: {candidate.name!r} is a ShardedVariable "
            "(ParameterServerStrategy's variable_partitioner), whose shards the workers "
            "update asynchronously: its weight-update ratio cannot be observed. Create the "
            "variables without a variable_partitioner, or train under MirroredStrategy or "
            "MultiWorkerMirroredStrategy."
        )
    inner = getattr(candidate, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError(
        f"{caller} takes tf.Variable or keras.Variable objects (the variables of Keras's "
        f"TensorFlow backend), got {type(candidate).__name__}: {candidate!r:.80}"
    )


def _variable_path(candidate: Any) -> str:
    path = getattr(candidate, "path", None)
    if isinstance(path, str) and path:
        return path
    name = candidate.name
    return name[:-2] if name.endswith(":0") else name

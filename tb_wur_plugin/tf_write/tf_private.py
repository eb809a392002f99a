"""Every use of TensorFlow's private API in the package, and nothing else.

TensorFlow has no public way to read or set the default summary writer without flushing it,
to read its recording conditions, to get a writer's resource handle or whether it is closed,
to write a serialized `Summary` as it is, to make a variable that a `tf.distribute`
strategy in scope does not turn into a distributed one, to name the class of a
`ParameterServerStrategy`'s partitioned variables, or to make a conditional that runs only
the taken branch's ops (`tf.cond` in a `tf.function` is lowered to Switch/Merge, which
dispatches the ops of both branches). These functions do, and no other module touches
`tensorflow.python`: `tests/write/test_tf_private.py` fails, naming what changed, when a
TensorFlow release changes any of them.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import cond_v2, gen_summary_ops, resource_variable_ops, summary_ops_v2


def default_writer() -> tf.summary.SummaryWriter | None:
    """The default summary writer, None if there is none."""
    return summary_ops_v2._summary_state.writer


def set_default_writer(writer: tf.summary.SummaryWriter | None) -> None:
    """Make `writer` the default writer (None: no default writer), flushing nothing."""
    summary_ops_v2._summary_state.writer = writer


def recording_conditions() -> tuple[Any, Any]:
    """The two conditions `tf.summary.should_record_summaries()` combines: the one of
    `tf.summary.record_if` and the one a `tf.distribute` strategy sets (each None, a bool, a
    tensor or a callable)."""
    state = summary_ops_v2._summary_state
    return state.is_recording, state.is_recording_distribution_strategy


def writer_resource(writer: tf.summary.SummaryWriter | None) -> tf.Tensor | None:
    """The resource handle that summary ops take for `writer`; None for no writer or a
    no-op writer."""
    return getattr(writer, "_resource", None)


def writer_closed(writer: tf.summary.SummaryWriter | None) -> bool:
    """Whether `writer` has been closed (False for no writer or a no-op writer)."""
    return bool(getattr(writer, "_closed", False))


def write_raw_proto_summary(writer: tf.Tensor, step: tf.Tensor, message: tf.Tensor) -> tf.Operation:
    """Write `message`, a serialized `Summary` (a string tensor), as one event at `step`
    to the writer whose resource handle is `writer`."""
    return gen_summary_ops.write_raw_proto_summary(writer, step, message)


def local_variable(initial_value: Any, name: str) -> tf.Variable:
    """A plain non-trainable resource variable, also under a `tf.distribute` strategy's
    scope (whose variable creator `tf.Variable` would go through)."""
    return resource_variable_ops.ResourceVariable(initial_value, trainable=False, name=name)


def is_sharded_variable(candidate: Any) -> bool:
    """Whether `candidate` is a `ShardedVariable` (the partitioned variable a
    `ParameterServerStrategy` with a `variable_partitioner` makes: a list of shard variables,
    not a `tf.Variable`)."""
    return isinstance(candidate, tf.__internal__.distribute.ShardedVariable)


def unlowered_cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    """`tf.cond(pred, true_fn, false_fn)`, whose conditional op in a graph is not lowered to
    Switch/Merge: it stays one functional Case op that runs only the taken branch's function.

    Args:
      pred: a scalar bool tensor (or a Python bool when executing eagerly).
      true_fn, false_fn: callables of no argument, returning the same structure of tensors
        (same dtypes) in both branches.

    Returns:
      What the taken branch returns. Executing eagerly, the taken branch is just called.
    """
    if tf.executing_eagerly():
        return true_fn() if bool(pred) else false_fn()
    index = tf.cast(pred, tf.int32)  # 0: false_fn, 1: true_fn
    return cond_v2.indexed_case(index, [false_fn, true_fn], name="unlowered_cond",
                                lower_using_switch_merge=False)

"""The value of a variable before an update made later in the same `Session.run`."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def snapshot(variable: tf.Variable) -> tf.Tensor:
    """A tensor holding `variable`'s current value while later ops of the run update it.

    A resource variable's read stays intact (an update copies the variable when a read of it
    is still in use); a reference variable is updated in place under its reads, so its value
    is copied."""
    value = variable.read_value()
    if is_resource_variable(variable):
        return value
    return tf.raw_ops.DeepCopy(x=value)


def is_resource_variable(variable: Any) -> bool:
    """Whether `variable` is a resource variable (else a TF1 reference variable)."""
    return getattr(getattr(variable, "op", None), "type", None) == "VarHandleOp"

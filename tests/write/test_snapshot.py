"""The snapshot of the watched variables before an update (tf_write/variables.py): eagerly
one traced read of all of them, which must hold the values of the moment it was taken."""

import gc

import numpy as np
import pytest
import tensorflow as tf

from tb_wur_plugin.tf_write.variables import snapshot, watched_variables


def _variables(seed: int) -> list[tf.Variable]:
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.normal(size=shape).astype(dtype))
            for shape, dtype in (((3, 4), np.float32), ((4,), np.float32), ((2, 2), np.float64))]


@pytest.mark.parametrize("context", ["eager", "tf.function", "mirrored"])
def test_the_snapshot_keeps_the_values_from_before_the_update(context):
    variables = _variables(0)
    if context == "mirrored":
        with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
            variables = [tf.Variable(v) for v in variables]
    watched = watched_variables(variables)
    expected = [v.numpy().copy() for v in variables]
    taken = tf.function(snapshot)(watched) if context == "tf.function" else snapshot(watched)
    optimizer = tf.keras.optimizers.Adam(0.1) if context != "mirrored" else None
    for _ in range(2):  # an optimizer's update (outside a strategy), assignments, in place
        if optimizer is not None:
            optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])
        for v in variables:
            v.assign_sub(0.5 * tf.ones_like(v))
    for value, before, variable in zip(taken, expected, variables):
        np.testing.assert_array_equal(value.numpy(), before)
        assert not np.array_equal(variable.numpy(), before)


def test_the_snapshot_reads_the_variables_it_is_given():
    """A snapshot of new variables, of the same shapes as earlier ones that were freed, holds
    their values (the kept traced read is held for the variables themselves)."""
    for seed in range(3):
        variables = _variables(seed)
        taken = snapshot(watched_variables(variables))
        for value, variable in zip(taken, variables):
            np.testing.assert_array_equal(value.numpy(), variable.numpy())
        del variables, taken
        gc.collect()

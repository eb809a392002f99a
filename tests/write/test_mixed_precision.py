"""Mixed precision: ratios are those of the float32 master weights, not of float16 copies.

Under the Keras policies "mixed_float16" and "mixed_bfloat16" layers compute in 16 bits but
keep float32 variables; `model.compile` wraps the optimizer of a mixed_float16 model in a
`LossScaleOptimizer`, a custom loop does it itself (scale_loss, then apply, which unscales).
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import (
    assert_ratios_close,
    ratio_series,
    read_events,
    reference_ratio,
)
from keras_helpers import ReferenceRatios, apply_non_finite_gradients
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.keras import WeightUpdateRatioCallback

POLICIES = ["mixed_float16", "mixed_bfloat16"]
HALF = {"mixed_float16": np.float16, "mixed_bfloat16": tf.bfloat16.as_numpy_dtype}


@pytest.fixture(params=POLICIES)
def policy(request):
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(request.param)
    try:
        yield request.param
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _model_and_data():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(16, activation="relu", name="hidden"),
        keras.layers.Dense(8, name="middle"),
        keras.layers.Dense(1, dtype="float32", name="head"),  # float32 outputs, as advised
    ])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype("float32")
    y = rng.normal(size=(32, 1)).astype("float32")
    return model, x, y


def _logged(logdir):
    return {(tag, step): r for tag, points in ratio_series(logdir).items() for step, r in points.items()}


def _assert_half_precision_ratios_would_differ(logged, weights):
    """The test can tell: ratios of the 16-bit copies of the same weights are far off."""
    worst = 0.0
    for key, (old, new) in weights.items():
        dtype = HALF[keras.mixed_precision.global_policy().name]
        half = reference_ratio(old.astype(dtype), new.astype(dtype))
        if np.isfinite(half) and np.isfinite(logged[key]) and logged[key] > 0:
            worst = max(worst, abs(half - logged[key]) / logged[key])
    assert worst > 1e-3, worst


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
def test_watch_logs_ratios_of_the_float32_master_weights(logdir, policy, use_function):
    model, x, y = _model_and_data()
    assert model.layers[0].compute_dtype != "float32"
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    optimizer = keras.optimizers.Adam(1e-2)
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    variables = model.trainable_variables

    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        with wur_summary.watch(variables, step=optimizer.iterations):
            optimizer.apply(grads, variables)

    step_fn = tf.function(train_step) if use_function else train_step
    expected, weights = {}, {}
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for _ in range(3):
            step = int(optimizer.iterations.numpy())
            before = [v.numpy() for v in variables]
            step_fn()
            assert int(optimizer.iterations.numpy()) == step + 1  # no step skipped here
            for v, old in zip(variables, before):
                expected[(v.path, step)] = reference_ratio(old, v.numpy())
                weights[(v.path, step)] = (old, v.numpy())
    writer.close()
    logged = _logged(logdir)
    assert_ratios_close(logged, expected, rtol=5e-7)
    _assert_half_precision_ratios_would_differ(logged, weights)


def test_the_callback_logs_ratios_of_the_float32_master_weights(logdir, policy):
    model, x, y = _model_and_data()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    wrapped = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert wrapped == (policy == "mixed_float16")  # Keras wraps it for float16 only
    reference = ReferenceRatios(every=2)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[reference, WeightUpdateRatioCallback(logdir, update_freq=2)])
    logged = _logged(os.path.join(logdir, "train"))
    assert reference.expected and not reference.skipped
    assert_ratios_close(logged, reference.expected, rtol=5e-7)
    assert {step for _, step in logged} == {0, 2, 4, 6}
    rates = read_events(os.path.join(logdir, "train"))[metadata.LEARNING_RATE_TAG]
    assert [(step, float(rate)) for step, rate, _ in rates] == [
        (s, pytest.approx(1e-3)) for s in (0, 2, 4, 6)
    ]


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_helper_forces_a_step_the_loss_scale_optimizer_skips(policy):
    model, _, _ = _model_and_data()
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    optimizer.build(model.trainable_variables)
    before = [v.numpy() for v in model.trainable_variables]
    scale = float(optimizer.dynamic_scale.numpy())
    apply_non_finite_gradients(optimizer, model.trainable_variables)
    assert int(optimizer.iterations.numpy()) == 0
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2
    for old, v in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, v.numpy())

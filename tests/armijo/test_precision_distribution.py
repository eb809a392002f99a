"""`LineSearchModel` off the plain float32 single-device path: XLA (`jit_compile=True`), the
``mixed_float16`` policy (losses and condition in float32, dynamic loss scaling), and
`tf.distribute.MirroredStrategy` over two CPU replicas (in a fresh process,
`support/armijo_mirrored_worker.py`); what is refused, and the message that says so."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer


import forked
from suite_paths import SUPPORT
from tb_wur_plugin import armijo
from tb_wur_plugin.armijo.model import LOSS_SCALE_GROWTH_STEPS

WORKER = os.path.join(SUPPORT, "armijo_mirrored_worker.py")
BCE = keras.losses.BinaryCrossentropy(from_logits=True)


def _data():
    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    return x.astype(np.float32), y[:, None].astype(np.float32)


X, Y = _data()


def small_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((X.shape[1],)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(1)])


def fit_rows(trainer, epochs=2, batch_size=64, callbacks=None):
    """Fit; the step log's rows (step, step size, backtracks, loss, new loss)."""
    trainer.fit(X, Y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=False,
                callbacks=callbacks)
    rows, missing = trainer._step_log.read(0, int(trainer.optimizer.iterations.numpy()))
    assert missing == 0
    return rows


# --- XLA ----------------------------------------------------------------------------------


def test_jit_compile_makes_the_same_steps():
    """The whole step (gradient pass, trial loop, assignments, step log) compiled by XLA:
    the decisions of the uncompiled step, the step sizes and weights up to float32
    rounding (XLA fuses and reorders)."""
    kwargs = dict(reset="initial", initial_step_size=50.0, c=0.3)  # backtracks every step
    runs = {}
    for jit in (False, True):
        trainer = armijo.LineSearchModel(small_model(), armijo.StochasticArmijo(**kwargs))
        trainer.compile(loss=BCE, jit_compile=jit)
        runs[jit] = (fit_rows(trainer), trainer.model.get_weights())
        assert trainer.jit_compile is jit
    (plain, plain_weights), (xla, xla_weights) = runs[False], runs[True]
    np.testing.assert_array_equal(xla[:, 2], plain[:, 2])
    assert plain[:, 2].min() > 0
    np.testing.assert_allclose(xla[:, 1], plain[:, 1], rtol=1e-9)  # s0·β^b, in float64
    np.testing.assert_allclose(xla[:, 3:], plain[:, 3:], rtol=1e-4)
    for a, b in zip(xla_weights, plain_weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_jit_compile_refuses_a_recording_writer(tmp_path):
    trainer = armijo.LineSearchModel(small_model(), armijo.StochasticArmijo(**armijo.RECOMMENDED))
    trainer.compile(loss=BCE, jit_compile=True)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(step=0), pytest.raises(ValueError, match="jit_compile=True.*XLA"):
        trainer.fit(X, Y, batch_size=64, epochs=1, verbose=0)
    writer.close()


# --- mixed_float16 ------------------------------------------------------------------------


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_mixed_float16_losses_and_condition_in_float32(mixed_float16):
    """Every logged loss is the float32 loss of the float16 forward pass at the weights
    before the step (f) and after it (f' of the accepted trial): the condition compares
    float32 losses (in float64), not float16 ones; the monotone search decreased each.

    The probe takes that forward pass both eagerly and inside a `tf.function`: in a traced
    graph TensorFlow fuses the dense layer's MatMul and BiasAdd into one oneDNN kernel, and on
    CPUs with float16 arithmetic (AVX512-FP16) the fused and separate kernels round
    differently (the step's f, from its gradient pass, is the fused one's there). Either
    way the float16 pass differs from the float32 one and from float16 rounding of the loss
    by 1e-5 or more (relative), so a loss taken in another precision fails here."""
    inner = small_model()
    assert inner.layers[0].compute_dtype == "float16"
    assert inner.layers[0].kernel.dtype == "float32"
    trainer = armijo.LineSearchModel(
        inner, armijo.StochasticArmijo(reset="initial", initial_step_size=50.0, c=0.3))
    trainer.compile(loss=BCE)
    assert float(trainer.loss_scale.numpy()) == 2.0 ** 15
    weights = []

    class Weights(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            weights.append(inner.get_weights())

    rows = fit_rows(trainer, epochs=1, callbacks=[Weights()])
    weights.append(inner.get_weights())
    assert rows[:, 2].min() > 0  # every step backtracked
    probe = small_model()
    traced_loss = tf.function(lambda x, y: BCE(y, probe(x, training=True)))
    for k, row in enumerate(rows):
        xb, yb = X[k * 64:(k + 1) * 64], Y[k * 64:(k + 1) * 64]
        for column, w in ((3, weights[k]), (4, weights[k + 1])):
            probe.set_weights(w)
            losses = [BCE(yb, probe(xb, training=True)), traced_loss(xb, yb)]
            assert all(loss.dtype == tf.float32 for loss in losses)
            assert any(row[column] == pytest.approx(float(loss), rel=1e-6)
                       for loss in losses), (k, column, row[column], [float(v) for v in losses])
        assert row[4] < row[3]


def test_mixed_float16_loss_scale_skips_overflowing_steps(mixed_float16):
    """A step whose scaled gradients overflow float16 moves nothing and halves the scale;
    after LOSS_SCALE_GROWTH_STEPS finite steps in a row the scale doubles."""
    inner = small_model()
    start = inner.get_weights()
    trainer = armijo.LineSearchModel(inner, armijo.StochasticArmijo(**armijo.RECOMMENDED))
    trainer.compile(loss=BCE)
    trainer.loss_scale.assign(2.0 ** 100)
    rows = fit_rows(trainer, epochs=1, batch_size=len(X))
    assert rows[0, 1] == 0.0 and rows[0, 2] == 0  # nothing moved
    for a, b in zip(inner.get_weights(), start):
        np.testing.assert_array_equal(a, b)
    assert float(trainer.loss_scale.numpy()) == 2.0 ** 99
    trainer.loss_scale.assign(2.0 ** 10)
    trainer._finite_steps.assign(LOSS_SCALE_GROWTH_STEPS - 1)
    rows = fit_rows(trainer, epochs=1, batch_size=len(X))
    assert rows[-1, 1] > 0  # moved
    assert float(trainer.loss_scale.numpy()) == 2.0 ** 11
    assert int(trainer._finite_steps.numpy()) == 0


def test_float32_model_has_no_loss_scale():
    trainer = armijo.LineSearchModel(small_model(), armijo.StochasticArmijo())
    assert trainer.loss_scale is None


# --- MirroredStrategy ---------------------------------------------------------------------


def test_mirrored_strategy_takes_the_one_device_steps(tmp_path):
    """Two CPU replicas: each gathers the global batch and searches on it, the first
    replica's outcome is assigned everywhere: the same steps as one device on the same
    global batches (uneven last batch included), every replica holding the same weights.
    Another multi-replica strategy is refused with a message naming it."""
    out = tmp_path / "mirrored.json"
    # forked from the preloaded fork server (support/forked.py), before anything ran on
    # TensorFlow there; it imports the package the fork server imported
    code, stdout, stderr = forked.run_script([WORKER, str(out)], timeout=600)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    with open(out) as f:
        results = json.load(f)
    for name in ("recommended", "momentum"):
        mirrored, one = results[name]["mirrored"], results[name]["one_device"]
        assert mirrored["replicas"] == 2 and mirrored["copies"] == [2], name
        assert mirrored["replicas_agree"], name
        rows, expected = np.array(mirrored["rows"]), np.array(one["rows"])
        assert mirrored["missing"] == 0 and len(rows) == 10  # 2 epochs of 5 global batches
        np.testing.assert_array_equal(rows[:, [0, 2]], expected[:, [0, 2]])
        np.testing.assert_allclose(rows[:, [1, 3, 4]], expected[:, [1, 3, 4]], rtol=1e-6)
        for a, b in zip(mirrored["weights"], one["weights"]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.array(results["momentum"]["mirrored"]["rows"])[:, 2].sum() > 0
    error = results["central_storage_error"]
    assert error and "CentralStorageStrategy" in error and "MirroredStrategy" in error

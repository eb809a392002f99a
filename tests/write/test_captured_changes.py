"""`watch(..., optimizer=)`: Δw taken from the optimizer's own update, checked against the
weights saved before and after each step, and the cases where it must fall back to them."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import ratio_series, read_packed, reference_ratio
from keras_helpers import OPTIMIZERS, mixed_model_and_data
from tb_wur_plugin import wur_summary
from tb_wur_plugin.tf_write import watch


@pytest.fixture
def captured(monkeypatch):
    """Per call of `watch.record`: which watched variables had their Δw captured."""
    calls = []
    record = watch.record

    def spy(watched, before, step, histograms=False, changes=None, *rest):
        calls.append([c is not None for c in (changes or [None] * len(watched))])
        return record(watched, before, step, histograms, changes, *rest)

    monkeypatch.setattr(watch, "record", spy)
    return calls


def _train(model, optimizer, x, y, logdir, steps, use_function, histograms=False):
    """Steps under watch(optimizer=); {(path, step): (before, after)} of every variable."""

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations,
                               histograms=histograms, optimizer=optimizer):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    step_fn = tf.function(train_step) if use_function else train_step
    weights = {}
    with tf.summary.create_file_writer(logdir).as_default():
        for step in range(steps):
            before = [v.numpy() for v in model.trainable_variables]
            step_fn(x, y)
            for v, old in zip(model.trainable_variables, before):
                weights[(v.path, step)] = (old, v.numpy())
    return weights


def _assert_optimizer_ratios(logdir, weights):
    """The logged ratio is ‖Δw‖/‖w‖ of the optimizer's Δw, which differs from the stored
    change w' − w by the float32 rounding of w + Δw (half an ulp of w' per element): so
    |logged − reference| ≤ ‖ulp(w')‖/‖w‖, plus the float32 sums and storage (5e-7)."""
    logged = {(tag, step): r for tag, points in ratio_series(logdir).items()
              for step, r in points.items()}
    assert set(logged) == set(weights)
    for key, (old, new) in weights.items():
        want = reference_ratio(old, new)
        if not np.isfinite(want):
            assert logged[key] == want, (key, logged[key], want)
            continue
        norm = np.linalg.norm(old.astype(np.float64))
        rounding = np.linalg.norm(np.spacing(new).astype(np.float64)) / norm
        assert abs(logged[key] - want) <= rounding + 5e-7 * want, (key, logged[key], want)


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_ratios_from_the_optimizers_update_match_the_weights(logdir, captured, name, use_function):
    model, x, y = mixed_model_and_data()
    weights = _train(model, OPTIMIZERS[name](), x, y, logdir, 3, use_function)
    _assert_optimizer_ratios(logdir, weights)
    paths = [v.path for v in model.trainable_variables]
    # plain SGD updates the embedding sparsely (scatter_sub): compared before and after
    sparse = {paths.index("embed/embeddings")} if name == "sgd" else set()
    expected = [i not in sparse for i in range(len(paths))]
    assert captured and all(flags == expected for flags in captured), captured


def test_sgd_ratio_is_exactly_the_learning_rate_times_the_gradient_norm(logdir, captured):
    variable = tf.Variable(np.linspace(-1, 1, 300, dtype=np.float32).reshape(30, 10))
    gradient = np.random.default_rng(3).normal(size=(30, 10)).astype(np.float32)
    optimizer = keras.optimizers.SGD(0.01)
    with tf.summary.create_file_writer(logdir).as_default():
        with wur_summary.watch([variable], step=0, optimizer=optimizer):
            optimizer.apply([tf.constant(gradient)], [variable])
    want = (np.linalg.norm((np.float32(0.01) * gradient).astype(np.float64))
            / np.linalg.norm(np.linspace(-1, 1, 300)))
    (points,) = ratio_series(logdir).values()
    np.testing.assert_allclose(points[0], want, rtol=2e-7)
    assert captured == [[True]]


def test_kernel_constraints_are_part_of_the_update(logdir, captured):
    """Keras applies constraints after the update with `variable.assign`: captured too."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(
        30, kernel_constraint=keras.constraints.MaxNorm(0.05))])
    x, y = np.ones((4, 20), np.float32), np.zeros((4, 30), np.float32)
    weights = _train(model, keras.optimizers.Adam(0.1), x, y, logdir, 3, True)
    _assert_optimizer_ratios(logdir, weights)
    assert captured and all(flags == [True, True] for flags in captured), captured


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
def test_loss_scale_optimizer_skipped_step_still_logs_zero(logdir, captured, use_function):
    """A skipped step makes no update: nothing to capture, so the weights are compared."""
    variables = [tf.Variable(np.ones((3, 2), np.float32)), tf.Variable(np.ones(2, np.float32))]
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))

    def step(grads):
        with wur_summary.watch(variables, step=optimizer.iterations, optimizer=optimizer):
            optimizer.apply(grads, variables)

    step_fn = tf.function(step) if use_function else step
    with tf.summary.create_file_writer(logdir).as_default():
        step_fn([tf.ones((3, 2)), tf.ones(2)])
        step_fn([tf.fill((3, 2), np.inf), tf.ones(2)])  # skipped
    assert read_packed(logdir).skipped == [(0, 0.0), (1, 1.0)]
    for points in ratio_series(logdir).values():
        assert points[0] > 0 and points[1] == 0.0
    if use_function:  # the update is made in a conditional's branch: not captured
        assert captured and all(flags == [False, False] for flags in captured), captured
    else:
        assert captured == [[True, True], [False, False]]


def test_update_made_in_a_conditional_branch_is_compared_before_and_after(logdir, captured):
    variable = tf.Variable(np.full(5, 2.0, np.float32))
    optimizer = keras.optimizers.SGD(0.5)

    @tf.function
    def step(apply):
        with wur_summary.watch([variable], step=optimizer.iterations, optimizer=optimizer):
            tf.cond(apply, lambda: optimizer.apply([tf.ones(5)], [variable]) or tf.constant(1),
                    lambda: tf.constant(0))

    with tf.summary.create_file_writer(logdir).as_default():
        step(tf.constant(True))
    (points,) = ratio_series(logdir).values()
    np.testing.assert_allclose(points[0], 0.25, rtol=1e-7)  # ‖0.5·1‖ / ‖2‖ per element
    assert captured == [[False]]


def test_assign_methods_are_restored_after_the_block(writer):
    variable = tf.Variable(np.ones(3, np.float32))
    optimizer = keras.optimizers.SGD(0.1)
    with pytest.raises(RuntimeError, match="in the block"):
        with wur_summary.watch([variable], step=0, optimizer=optimizer):
            optimizer.apply([tf.ones(3)], [variable])
            raise RuntimeError("in the block")
    with wur_summary.watch([variable], step=1, optimizer=optimizer):
        with wur_summary.watch([variable], step=1, optimizer=optimizer):  # nested
            optimizer.apply([tf.ones(3)], [variable])
    assert not set(vars(variable)) & {"assign", "assign_add", "assign_sub", "scatter_sub"}
    assert type(variable).assign_sub is not None and variable.assign_sub.__self__ is variable


def test_optimizer_must_be_a_keras_optimizer(writer):
    variable = tf.Variable(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="keras.optimizers.Optimizer.*got str"):
        with wur_summary.watch([variable], step=0, optimizer="adam"):
            pass

"""The stochastic Armijo line search against an independent numpy implementation of the
reference algorithm (`sls.Sls`, line_search_fn="armijo"), its Keras model, its summaries."""

from __future__ import annotations

import glob
import importlib.util
import math
import os
import runpy
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import summary_pb2

from logistic_reference import D, X, Y, logistic_data, np_grad, np_loss
from tb_wur_plugin import armijo, metadata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- data and the numpy reference ---------------------------------------------------------


def reference_sls(batches, steps, *, n_batches_per_epoch=None, initial_step_size=1.0, c=0.1,
                  beta=0.9, gamma=2.0, reset="grow", max_backtracks=100, max_step_size=None,
                  w0=None, b0=0.0):
    """The reference algorithm (sls/sls.py Sls.step and sls/utils.py), in numpy float64.

    Returns, per step: (applied step size, backtracks, stored step size, loss, new loss).
    """
    w = np.zeros(D) if w0 is None else np.array(w0, np.float64)
    b = float(b0)
    stored = initial_step_size
    out = []
    for k in range(steps):
        x, y = batches[k % len(batches)]
        # ut.reset_step
        if reset == "keep":
            s = stored
        elif reset == "grow":
            s = stored * gamma ** (1.0 / n_batches_per_epoch)
        else:
            s = initial_step_size
        if max_step_size is not None:
            s = min(s, max_step_size)
        f = np_loss(w, b, x, y)
        gw, gb = np_grad(w, b, x, y)
        grad_norm = math.sqrt(float(np.sum(gw * gw)) + gb * gb)
        applied, backtracks, new_f = 0.0, 0, f
        if grad_norm >= 1e-8:
            found = 0
            for _ in range(max_backtracks):
                w_try, b_try = w - s * gw, b - s * gb
                new_f = np_loss(w_try, b_try, x, y)
                # ut.check_armijo_conditions
                if new_f - (f - s * c * grad_norm ** 2) <= 0:
                    found = 1
                    break
                s = s * beta
                backtracks += 1
            if found:
                w, b, applied = w_try, b_try, s
            else:
                w, b, applied = w - 1e-6 * gw, b - 1e-6 * gb, 1e-6
        stored = s
        out.append((applied, backtracks, stored, f, new_f))
    return out


def full_batch():
    return [(X, Y)]


def mini_batches(size=64):
    return [(X[i:i + size], Y[i:i + size]) for i in range(0, len(X), size)]


def run_search(search, batches, steps, *, graph=False, dtype=tf.float64):
    """The same problem with `search.minimize`: (per-step results as in reference_sls)."""
    w = tf.Variable(tf.zeros([D], dtype), name="w")
    b = tf.Variable(tf.zeros([], dtype), name="b")
    tensors = [(tf.constant(x, dtype), tf.constant(y, dtype)) for x, y in batches]

    def step(x, y):
        def loss_fn():
            z = tf.linalg.matvec(x, w) + b
            return tf.reduce_mean(tf.nn.softplus(z) - y * z)
        return search.minimize(loss_fn, [w, b])

    if graph:
        step = tf.function(step)
    out = []
    for k in range(steps):
        r = step(*tensors[k % len(tensors)])
        out.append((float(r.step_size), int(r.backtracks), float(search.step_size.numpy()),
                    float(r.loss), float(r.new_loss)))
    return out


def assert_same_sequence(actual, expected):
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a[1] == e[1], f"step {k}: backtracks {a[1]} != {e[1]}"
        for i, name in ((0, "applied step size"), (2, "stored step size")):
            assert a[i] == pytest.approx(e[i], rel=1e-12, abs=0), f"step {k}: {name}"
        assert a[3] == pytest.approx(e[3], rel=1e-10), f"step {k}: loss"
        assert a[4] == pytest.approx(e[4], rel=1e-10), f"step {k}: new loss"


# --- the sequences of step sizes and backtracks -------------------------------------------

CASES = {
    "grow": dict(n_batches_per_epoch=3, reset="grow", initial_step_size=4.0),
    "keep": dict(reset="keep", initial_step_size=20.0),
    "initial": dict(reset="initial", initial_step_size=5.0),
    "grow_capped": dict(n_batches_per_epoch=2, reset="grow", initial_step_size=2.0,
                        max_step_size=3.0),
    "keep_large_c": dict(reset="keep", initial_step_size=40.0, c=0.5, beta=0.7),
    # max_backtracks trials all rejected: the 1e-6 fallback, then the stored shrunk size.
    "fallback": dict(reset="keep", initial_step_size=1e4, max_backtracks=10),
    "fallback_always": dict(reset="initial", initial_step_size=1e6, max_backtracks=2),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batching", ["full", "mini"])
def test_sequence_matches_reference(case, batching):
    kwargs = CASES[case]
    batches = full_batch() if batching == "full" else mini_batches()
    steps = 25 if batching == "full" else 2 * len(batches)
    expected = reference_sls(batches, steps, **kwargs)
    actual = run_search(armijo.StochasticArmijo(**kwargs), batches, steps, graph=True)
    assert_same_sequence(actual, expected)
    assert any(e[1] > 0 for e in expected)  # every case backtracks
    if case.startswith("fallback"):
        assert any(e[0] == 1e-6 for e in expected)
    if case == "fallback":
        assert any(e[0] != 1e-6 for e in expected)  # and recovers
    if case == "grow_capped":
        assert max(e[2] for e in expected) <= 3.0
        assert any(e[2] == 3.0 for e in expected)


def test_eager_and_tf_function_agree_with_reference():
    kwargs = dict(n_batches_per_epoch=9, reset="grow", initial_step_size=8.0)
    batches = mini_batches()
    expected = reference_sls(batches, 12, **kwargs)
    eager = run_search(armijo.StochasticArmijo(**kwargs), batches, 12, graph=False)
    graph = run_search(armijo.StochasticArmijo(**kwargs), batches, 12, graph=True)
    assert_same_sequence(eager, expected)
    assert_same_sequence(graph, expected)
    assert [e[:3] for e in eager] == [g[:3] for g in graph]


def test_reset_applies_at_the_first_call():
    search = armijo.StochasticArmijo(n_batches_per_epoch=4, initial_step_size=0.5)
    run_search(search, full_batch(), 1)
    assert search.step_size.numpy() == 0.5 * 2.0 ** (1.0 / 4)  # tiny steps are accepted
    assert search.step_size.dtype == tf.float64
    assert isinstance(search.step_size, tf.Variable)


def test_armijo_condition_holds_for_every_accepted_step():
    """Recomputed in numpy from the variables before and after each step."""
    search = armijo.StochasticArmijo(reset="keep", initial_step_size=30.0, c=0.3)
    w = tf.Variable(tf.zeros([D], tf.float64))
    b = tf.Variable(tf.zeros([], tf.float64))
    accepted = 0
    for x, y in mini_batches() * 2:
        def loss_fn():
            z = tf.linalg.matvec(x, w) + b
            return tf.reduce_mean(tf.nn.softplus(z) - y * z)
        w0, b0 = w.numpy(), float(b.numpy())
        r = search.minimize(loss_fn, [w, b])
        w1, b1 = w.numpy(), float(b.numpy())
        gw, gb = np_grad(w0, b0, x, y)
        s = float(r.step_size)
        np.testing.assert_allclose(w1, w0 - s * gw, rtol=1e-12, atol=1e-15)
        if s != 1e-6:
            accepted += 1
            f0, f1 = np_loss(w0, b0, x, y), np_loss(w1, b1, x, y)
            assert f1 <= f0 - 0.3 * s * (np.sum(gw * gw) + gb * gb) + 1e-12
            assert float(r.new_loss) == pytest.approx(f1, rel=1e-12)
        assert float(r.grad_norm) == pytest.approx(math.sqrt(np.sum(gw * gw) + gb * gb), rel=1e-12)
    assert accepted > 0


# --- edge cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("slope,moves", [(0.0, False), (0.5e-8, False), (2e-8, True)])
def test_tiny_gradient_moves_nothing(graph, slope, moves):
    """‖g‖ < 1e-8: nothing moves and the stored step size is the reset one."""
    v = tf.Variable([1.0, 2.0], dtype=tf.float64)
    direction = tf.constant([0.6, 0.8], tf.float64)  # a unit vector

    def loss_fn():
        return slope * tf.reduce_sum(direction * v)

    search = armijo.StochasticArmijo(n_batches_per_epoch=3, reset="grow", initial_step_size=2.0)
    minimize = tf.function(search.minimize) if graph else search.minimize
    r = minimize(loss_fn, [v])
    grown = 2.0 * 2.0 ** (1.0 / 3)
    assert float(r.grad_norm) == pytest.approx(slope, rel=1e-12)
    if moves:
        assert float(r.step_size) == grown and int(r.backtracks) == 0
        np.testing.assert_allclose(v.numpy(), [1.0, 2.0] - grown * slope * direction.numpy())
    else:
        assert float(r.step_size) == 0.0 and int(r.backtracks) == 0
        assert float(r.new_loss) == float(r.loss)
        np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    assert search.step_size.numpy() == grown


def test_unused_variable_has_zero_gradient():
    used = tf.Variable(3.0, dtype=tf.float64)
    unused = tf.Variable(5.0, dtype=tf.float64)
    search = armijo.StochasticArmijo(reset="keep")
    r = search.minimize(lambda: (used - 1.0) ** 2, [used, unused])
    assert float(r.step_size) > 0
    assert unused.numpy() == 5.0
    assert abs(used.numpy() - 1.0) < 2.0


def test_float32_variables_satisfy_armijo():
    x32, y32 = logistic_data(np.float32)
    w = tf.Variable(tf.zeros([D], tf.float32))
    b = tf.Variable(tf.zeros([], tf.float32))
    search = armijo.StochasticArmijo(n_batches_per_epoch=9, initial_step_size=10.0)

    @tf.function
    def step(x, y):
        def loss_fn():
            z = tf.linalg.matvec(x, w) + b
            return tf.reduce_mean(tf.nn.softplus(z) - y * z)
        return search.minimize(loss_fn, [w, b])

    backtracked = 0
    for i in range(0, len(x32), 64):
        x, y = x32[i:i + 64], y32[i:i + 64]
        w0, b0 = w.numpy().astype(np.float64), float(b.numpy())
        r = step(tf.constant(x), tf.constant(y))
        assert r.step_size.dtype == tf.float64 and w.dtype == tf.float32
        s = float(r.step_size)
        backtracked += int(r.backtracks)
        # The condition the search checked, in float64 from float32 losses.
        assert float(r.new_loss) <= float(r.loss) - 0.1 * s * float(r.grad_norm) ** 2
        # Recomputed in numpy float64 at the float32 weights, up to float32 rounding.
        f0 = np_loss(w0, b0, x.astype(np.float64), y.astype(np.float64))
        f1 = np_loss(w.numpy().astype(np.float64), float(b.numpy()), x.astype(np.float64),
                     y.astype(np.float64))
        gw, gb = np_grad(w0, b0, x.astype(np.float64), y.astype(np.float64))
        assert f1 <= f0 - 0.1 * s * (np.sum(gw * gw) + gb * gb) + 1e-5 * f0
    assert backtracked > 0


def test_keras_variables():
    layer = keras.layers.Dense(1, use_bias=True)
    layer.build((None, D))
    x = tf.constant(X, tf.float32)
    y = tf.constant(Y[:, None], tf.float32)
    loss_object = keras.losses.BinaryCrossentropy(from_logits=True)
    search = armijo.StochasticArmijo(reset="keep", initial_step_size=20.0)
    before = loss_object(y, layer(x))
    results = [search.minimize(lambda: loss_object(y, layer(x)), layer.trainable_variables)
               for _ in range(5)]
    assert float(loss_object(y, layer(x))) < float(before)
    assert sum(int(r.backtracks) for r in results) > 0


# --- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,error,name", [
    (dict(n_batches_per_epoch=0), ValueError, "n_batches_per_epoch"),
    (dict(n_batches_per_epoch=2.5), TypeError, "n_batches_per_epoch"),
    (dict(n_batches_per_epoch=True), TypeError, "n_batches_per_epoch"),
    (dict(initial_step_size=0.0), ValueError, "initial_step_size"),
    (dict(initial_step_size=float("inf")), ValueError, "initial_step_size"),
    (dict(initial_step_size="1"), TypeError, "initial_step_size"),
    (dict(c=0.0), ValueError, "c must"),
    (dict(c=1.0), ValueError, "c must"),
    (dict(c=None), TypeError, "c must"),
    (dict(beta=1.0), ValueError, "beta"),
    (dict(beta=-0.5), ValueError, "beta"),
    (dict(gamma=0.5), ValueError, "gamma"),
    (dict(gamma="2"), TypeError, "gamma"),
    (dict(reset="sometimes"), ValueError, "reset"),
    (dict(reset=1), TypeError, "reset"),
    (dict(max_backtracks=0), ValueError, "max_backtracks"),
    (dict(max_backtracks=1.0), TypeError, "max_backtracks"),
    (dict(max_step_size=-1.0), ValueError, "max_step_size"),
    (dict(max_step_size=[1.0]), TypeError, "max_step_size"),
])
def test_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        armijo.StochasticArmijo(**kwargs)


def test_bad_minimize_arguments():
    v = tf.Variable(1.0)
    search = armijo.StochasticArmijo(reset="keep")
    with pytest.raises(TypeError, match="loss_fn"):
        search.minimize(1.0, [v])
    with pytest.raises(TypeError, match="variables"):
        search.minimize(lambda: v * v, "v")
    with pytest.raises(TypeError, match="variables"):
        search.minimize(lambda: v * v, [tf.constant(1.0)])
    with pytest.raises(ValueError, match="empty"):
        search.minimize(lambda: v * v, [])
    with pytest.raises(ValueError, match="twice"):
        search.minimize(lambda: v * v, [v, v])
    with pytest.raises(ValueError, match="floating"):
        search.minimize(lambda: 1.0, [tf.Variable(1)])
    with pytest.raises(ValueError, match="scalar"):
        search.minimize(lambda: v * tf.ones([3]), [v])
    with pytest.raises(ValueError, match="n_batches_per_epoch"):
        armijo.StochasticArmijo(reset="grow").minimize(lambda: v * v, [v])
    assert v.numpy() == 1.0


# --- summaries ----------------------------------------------------------------------------


def read_line_search(logdir):
    """tag -> {step: value} of the line-search series (and of any other series in the
    logdir: a float for a scalar, else the array), read with summary_iterator, and the
    metadata of each tag."""
    values, metas = {}, {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("metadata"):
                    metas[value.tag] = value.metadata
                array = tf.make_ndarray(value.tensor)
                values.setdefault(value.tag, {})[event.step] = (
                    float(array) if array.ndim == 0 else array)
    return values, metas


def test_minimize_writes_the_line_search_summaries(tmp_path):
    logdir = str(tmp_path)
    writer = tf.summary.create_file_writer(logdir)
    search = armijo.StochasticArmijo(reset="keep", initial_step_size=50.0)
    w = tf.Variable(tf.zeros([D], tf.float64))
    b = tf.Variable(tf.zeros([], tf.float64))
    x, y = tf.constant(X), tf.constant(Y)

    def loss_fn():
        z = tf.linalg.matvec(x, w) + b
        return tf.reduce_mean(tf.nn.softplus(z) - y * z)

    step = tf.function(lambda k: search.minimize(loss_fn, [w, b], step=k))
    results = {}
    with writer.as_default():
        for k in range(4):
            results[k] = step(tf.constant(k, tf.int64))
        with tf.summary.record_if(False):
            search.minimize(loss_fn, [w, b], step=99)  # not written
        tf.summary.experimental.set_step(7)
        try:
            results[7] = search.minimize(loss_fn, [w, b])  # eager, at the default step
        finally:
            tf.summary.experimental.set_step(None)
    search.minimize(loss_fn, [w, b], step=98)  # no writer: nothing
    writer.close()

    values, metas = read_line_search(logdir)
    assert set(values) == set(metadata.LINE_SEARCH_TAGS)
    for tag in metadata.LINE_SEARCH_TAGS:
        assert sorted(values[tag]) == [0, 1, 2, 3, 7]
        meta = metas[tag]
        assert meta.plugin_data.plugin_name == metadata.PLUGIN_NAME
        assert meta.data_class == summary_pb2.DATA_CLASS_SCALAR
        content = metadata.parse_plugin_content(meta.plugin_data.content)
        assert content["kind"] == metadata.KIND_LINE_SEARCH
        assert metadata.line_search_tag(content["series"]) == tag
        assert metadata.is_reserved_tag(tag)
    for k, r in results.items():
        assert values[metadata.LINE_SEARCH_STEP_SIZE_TAG][k] == np.float32(r.step_size.numpy())
        assert values[metadata.LINE_SEARCH_BACKTRACKS_TAG][k] == int(r.backtracks)
        assert values[metadata.LINE_SEARCH_LOSS_TAG][k] == np.float32(r.loss.numpy())
        assert values[metadata.LINE_SEARCH_NEW_LOSS_TAG][k] == np.float32(r.new_loss.numpy())
    assert values[metadata.LINE_SEARCH_BACKTRACKS_TAG][0] > 0

    # TensorBoard's loader sees them as wur tensors of these tags.
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={"tensors": 0})
    acc.Reload()
    assert set(acc.PluginTagToContent(metadata.PLUGIN_NAME)) == set(metadata.LINE_SEARCH_TAGS)
    events = acc.Tensors(metadata.LINE_SEARCH_BACKTRACKS_TAG)
    assert [e.step for e in events] == [0, 1, 2, 3, 7]


def test_tensor_record_if_and_no_writer_add_nothing(tmp_path):
    v = tf.Variable(3.0, dtype=tf.float64)
    search = armijo.StochasticArmijo(reset="keep")
    flag = tf.Variable(False)

    @tf.function
    def step():
        return search.minimize(lambda: (v - 1.0) ** 2, [v], step=tf.constant(0, tf.int64))

    ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
    assert "WriteRawProtoSummary" not in ops and "WriteSummary" not in ops

    logdir = str(tmp_path)
    writer = tf.summary.create_file_writer(logdir)

    @tf.function
    def gated(k):
        with tf.summary.record_if(lambda: flag):
            return search.minimize(lambda: (v - 1.0) ** 2, [v], step=k)

    with writer.as_default():
        gated(tf.constant(0, tf.int64))
        flag.assign(True)
        gated(tf.constant(1, tf.int64))
    writer.close()
    values, _ = read_line_search(logdir)
    assert sorted(values[metadata.LINE_SEARCH_STEP_SIZE_TAG]) == [1]


def test_no_step_raises_when_recording(tmp_path):
    v = tf.Variable(3.0, dtype=tf.float64)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(), pytest.raises(ValueError, match="step"):
        armijo.StochasticArmijo(reset="keep").minimize(lambda: v * v, [v])


# --- LineSearchModel ----------------------------------------------------------------------


def logistic_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((D,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


BCE = keras.losses.BinaryCrossentropy(from_logits=True)


def fit_logged(model, x, y, logdir, **fit_kwargs):
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        model.fit(x, y, verbose=0, shuffle=False, **fit_kwargs)
    writer.close()
    values, _ = read_line_search(logdir)
    return values


def test_fit_gives_the_custom_loop_sequence(tmp_path):
    x, y = X.astype(np.float32), Y[:, None].astype(np.float32)
    kwargs = dict(initial_step_size=4.0, c=0.2)  # n_batches_per_epoch from fit: 9
    trained = logistic_model()
    inner_loop = logistic_model()
    inner_loop.set_weights(trained.get_weights())

    model = armijo.LineSearchModel(trained, armijo.StochasticArmijo(**kwargs))
    model.compile(loss=BCE, metrics=["accuracy"])
    values = fit_logged(model, x, y, str(tmp_path), batch_size=64, epochs=2)
    assert model.search.n_batches_per_epoch == 9
    assert int(model.optimizer.iterations.numpy()) == 18

    search = armijo.StochasticArmijo(n_batches_per_epoch=9, **kwargs)

    @tf.function
    def step(xb, yb):
        return search.minimize(lambda: BCE(yb, inner_loop(xb, training=True)),
                               inner_loop.trainable_variables)

    loop = []
    for epoch in range(2):
        for i in range(0, len(x), 64):
            loop.append(step(tf.constant(x[i:i + 64]), tf.constant(y[i:i + 64])))
    logged_steps = values[metadata.LINE_SEARCH_STEP_SIZE_TAG]
    assert sorted(logged_steps) == list(range(18))
    assert [values[metadata.LINE_SEARCH_BACKTRACKS_TAG][k] for k in range(18)] == [
        int(r.backtracks) for r in loop]
    assert sum(int(r.backtracks) for r in loop) > 0
    assert [logged_steps[k] for k in range(18)] == [np.float32(r.step_size.numpy()) for r in loop]
    assert model.search.step_size.numpy() == search.step_size.numpy()
    for a, b in zip(trained.get_weights(), inner_loop.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_stored_step_size_per_batch_via_callback():
    x, y = X.astype(np.float32), Y[:, None].astype(np.float32)
    seen = []

    class Reader(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(float(self.model.search.step_size.numpy()))

    model = armijo.LineSearchModel(logistic_model(), armijo.StochasticArmijo(reset="keep"))
    model.compile(loss=BCE)
    model.fit(x, y, batch_size=128, epochs=1, verbose=0, shuffle=False, callbacks=[Reader()])
    assert len(seen) == 5 and all(s > 0 for s in seen)
    # The internal optimizer's learning rate reads the stored step size.
    assert float(np.asarray(model.optimizer.learning_rate)) == np.float32(seen[-1])


def bn_model(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((D,)), keras.layers.Dense(6), keras.layers.BatchNormalization(),
        keras.layers.Activation("relu"), keras.layers.Dense(1)])


def test_batchnorm_statistics_as_one_plain_sgd_step(tmp_path):
    x, y = X[:128].astype(np.float32), Y[:128, None].astype(np.float32)
    inner = bn_model()
    start = inner.get_weights()
    model = armijo.LineSearchModel(
        inner, armijo.StochasticArmijo(reset="initial", initial_step_size=200.0))
    model.compile(loss=BCE)
    values = fit_logged(model, x, y, str(tmp_path), batch_size=128, epochs=1)
    backtracks = values[metadata.LINE_SEARCH_BACKTRACKS_TAG][0]
    assert backtracks >= 3  # several trials in training mode
    step_size = float(model.search.step_size.numpy())  # accepted (reset="initial")
    assert values[metadata.LINE_SEARCH_STEP_SIZE_TAG][0] == np.float32(step_size)

    plain = bn_model()
    plain.set_weights(start)
    plain.compile(optimizer=keras.optimizers.SGD(learning_rate=step_size), loss=BCE)
    plain.fit(x, y, batch_size=128, epochs=1, verbose=0, shuffle=False)
    bn, plain_bn = inner.layers[1], plain.layers[1]
    np.testing.assert_allclose(bn.moving_mean.numpy(), plain_bn.moving_mean.numpy(),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(bn.moving_variance.numpy(), plain_bn.moving_variance.numpy(),
                               rtol=1e-6, atol=1e-7)
    # ... which is one update from the start (momentum 0.99), not 1 + trials updates.
    assert not np.allclose(bn.moving_mean.numpy(), start[2])
    for a, b in zip(inner.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def dropout_model(seed=2):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((D,)), keras.layers.Dense(16, activation="relu"),
        keras.layers.Dropout(0.5), keras.layers.Dense(1)])


def test_dropout_masks_identical_across_trials(tmp_path):
    x, y = X[:128].astype(np.float32), Y[:128, None].astype(np.float32)
    inner = dropout_model()
    model = armijo.LineSearchModel(
        inner, armijo.StochasticArmijo(reset="initial", initial_step_size=100.0))
    model.compile(loss=BCE)
    model.build((None, D))
    start = [v.numpy() for v in inner.trainable_variables]
    state_before = [v.numpy() for v in inner.non_trainable_variables]
    assert state_before  # the dropout's seed generator state
    values = fit_logged(model, x, y, str(tmp_path), batch_size=128, epochs=1)
    assert values[metadata.LINE_SEARCH_BACKTRACKS_TAG][0] >= 1
    step_size = float(model.search.step_size.numpy())

    def loss_at(weights, state):
        y_pred, state_after = inner.stateless_call(
            [tf.constant(w) for w in weights], [tf.constant(s) for s in state], x,
            training=True)
        return float(BCE(y, y_pred)), state_after

    accepted = [v.numpy() for v in inner.trainable_variables]
    f0, state_after = loss_at(start, state_before)
    f1, _ = loss_at(accepted, state_before)
    # Gradient pass and accepted trial: the same mask (the seed state before the step).
    assert values[metadata.LINE_SEARCH_LOSS_TAG][0] == pytest.approx(f0, rel=1e-6)
    assert values[metadata.LINE_SEARCH_NEW_LOSS_TAG][0] == pytest.approx(f1, rel=1e-6)
    assert f1 < f0 and step_size > 1e-6  # accepted: decreased
    # Another mask gives another loss: dropout is active in the passes.
    f1_other, _ = loss_at(accepted, [s.numpy() for s in state_after])
    assert abs(f1_other - f1) > 1e-4
    # The seed state advanced once, as by one training pass.
    for v, s in zip(inner.non_trainable_variables, state_after):
        np.testing.assert_array_equal(v.numpy(), s.numpy())


class PassRecorder:
    """Records one tensor per forward pass in training mode, outside the model's state
    (plain `tf.Variable`s, not Keras variables: a stateless call neither maps nor returns
    them), eagerly and from inside the traced train function's loops."""

    def __init__(self, capacity, shape):
        self.values = tf.Variable(tf.zeros([capacity, *shape]), trainable=False)
        self.count = tf.Variable(0, dtype=tf.int32, trainable=False)

    def record(self, value):
        self.values.scatter_nd_update([[self.count.read_value()]], value[None])
        self.count.assign_add(1)

    def taken(self):
        return self.values.numpy()[: int(self.count.numpy())]


class ProbedDropout(keras.layers.Layer):
    """`inputs * Dropout(ones)`: a Keras Dropout (its seed generator state in the model's
    non-trainable variables), whose scaled mask (0 or 1 / (1 - rate)) each training pass
    records."""

    def __init__(self, rate, seed, recorder, **kwargs):
        super().__init__(**kwargs)
        self.dropout = keras.layers.Dropout(rate, seed=seed)
        self._recorder = recorder

    def call(self, inputs, training=False):
        mask = self.dropout(keras.ops.ones_like(inputs), training=training)
        if training:
            self._recorder.record(mask)
        return inputs * mask


class Probe(keras.layers.Layer):
    """The identity; records its input (the logits) at each training pass."""

    def __init__(self, recorder, **kwargs):
        super().__init__(**kwargs)
        self._recorder = recorder

    def call(self, inputs, training=False):
        if training:
            self._recorder.record(inputs)
        return inputs


PROBE_HIDDEN, PROBE_BATCH, PROBE_L2, PROBE_SEED = 8, 64, 0.01, 1234


def probed_model(capacity):
    """Dense(8, tanh, L2) -> dropout 0.5 (masks recorded) -> Dense(1) (logits recorded)."""
    masks = PassRecorder(capacity, [PROBE_BATCH, PROBE_HIDDEN])
    logits = PassRecorder(capacity, [PROBE_BATCH, 1])
    keras.utils.set_random_seed(5)
    model = keras.Sequential([
        keras.Input((D,)),
        keras.layers.Dense(PROBE_HIDDEN, activation="tanh",
                           kernel_regularizer=keras.regularizers.L2(PROBE_L2)),
        ProbedDropout(0.5, PROBE_SEED, masks),
        keras.layers.Dense(1),
        Probe(logits),
    ])
    return model, masks, logits


def np_probed(weights, mask, x, y):
    """The probed model's training loss (BCE of the logits + L2), its gradient and its
    logits, in numpy float64, for a given dropout mask."""
    w1, b1, w2, b2 = (np.asarray(w, np.float64) for w in weights)
    h = np.tanh(x @ w1 + b1)
    hm = h * mask
    z = hm @ w2 + b2
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z)) + PROBE_L2 * float(np.sum(w1 * w1))
    r = (1.0 / (1.0 + np.exp(-z)) - y) / len(y)
    dpre = (r @ w2.T) * mask * (1.0 - h * h)
    grads = [x.T @ dpre + 2.0 * PROBE_L2 * w1, dpre.sum(axis=0), hm.T @ r, r.sum(axis=0)]
    return loss, grads, z


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["compiled", "eager"])
def test_dropout_mask_of_the_gradient_pass_in_every_trial(tmp_path, run_eagerly):
    """Every pass of a searched step (the gradient pass and each trial) draws the same
    dropout mask; each trial's logits and loss are the numpy ones at w − s·g with that mask
    (L2 included); the next step draws a new mask: the same two masks as two plain SGD
    steps, the seed state advancing once per step."""
    x64, y64 = X[:2 * PROBE_BATCH], Y[:2 * PROBE_BATCH, None]
    x, y = x64.astype(np.float32), y64.astype(np.float32)
    c, beta, s0 = 0.1, 0.9, 50.0
    capacity = 2 * 61
    inner, masks, logits = probed_model(capacity)
    seed_state = inner.layers[1].dropout.seed_generator.state
    assert [v.path for v in inner.non_trainable_variables] == [seed_state.path]
    search = armijo.StochasticArmijo(reset="initial", initial_step_size=s0, c=c, beta=beta,
                                     max_backtracks=60)
    model = armijo.LineSearchModel(inner, search)
    model.compile(loss=BCE, run_eagerly=run_eagerly)

    steps = []  # per step: weights and seed state before, passes recorded before and after

    class Snapshots(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            steps.append(dict(weights=[v.numpy() for v in inner.trainable_variables],
                              seed=seed_state.numpy(), first=int(masks.count.numpy())))

        def on_train_batch_end(self, batch, logs=None):
            steps[-1].update(end=int(masks.count.numpy()),
                             after=[v.numpy() for v in inner.trainable_variables],
                             seed_after=seed_state.numpy())

    values = fit_logged(model, x, y, str(tmp_path), batch_size=PROBE_BATCH, epochs=1,
                        callbacks=[Snapshots()])
    assert len(steps) == 2
    recorded_masks, recorded_logits = masks.taken(), logits.taken()
    assert len(recorded_logits) == len(recorded_masks) == steps[-1]["end"]

    step_masks = []
    for k, step in enumerate(steps):
        rows = slice(k * PROBE_BATCH, (k + 1) * PROBE_BATCH)
        xb, yb = x64[rows], y64[rows]
        passes = range(step["first"], step["end"])
        backtracks = int(values[metadata.LINE_SEARCH_BACKTRACKS_TAG][k])
        assert len(passes) == 1 + backtracks + 1  # the gradient pass, the trials
        assert backtracks >= 3
        # One mask in every pass of the step: the gradient pass's.
        mask = recorded_masks[step["first"]]
        assert set(np.unique(mask)) == {0.0, 2.0}
        for i in passes:
            np.testing.assert_array_equal(recorded_masks[i], mask, err_msg=f"step {k}, pass {i}")
        step_masks.append(mask)
        # The seed state advances once per step.
        np.testing.assert_array_equal(step["seed_after"], step["seed"] + np.array([0, 1]))

        # The gradient pass and each trial, in numpy with that mask.
        w = [np.asarray(v, np.float64) for v in step["weights"]]
        f, g, z = np_probed(w, mask, xb, yb)
        np.testing.assert_allclose(recorded_logits[step["first"]], z, rtol=1e-4, atol=1e-5)
        assert values[metadata.LINE_SEARCH_LOSS_TAG][k] == pytest.approx(f, rel=1e-5)
        g2 = sum(float(np.sum(gi * gi)) for gi in g)
        s = s0
        for trial, i in enumerate(passes[1:]):
            trial_weights = [wi - s * gi for wi, gi in zip(w, g)]
            f_trial, _, z_trial = np_probed(trial_weights, mask, xb, yb)
            np.testing.assert_allclose(recorded_logits[i], z_trial, rtol=1e-4, atol=1e-4,
                                       err_msg=f"step {k}, trial {trial}")
            accepted = f_trial - (f - s * c * g2) <= 0
            assert accepted == (trial == backtracks), f"step {k}, trial {trial}"
            if not accepted:
                s *= beta
        # The accepted trial: its loss logged, its weights kept.
        assert values[metadata.LINE_SEARCH_NEW_LOSS_TAG][k] == pytest.approx(f_trial, rel=1e-5)
        assert values[metadata.LINE_SEARCH_STEP_SIZE_TAG][k] == pytest.approx(s, rel=1e-6)
        for a, e in zip(step["after"], trial_weights):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)

    # The next step draws a new mask ...
    assert not np.array_equal(step_masks[0], step_masks[1])
    np.testing.assert_array_equal(steps[1]["seed"], steps[0]["seed_after"])
    # ... the masks of two plain SGD steps from the same seed state.
    plain, plain_masks, _ = probed_model(4)
    plain.compile(optimizer=keras.optimizers.SGD(0.01), loss=BCE, run_eagerly=run_eagerly,
                  jit_compile=False)
    plain.fit(x, y, batch_size=PROBE_BATCH, epochs=1, verbose=0, shuffle=False)
    assert len(plain_masks.taken()) == 2
    for mine, theirs in zip(step_masks, plain_masks.taken()):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["compiled", "eager"])
def test_trials_update_no_metric(tmp_path, run_eagerly):
    """A multi-output model's per-output loss metrics (updated whenever a loss is computed)
    are the gradient pass's, not averaged over the trials."""
    x, y = X[:128].astype(np.float32), Y[:128, None].astype(np.float32)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((D,))
    hidden = keras.layers.Dense(4, activation="tanh")(inputs)
    inner = keras.Model(inputs, {"a": keras.layers.Dense(1, name="a")(hidden),
                                 "b": keras.layers.Dense(1, name="b")(hidden)})
    outputs = inner(x)
    expected = {"a_loss": float(BCE(y, outputs["a"])), "b_loss": float(BCE(y, outputs["b"]))}
    model = armijo.LineSearchModel(
        inner, armijo.StochasticArmijo(reset="initial", initial_step_size=100.0))
    model.compile(loss={"a": BCE, "b": BCE}, run_eagerly=run_eagerly)
    values = fit_logged(model, x, {"a": y, "b": y}, str(tmp_path), batch_size=128, epochs=1)
    assert values[metadata.LINE_SEARCH_BACKTRACKS_TAG][0] >= 3
    history = model.history.history
    for name, value in expected.items():
        assert history[name][0] == pytest.approx(value, rel=1e-6), name
    assert history["loss"][0] == pytest.approx(sum(expected.values()), rel=1e-6)


def test_line_search_model_arguments():
    with pytest.raises(TypeError, match="search"):
        armijo.LineSearchModel(logistic_model(), "armijo")
    with pytest.raises(TypeError, match="model"):
        armijo.LineSearchModel(lambda x: x, armijo.StochasticArmijo())
    model = armijo.LineSearchModel(logistic_model(), armijo.StochasticArmijo())
    with pytest.raises(ValueError, match="no optimizer"):
        model.compile(optimizer="sgd", loss=BCE)
    with pytest.raises(ValueError, match="no optimizer"):
        model.compile(keras.optimizers.Adam(), loss=BCE)


def test_fit_without_known_steps_needs_n_batches_per_epoch():
    def gen():
        for i in range(0, 256, 64):
            yield X[i:i + 64].astype(np.float32), Y[i:i + 64, None].astype(np.float32)

    ds = tf.data.Dataset.from_generator(gen, output_signature=(
        tf.TensorSpec([None, D], tf.float32), tf.TensorSpec([None, 1], tf.float32)))
    model = armijo.LineSearchModel(logistic_model(), armijo.StochasticArmijo())
    model.compile(loss=BCE)
    with pytest.raises(ValueError, match="n_batches_per_epoch"):
        model.fit(ds, epochs=1, verbose=0)
    ok = armijo.LineSearchModel(logistic_model(), armijo.StochasticArmijo(n_batches_per_epoch=4))
    ok.compile(loss=BCE)
    ok.fit(ds, epochs=1, verbose=0)
    assert int(ok.optimizer.iterations.numpy()) == 4


def test_regularization_losses_are_searched():
    keras.utils.set_random_seed(3)
    inner = keras.Sequential([keras.Input((D,)), keras.layers.Dense(
        1, kernel_regularizer=keras.regularizers.L2(0.1))])
    model = armijo.LineSearchModel(inner, armijo.StochasticArmijo(reset="keep"))
    model.compile(loss=BCE)
    x, y = X.astype(np.float32), Y[:, None].astype(np.float32)
    before = model.evaluate(x, y, verbose=0, batch_size=len(x))
    model.fit(x, y, batch_size=len(x), epochs=3, verbose=0)
    after = model.evaluate(x, y, verbose=0, batch_size=len(x))
    assert after < before
    kernel = inner.layers[0].kernel.numpy()
    total = float(BCE(y, inner(x))) + 0.1 * float(np.sum(kernel ** 2))
    assert after == pytest.approx(total, rel=1e-5)


# --- the benchmark script -----------------------------------------------------------------


def test_benchmark_quick_runs(capsys):
    """The benchmark's two parts at tiny sizes, in this process (`--quick` starts its own)."""
    spec = importlib.util.spec_from_file_location(
        "armijo_benchmark", os.path.join(ROOT, "benchmarks", "armijo.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.step_costs(rounds=1, steps=1, width=8, batch=16)
    bench.convergence(seeds=[0], epochs=1, rates=[0.1], adam_rates=[])
    out = capsys.readouterr().out
    assert "searched step" in out and "mean trials" in out and "recommended variant" in out
    assert "Armijo SGD (defaults)" in out and "SGD lr=0.1" in out
    assert "PoNoS-style (RECOMMENDED): loss" in out and "SGD+momentum lr=0.1" in out


def test_example_runs(tmp_path, monkeypatch, capsys):
    """examples/armijo_fit.py, one epoch, in this process: ratios and line search in one run."""
    logdir = str(tmp_path / "logs")
    monkeypatch.setattr(sys, "argv", ["armijo_fit.py", "--logdir", logdir, "--epochs", "1"])
    runpy.run_path(os.path.join(ROOT, "examples", "armijo_fit.py"), run_name="__main__")
    assert "stored step size" in capsys.readouterr().out
    values, metas = read_line_search(os.path.join(logdir, "train"))
    assert sorted(values[metadata.LINE_SEARCH_STEP_SIZE_TAG]) == list(range(57))
    # the ratios, same run: the packed series of the callback
    assert any(metadata.parse_plugin_content(meta.plugin_data.content)["kind"]
               == metadata.KIND_PACKED_RATIOS for meta in metas.values())

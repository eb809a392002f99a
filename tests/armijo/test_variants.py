"""The options of `StochasticArmijo` beyond the 2019 reference — PoNoS's non-monotone condition
and Polyak first trial (Galli, Rauhut and Schmidt, NeurIPS 2023), SaLSA's momentum direction
and smoothed condition (Kenneweg et al., 2024) — against a numpy implementation of their
equations (docs/armijo.md), step for step; `RECOMMENDED`; each variant's results logged by
`LineSearchModel` into the run the tab reads."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from backend import Backend
from logistic_reference import D, X, Y, logistic_data, np_grad, np_loss
from tb_wur_plugin import armijo
from tb_wur_plugin.keras import WeightUpdateRatioCallback


def reference_variants(batches, steps, *, n_batches_per_epoch=None, initial_step_size=1.0, c=0.1,
                       beta=0.9, gamma=2.0, reset="grow", max_backtracks=100,
                       max_step_size=None, nonmonotone=0.0, polyak_scale=0.1, momentum=0.0,
                       smoothing=0.0):
    """The search with its options, in numpy float64, from the equations of docs/armijo.md:

    - direction: d = g; or m ← μ·m + (1 − μ)·g, d = m / (1 − μ^k), restarted (m = (1 − μ)·g,
      k = 1, d = g) when ⟨g, d⟩ ≤ 0; the slope is ‖g‖² or ⟨g, d⟩;
    - reference loss: f; or Q ← ξ·Q + 1, C ← (ξ·Q_old·C + f) / Q, f_ref = max(C, f);
    - first trial: keep / grow / initial as the reference, or f / (c_p·‖g‖² + 1e-8)·β^l; then
      min(·, η_max); for polyak max(·, 1e-6);
    - condition: f' − (f_ref − s·c·slope) ≤ 0; or, smoothed, β₃·h + (1 − β₃)·(f_ref − f') ≥
      c·s·ŝ with ŝ ← β₃·ŝ + (1 − β₃)·slope (h ← the accepted left side);
    - after a search: l ← max(l + backtracks − 1, 0).

    Returns, per step: (applied step size, backtracks, stored step size, loss, new loss,
    momentum restarted), and the final weights.
    """
    weights = np.zeros(D + 1)  # w, then b
    stored = initial_step_size
    average, weight, memory = 0.0, 0.0, 0.0  # C, Q, l
    slot, since_restart = np.zeros(D + 1), 0.0  # m, k
    decrease_average, slope_average = 0.0, 0.0  # h, ŝ
    out = []
    for k in range(steps):
        x, y = batches[k % len(batches)]
        w, b = weights[:D], weights[D]
        f = np_loss(w, b, x, y)
        gw, gb = np_grad(w, b, x, y)
        g = np.append(gw, gb)
        grad_norm = math.sqrt(float(np.sum(gw * gw)) + gb * gb)
        restarted = False
        if momentum:
            new_slot = momentum * slot + (1.0 - momentum) * g
            new_since = since_restart + 1.0
            d = new_slot / (1.0 - momentum ** new_since)
            slope = float(g @ d)
            if slope <= 0.0:
                restarted = True
                d, new_slot, new_since, slope = g, (1.0 - momentum) * g, 1.0, grad_norm ** 2
        else:
            d, slope = g, grad_norm ** 2
        if nonmonotone:
            new_weight = nonmonotone * weight + 1.0
            average = (nonmonotone * weight * average + f) / new_weight
            weight = new_weight
            reference = max(average, f)
        else:
            reference = f
        if reset == "keep":
            s = stored
        elif reset == "grow":
            s = stored * gamma ** (1.0 / n_batches_per_epoch)
        elif reset == "initial":
            s = initial_step_size
        else:
            s = f / (polyak_scale * slope + 1e-8) * beta ** memory
        if max_step_size is not None:
            s = min(s, max_step_size)
        if reset == "polyak":
            s = max(s, 1e-6)
        if smoothing:
            new_slope_average = smoothing * slope_average + (1.0 - smoothing) * slope
        applied, backtracks, new_f = 0.0, 0, f
        if grad_norm >= 1e-8:
            found = False
            for _ in range(max_backtracks):
                new_f = np_loss(weights[:D] - s * d[:D], weights[D] - s * d[D], x, y)
                if smoothing:
                    decrease = smoothing * decrease_average + (1.0 - smoothing) * (
                        reference - new_f)
                    found = decrease >= s * c * new_slope_average
                else:
                    found = new_f - (reference - s * c * slope) <= 0
                if found:
                    break
                s *= beta
                backtracks += 1
            applied = s if found else 1e-6
            weights = weights - applied * d
            memory = max(memory + backtracks - 1.0, 0.0)
            if momentum:
                slot, since_restart = new_slot, new_since
            if smoothing:
                slope_average = new_slope_average
                if found:
                    decrease_average = decrease
        stored = s
        out.append((applied, backtracks, stored, f, new_f, restarted))
    return out, weights


def full_batch():
    return [(X, Y)]


def mini_batches(size=64):
    return [(X[i:i + size], Y[i:i + size]) for i in range(0, len(X), size)]


def run_search(search, batches, steps, *, graph=True):
    """The same problem with `search.minimize`: per-step results as reference_variants',
    and the final weights."""
    w = tf.Variable(tf.zeros([D], tf.float64), name="w")
    b = tf.Variable(tf.zeros([], tf.float64), name="b")
    tensors = [(tf.constant(x), tf.constant(y)) for x, y in batches]

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
    return out, np.append(w.numpy(), b.numpy())


def assert_same_sequence(actual, expected):
    """The same backtracks at every step, the same step sizes and losses up to float64
    rounding: TensorFlow and numpy sum in different orders, and a Polyak step size, the
    ratio of the batch loss to the squared gradient norm, grows their relative differences
    (1e-15 in the losses, up to 1e-10 in the step sizes after some steps) as both shrink."""
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a[1] == e[1], f"step {k}: backtracks {a[1]} != {e[1]}"
        for i, name in ((0, "applied step size"), (2, "stored step size")):
            assert a[i] == pytest.approx(e[i], rel=1e-8, abs=0), f"step {k}: {name}"
        assert a[3] == pytest.approx(e[3], rel=1e-9), f"step {k}: loss"
        assert a[4] == pytest.approx(e[4], rel=1e-9), f"step {k}: new loss"


# Each case backtracks (checked below), but the recommended variant, whose first trials
# (PoNoS's reset) are all accepted on this problem.
CASES = {
    # PoNoS as published (its code's defaults): xi = 1, c = 0.5, delta = 0.5, c_p = 0.1.
    "ponos": dict(reset="polyak", nonmonotone=1.0, c=0.5, beta=0.5, polyak_scale=0.1,
                  max_step_size=10.0),
    "recommended": dict(armijo.RECOMMENDED),
    # A weaker average, an uncapped Polyak step that the floor and memory shape.
    "polyak_xi_half_uncapped": dict(reset="polyak", nonmonotone=0.5, c=0.3, beta=0.7,
                                    polyak_scale=0.05),
    "nonmonotone_grow": dict(nonmonotone=0.9, reset="grow", n_batches_per_epoch=3,
                             initial_step_size=40.0, c=0.3),
    # From a large step each time: the momentum restarts on two of the mini-batches.
    "momentum_initial": dict(momentum=0.9, reset="initial", initial_step_size=30.0, c=0.3),
    # SaLSA's constants: c = 0.5, decrease 0.8, mu = beta_3 = 0.9, growth 1.1 a step.
    "salsa": dict(momentum=0.9, smoothing=0.9, c=0.5, beta=0.8, reset="grow",
                  n_batches_per_epoch=5, gamma=1.1 ** 5, initial_step_size=20.0),
    "smoothing_nonmonotone": dict(smoothing=0.5, nonmonotone=1.0, reset="initial",
                                  initial_step_size=10.0, c=0.5),
    # No trial accepted on some steps: the fallback, the memory grown by max_backtracks - 1.
    "polyak_fallback": dict(reset="polyak", polyak_scale=1e-6, beta=0.5, max_backtracks=3,
                            c=0.5),
}


@pytest.mark.parametrize("case,batching", [(case, "mini") for case in sorted(CASES)] + [
    ("ponos", "full"), ("salsa", "full")])
def test_variant_matches_reference(case, batching):
    kwargs = CASES[case]
    batches = full_batch() if batching == "full" else mini_batches()
    steps = 16 if batching == "full" else 2 * len(batches)
    expected, expected_weights = reference_variants(batches, steps, **kwargs)
    actual, weights = run_search(armijo.StochasticArmijo(**kwargs), batches, steps)
    assert_same_sequence(actual, [e[:5] for e in expected])
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-7, atol=1e-12)
    backtracks = [e[1] for e in expected]
    if case == "recommended":
        assert not any(backtracks)
    else:
        assert any(backtracks), backtracks
    if case == "polyak_fallback":
        assert any(e[0] == 1e-6 for e in expected) and any(e[0] != 1e-6 for e in expected)
    if case == "momentum_initial" and batching == "mini":
        assert any(e[5] for e in expected)  # the momentum restarted on some step


def test_nonmonotone_accepts_what_the_monotone_search_rejects():
    """With xi = 1 the first step's reference is f; later ones compare with the mean of the
    losses so far: fewer backtracks than the monotone search from the same start."""
    kwargs = dict(reset="initial", initial_step_size=60.0, c=0.5)
    batches = mini_batches()
    monotone, _ = reference_variants(batches, 18, **kwargs)
    relaxed, _ = reference_variants(batches, 18, nonmonotone=1.0, **kwargs)
    assert monotone[0][:5] == relaxed[0][:5]
    assert sum(r[1] for r in relaxed) < sum(m[1] for m in monotone)
    assert any(r[4] > r[3] for r in relaxed)  # an accepted step that raised the batch loss


def test_every_option_at_once_eagerly():
    kwargs = dict(momentum=0.9, smoothing=0.9, nonmonotone=0.8, reset="keep",
                  initial_step_size=30.0, c=0.3)
    batches = mini_batches()
    expected, _ = reference_variants(batches, 10, **kwargs)
    eager, _ = run_search(armijo.StochasticArmijo(**kwargs), batches, 10, graph=False)
    assert_same_sequence(eager, [e[:5] for e in expected])


def test_float32_variables_with_the_recommended_variant():
    """The condition in float64 from float32 losses; the state in float64."""
    x32, y32 = logistic_data(np.float32)
    w = tf.Variable(tf.zeros([D], tf.float32))
    b = tf.Variable(tf.zeros([], tf.float32))
    search = armijo.StochasticArmijo(**armijo.RECOMMENDED)

    @tf.function
    def step(x, y):
        def loss_fn():
            z = tf.linalg.matvec(x, w) + b
            return tf.reduce_mean(tf.nn.softplus(z) - y * z)
        return search.minimize(loss_fn, [w, b])

    first = None
    for i in range(0, len(x32), 64):
        r = step(tf.constant(x32[i:i + 64]), tf.constant(y32[i:i + 64]))
        first = float(r.loss) if first is None else first
        assert r.step_size.dtype == tf.float64 and w.dtype == tf.float32
        assert float(r.step_size) > 0
    assert float(r.loss) < first


@pytest.mark.parametrize("kwargs,error,name", [
    (dict(nonmonotone=-0.1), ValueError, "nonmonotone"),
    (dict(nonmonotone=1.5), ValueError, "nonmonotone"),
    (dict(nonmonotone="1"), TypeError, "nonmonotone"),
    (dict(polyak_scale=0.0), ValueError, "polyak_scale"),
    (dict(polyak_scale=None), TypeError, "polyak_scale"),
    (dict(momentum=1.0), ValueError, "momentum"),
    (dict(momentum=-0.5), ValueError, "momentum"),
    (dict(smoothing=1.0), ValueError, "smoothing"),
    (dict(smoothing=True), TypeError, "smoothing"),
    (dict(reset="polyak", momentum=0.9), ValueError, "polyak.*momentum"),
])
def test_bad_option_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        armijo.StochasticArmijo(**kwargs)


def test_momentum_belongs_to_its_variables():
    a, b = tf.Variable([1.0, 2.0]), tf.Variable(3.0)
    search = armijo.StochasticArmijo(momentum=0.5, reset="keep")
    search.minimize(lambda: tf.reduce_sum(a * a), [a])
    with pytest.raises(ValueError, match="other variables"):
        search.minimize(lambda: b * b, [b])
    with pytest.raises(ValueError, match="build"):
        armijo.StochasticArmijo(momentum=0.5, reset="keep").search_step(
            lambda: (a, [a]), lambda weights: a[0], [a])


def test_recommended_builds_the_readme_variant():
    search = armijo.StochasticArmijo(**armijo.RECOMMENDED, n_batches_per_epoch=7)
    assert search.reset == "polyak" and search.nonmonotone == 1.0
    assert search.n_batches_per_epoch == 7
    assert "reset='polyak'" in repr(search)


# --- the variants in fit, logged into the tab's run ---------------------------------------

BCE = keras.losses.BinaryCrossentropy(from_logits=True)
FIT_VARIANTS = {"ponos": CASES["ponos"], "salsa": CASES["salsa"]}


def small_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((D,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


@pytest.mark.parametrize("variant", sorted(FIT_VARIANTS))
def test_fit_logs_each_variant_to_the_tab(tmp_path, variant):
    """`LineSearchModel` with the variant makes the custom loop's steps; the callback writes
    every step's step size and backtracks, which `/line_search` serves."""
    kwargs = FIT_VARIANTS[variant]
    x, y = X.astype(np.float32), Y[:, None].astype(np.float32)
    trained, loop_model = small_model(), small_model()
    model = armijo.LineSearchModel(trained, armijo.StochasticArmijo(**kwargs))
    model.compile(loss=BCE)
    logdir = str(tmp_path / "logs")
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, shuffle=False,
              callbacks=[WeightUpdateRatioCallback(logdir, update_freq=5)])

    search = armijo.StochasticArmijo(**kwargs)

    @tf.function
    def step(xb, yb):
        return search.minimize(lambda: BCE(yb, loop_model(xb, training=True)),
                               loop_model.trainable_variables)

    loop = [step(tf.constant(x[i:i + 64]), tf.constant(y[i:i + 64]))
            for _ in range(2) for i in range(0, len(x), 64)]
    served = Backend(logdir).json("line_search", run="train")
    assert served["steps"] == list(range(len(loop)))
    assert served["backtracks"] == [int(r.backtracks) for r in loop]
    assert sum(served["backtracks"]) > 0
    np.testing.assert_allclose(served["step_size"], [float(r.step_size) for r in loop],
                               rtol=1e-5)
    for a, b in zip(trained.get_weights(), loop_model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

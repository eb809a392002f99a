"""Event files for the browser tests, written with the project's own API (wur_summary, and
tb_wur_plugin.armijo for the run trained with the line search).

`python tests/browser/wur_data.py LOGDIR` writes them for a manual look.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import tensorflow as tf

from tb_wur_plugin import armijo, metadata, wur_summary

XSS_TAG = "<img src=x onerror=alert(1)>"
STEPS = list(range(0, 150, 5))  # 30 logged steps
RUN_A = "alpha/train"
RUN_B = "beta/<i onmouseover=alert(2)>train"  # a run name that is HTML, too
TAGS_A = ["model/dense/kernel", "model/dense/bias", "model/head/kernel", XSS_TAG, "model/odd/kernel"]
TAGS_B = ["model/dense/kernel", "model/dense/bias", "model/head/kernel"]
# A run trained by the stochastic Armijo line search (StochasticArmijo.minimize in a custom
# loop, one searched step per logged step, at STEPS), its ratios from wur_summary.watch: the
# only run with line-search data (the tab's strip and the detail's step size).
RUN_C = "gamma/armijo"
TAGS_C = ["armijo_net/hidden/kernel", "armijo_net/hidden/bias", "armijo_net/out/kernel",
          "armijo_net/out/bias"]
HISTOGRAM_ELEMENTS = 500  # elementwise ratios per histogram of model/dense/kernel in RUN_A
# A step of RUN_A the optimizer skipped (as a LossScaleOptimizer on non-finite gradients):
# every ratio 0 and the skipped-step marker 1, as `watch` and the Keras callback write it.
SKIPPED_STEP = 40


def ratio_a(tag: str, step: int) -> float:
    i = STEPS.index(step)
    if step == SKIPPED_STEP:
        return 0.0
    if tag == "model/dense/kernel":
        return 1e-3 * (1.0 + 0.5 * math.sin(i / 3.0))
    if tag == "model/dense/bias":
        return 2e-2 * (1.0 + i / 30.0)  # above the band
    if tag == "model/head/kernel":
        return 3e-5 * (1.0 + i / 10.0)  # below the band
    if tag == XSS_TAG:
        return 4.567e-4
    # model/odd/kernel: the special values
    return {0: math.inf, 5: 0.0, 10: math.nan}.get(step, 1.2345e-3)


def ratio_b(tag: str, step: int) -> float:
    i = STEPS.index(step)
    return {"model/dense/kernel": 5e-2, "model/dense/bias": 7.5e-4, "model/head/kernel": 2e-6}[tag] * (1 + i / 60.0)


def write(logdir: str) -> None:
    writer = tf.summary.create_file_writer(f"{logdir}/{RUN_A}")
    rng = np.random.default_rng(0)
    with writer.as_default():
        for step in STEPS:
            for tag in TAGS_A:
                wur_summary.scalar(tag, ratio_a(tag, step), step=step)
            elementwise = 10.0 ** rng.normal(-3.0 + step / 150.0, 0.5, size=HISTOGRAM_ELEMENTS)
            wur_summary.histogram("model/dense/kernel", elementwise, step=step)
            wur_summary.learning_rate(0.1 * 0.98 ** (step / 5), step=step)
            tf.summary.write(
                metadata.SKIPPED_STEP_TAG,
                tf.constant(float(step == SKIPPED_STEP), tf.float32),
                step=step,
                metadata=metadata.create_summary_metadata(metadata.KIND_SKIPPED_STEP),
            )
    writer.close()
    writer = tf.summary.create_file_writer(f"{logdir}/{RUN_B}")
    with writer.as_default():
        for step in STEPS:
            for tag in TAGS_B:
                wur_summary.scalar(tag, ratio_b(tag, step), step=step)
    writer.close()
    write_armijo(logdir)


def write_armijo(logdir: str) -> None:
    import keras

    keras.utils.set_random_seed(2)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="tanh", name="hidden"),
         keras.layers.Dense(1, name="out")],
        name="armijo_net",
    )
    rng = np.random.default_rng(3)
    x = rng.normal(size=(len(STEPS), 16, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], "float32"))[..., None]
    # a large first step size and growth: backtracks at the start and now and then after
    search = armijo.StochasticArmijo(n_batches_per_epoch=3, initial_step_size=20.0, gamma=4.0)
    variables = model.trainable_variables
    assert [v.path for v in variables] == TAGS_C
    writer = tf.summary.create_file_writer(f"{logdir}/{RUN_C}")
    with writer.as_default():
        for i, step in enumerate(STEPS):
            xb, yb = tf.constant(x[i]), tf.constant(y[i])

            def loss_fn():
                return tf.reduce_mean(tf.square(model(xb, training=True) - yb))

            with wur_summary.watch(variables, step=step):
                search.minimize(loss_fn, variables, step=step)
    writer.close()


# Two runs logged at different intervals (the step axis: one column per step, the sparse
# run's ratios held between its logged steps), one with a frozen layer (flagged).
RUN_EVERY2 = "every2/train"
RUN_EVERY5 = "every5/train"
INTERVAL_TAGS = ["net/dense/kernel", "net/dense/bias", "net/out/kernel"]
INTERVAL_LAST_STEP = 40


def interval_ratio(run: str, tag: str, step: int) -> float:
    if run == RUN_EVERY5 and tag == "net/out/kernel":
        return 0.0  # frozen: it never moves
    scale = {"net/dense/kernel": 1e-3, "net/dense/bias": 2e-3, "net/out/kernel": 5e-4}[tag]
    return scale * (1.0 + step / 40.0) * (1.5 if run == RUN_EVERY5 else 1.0)


def write_intervals(logdir: str) -> dict[str, list[int]]:
    """RUN_EVERY2 logs steps 0, 2, ..., 40, RUN_EVERY5 steps 0, 5, ..., 40 (TensorFlow-free
    writer). Returns {run: steps}."""
    from tb_wur_plugin.writer import SummaryWriter

    out = {}
    for run, every in ((RUN_EVERY2, 2), (RUN_EVERY5, 5)):
        writer = SummaryWriter(f"{logdir}/{run}")
        steps = list(range(0, INTERVAL_LAST_STEP + 1, every))
        for step in steps:
            writer.add_ratios({tag: interval_ratio(run, tag, step) for tag in INTERVAL_TAGS}, step)
        writer.close()
        out[run] = steps
    return out


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "intervals":
        write_intervals(sys.argv[1])
    else:
        write(sys.argv[1])

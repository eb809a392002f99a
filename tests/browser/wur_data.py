"""Event files for the browser tests, written with the project's own API (wur_summary).

`python tests/browser/wur_data.py LOGDIR` writes them for a manual look.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata, wur_summary

XSS_TAG = "<img src=x onerror=alert(1)>"
STEPS = list(range(0, 150, 5))  # 30 logged steps
RUN_A = "alpha/train"
RUN_B = "beta/<i onmouseover=alert(2)>train"  # a run name that is HTML, too
TAGS_A = ["model/dense/kernel", "model/dense/bias", "model/head/kernel", XSS_TAG, "model/odd/kernel"]
TAGS_B = ["model/dense/kernel", "model/dense/bias", "model/head/kernel"]
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


if __name__ == "__main__":
    write(sys.argv[1])

"""Keras `fit` epoch with `WeightUpdateRatioCallback` on the backend KERAS_BACKEND names
(tensorflow or jax), the model compiled with `steps_per_execution`: what the callback costs.

Each variant fits its own copy of the same model (an MLP 784-512-512-10, Adam, batch 128,
200 steps an epoch, numpy inputs), traced (jitted) over one epoch first; each round times
one epoch of every variant, in a random order, and the report is the median [min–max] over
rounds of the per-round RATIO to the plain `fit`. "fit (again)", a second plain model, is
the noise floor.

    KERAS_BACKEND=jax python benchmarks/keras_fit.py --steps-per-execution 10
    KERAS_BACKEND=jax python benchmarks/keras_fit.py --smoke      # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tb_wur_plugin.keras import WeightUpdateRatioCallback  # noqa: E402
from fit_rounds import interleaved_fit_epochs  # noqa: E402


def model(width: int, steps_per_execution: int) -> keras.Model:
    initializer = keras.initializers.GlorotUniform
    net = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(width, activation="relu", kernel_initializer=initializer(1)),
        keras.layers.Dense(width, activation="relu", kernel_initializer=initializer(2)),
        keras.layers.Dense(10, kernel_initializer=initializer(3)),
    ])
    net.compile(optimizer="adam", loss="mse", steps_per_execution=steps_per_execution)
    return net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps-per-execution", type=int, default=10)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    width, steps, rounds = (64, 20, 2) if args.smoke else (512, 200, args.rounds)
    sys.stdout.reconfigure(line_buffering=True)
    random.seed(0)
    logdir = tempfile.mkdtemp(prefix="wur-bench-")
    x = np.random.default_rng(0).normal(size=(128 * steps, 784)).astype("float32")
    y = np.random.default_rng(1).normal(size=(len(x), 10)).astype("float32")
    callbacks = {
        "fit": [],
        "fit (again)": [],
        "fit + callback(update_freq=100)": [
            WeightUpdateRatioCallback(os.path.join(logdir, "100"), update_freq=100)],
        "fit + callback(update_freq=10)": [
            WeightUpdateRatioCallback(os.path.join(logdir, "10"), update_freq=10)],
    }
    models = {name: model(width, args.steps_per_execution) for name in callbacks}
    for name, extra in callbacks.items():
        models[name].fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=extra)
    ratios = interleaved_fit_epochs(models, callbacks, x, y, rounds)
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}, "
          f"steps_per_execution={args.steps_per_execution}: fit epoch ({steps} steps) / plain "
          f"fit, median [min–max] over {rounds} rounds")
    for name, values in ratios.items():
        print(f"  {name:<34} {statistics.median(values):.3f} "
              f"[{min(values):.3f}–{max(values):.3f}]")


if __name__ == "__main__":
    main()

"""Benchmark of the stochastic Armijo line search (`tb_wur_plugin.armijo`).

Part 1, cost per step (CPU, float32, tf.function, one fixed batch): a plain SGD step (the
reference, "bare"), the gradient pass alone (loss and gradients), the forward pass alone
(loss), and a searched step (`StochasticArmijo.minimize`, defaults), interleaved in one
process: each round times every function in a random order, and the table gives the median
[min–max] over rounds of each one's ratio to the bare step of that round. It then compares
the searched step with gradient + (mean trials) x (forward + assign), where trials =
1 + backtracks per step, counted over the timed steps.

Part 2, convergence on scikit-learn's digits (MLP 64-64-10, batch 32, `model.fit`, 3
seeds): `LineSearchModel` with the default search against SGD at fixed learning rates and
Adam (default learning rate), the same epochs, each from the same initial weights per seed;
final training loss (the full training set, inference mode) and test accuracy.

    python benchmarks/armijo.py            # both parts (a few minutes)
    python benchmarks/armijo.py --quick    # tiny sizes, seconds (the test suite runs it)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from tb_wur_plugin import armijo  # noqa: E402

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def digits():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, y.astype("int32"), test_size=0.2, random_state=0, stratify=y)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
    return (x_train - mean) / std, y_train, (x_test - mean) / std, y_test


def mlp(seed: int, width: int = 64) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(width, activation="relu"),
                             keras.layers.Dense(10)])


# --- part 1 -------------------------------------------------------------------------------


def time_per_step(run: Callable[[int], None], steps: int) -> float:
    start = time.perf_counter()
    run(steps)
    return (time.perf_counter() - start) / steps


def step_costs(rounds: int, steps: int, width: int, batch: int) -> None:
    x_train, y_train, _, _ = digits()
    n_batches = len(x_train) // batch
    xs = tf.constant(x_train[:n_batches * batch].reshape(n_batches, batch, 64))
    ys = tf.constant(y_train[:n_batches * batch].reshape(n_batches, batch))
    sgd_model, search_model = mlp(0, width), mlp(0, width)
    start_weights = search_model.get_weights()
    optimizer = keras.optimizers.SGD(learning_rate=0.01)
    optimizer.build(sgd_model.trainable_variables)
    search = armijo.StochasticArmijo(n_batches_per_epoch=n_batches)
    trial_count = tf.Variable(0, dtype=tf.int64)  # trials (1 + backtracks) of timed steps

    def batch_of(counter):
        """The next batch of the epoch, for every function the same sequence per round."""
        i = counter % n_batches
        counter.assign_add(1)
        return tf.gather(xs, i), tf.gather(ys, i)

    counters = {}

    def counted(fn):
        counter = tf.Variable(0, dtype=tf.int32)
        wrapped = tf.function(lambda: fn(*batch_of(counter)))
        counters[wrapped] = counter
        return wrapped

    def bare(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, sgd_model(x, training=True))
        grads = tape.gradient(loss, sgd_model.trainable_variables)
        optimizer.apply_gradients(zip(grads, sgd_model.trainable_variables))

    def gradient(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, search_model(x, training=True))
        return loss, tape.gradient(loss, search_model.trainable_variables)

    def forward(x, y):
        return LOSS(y, search_model(x, training=True))

    def searched(x, y):
        result = search.minimize(lambda: LOSS(y, search_model(x, training=True)),
                                 search_model.trainable_variables)
        trial_count.assign_add(tf.cast(result.backtracks, tf.int64) + 1)

    def loop(fn):
        def run(n):
            for _ in range(n):
                fn()
        return run

    fns = {"bare SGD step": counted(bare), "gradient pass": counted(gradient),
           "forward pass": counted(forward), "searched step": counted(searched)}
    functions = {name: loop(fn) for name, fn in fns.items()}

    def restart():
        """Each round trains from the same weights and step size over the same batches."""
        sgd_model.set_weights(start_weights)
        search_model.set_weights(start_weights)
        search.step_size.assign(search.initial_step_size)
        for counter in counters.values():
            counter.assign(0)

    for run in functions.values():  # trace and warm up
        run(2)
    trial_count.assign(0)
    times = {name: [] for name in functions}
    for _ in range(rounds):
        restart()
        names = list(functions)
        random.shuffle(names)
        for name in names:
            times[name].append(time_per_step(functions[name], steps))
    bare_times = times["bare SGD step"]
    print(f"MLP 64-{width}-10, batch {batch}, float32, the first {steps} steps of training "
          f"on digits' batches from the same weights each round; time per step / bare SGD "
          f"step, median [min-max] over {rounds} rounds")
    ratio = {}
    for name in functions:
        r = [t / b for t, b in zip(times[name], bare_times)]
        ratio[name] = statistics.median(r)
        print(f"  {name:<22} {ratio[name]:6.3f} [{min(r):.3f}-{max(r):.3f}]"
              f"   {statistics.median(times[name]) * 1e3:7.3f} ms")
    mean_trials = int(trial_count.numpy()) / (rounds * steps)
    predicted = ratio["gradient pass"] + mean_trials * ratio["forward pass"]
    print(f"  mean trials per searched step (1 + backtracks, over the {rounds * steps} timed "
          f"steps): {mean_trials:.2f}; stored step size at the end "
          f"{float(search.step_size.numpy()):.4g}")
    print(f"  gradient + trials x forward = {ratio['gradient pass']:.3f} + {mean_trials:.2f} x "
          f"{ratio['forward pass']:.3f} = {predicted:.3f}; measured {ratio['searched step']:.3f}")


# --- part 2 -------------------------------------------------------------------------------


def convergence(seeds: list[int], epochs: int, rates: list[float], with_adam: bool = True) -> None:
    x_train, y_train, x_test, y_test = digits()
    methods: dict[str, Callable[[keras.Model], keras.Model]] = {}

    def searched(model):
        trainer = armijo.LineSearchModel(model, armijo.StochasticArmijo())
        trainer.compile(loss=LOSS)
        return trainer

    methods["Armijo SGD (defaults)"] = searched
    for rate in rates:
        def plain(model, rate=rate):
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=rate), loss=LOSS)
            return model
        methods[f"SGD lr={rate:g}"] = plain

    def adam(model):
        model.compile(optimizer=keras.optimizers.Adam(), loss=LOSS)
        return model

    if with_adam:
        methods["Adam (lr=0.001)"] = adam
    results = {name: [] for name in methods}
    seconds = {name: 0.0 for name in methods}
    for seed in seeds:
        start_weights = mlp(seed).get_weights()
        for name, make in methods.items():
            model = mlp(seed)
            model.set_weights(start_weights)
            trainer = make(model)
            keras.utils.set_random_seed(seed)  # the same shuffling for every method
            start = time.perf_counter()
            trainer.fit(x_train, y_train, batch_size=32, epochs=epochs, verbose=0)
            seconds[name] += time.perf_counter() - start
            logits = model(x_train, training=False)
            train_loss = float(LOSS(y_train, logits))
            accuracy = float(np.mean(np.argmax(model(x_test, training=False), 1) == y_test))
            results[name].append((train_loss, accuracy))
    print(f"digits: MLP 64-64-10, batch 32, {epochs} epochs, seeds {seeds}; "
          "final training loss and test accuracy, mean [min-max] over seeds")
    for name, values in results.items():
        losses = [v[0] for v in values]
        accuracies = [v[1] for v in values]
        print(f"  {name:<22} loss {np.mean(losses):.4f} [{min(losses):.4f}-{max(losses):.4f}]"
              f"   test acc {np.mean(accuracies):.4f} [{min(accuracies):.4f}-"
              f"{max(accuracies):.4f}]   fit {seconds[name] / len(seeds):5.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--parts", default="steps,convergence",
                        help="comma-separated: steps, convergence")
    args = parser.parse_args()
    print(f"tf {tf.__version__}, keras {keras.__version__}")
    parts = args.parts.split(",")
    if "steps" in parts:
        if args.quick:
            step_costs(rounds=args.rounds or 2, steps=2, width=32, batch=64)
        else:
            step_costs(rounds=args.rounds or 40, steps=30, width=256, batch=128)
    if "convergence" in parts:
        if args.quick:
            convergence(seeds=[0], epochs=args.epochs or 1, rates=[0.1], with_adam=False)
        else:
            convergence(seeds=[0, 1, 2], epochs=args.epochs or 10,
                        rates=[0.01, 0.03, 0.1, 0.3, 1.0])


if __name__ == "__main__":
    main()

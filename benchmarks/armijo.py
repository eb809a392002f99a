"""Benchmark of the stochastic Armijo line search (`tb_wur_plugin.armijo`).

Part 1, cost per step (CPU, float32, tf.function, one fixed batch): a plain SGD step (the
reference, "bare"), the gradient pass alone (loss and gradients), the forward pass alone
(loss), and a searched step (`StochasticArmijo.minimize`, defaults), interleaved in one
process: each round times every function in a random order, and the table gives the median
[min–max] over rounds of each one's ratio to the bare step of that round. It then compares
the searched step with gradient + (mean trials) x (forward + assign), where trials =
1 + backtracks per step, counted over the timed steps.

Part 2, convergence on scikit-learn's digits (batch 32, 10 epochs, `model.fit`, seeds 0-9),
for two models: an MLP 64-64-10 and a small convnet on the 8x8 images. `LineSearchModel`
with the default search (`StochasticArmijo()`: the reference's defaults, n_batches_per_epoch
= fit's 45 steps per epoch) against SGD at each fixed learning rate of a grid and Adam at its
default learning rate. Per seed every method starts from the same weights and sees the same
batches in the same order (explicit per-seed permutations, no shuffling by fit). Reported:
the final training loss (the whole training set, inference mode, the same loss function for
all) as mean, median and range over seeds, diverged runs counted apart; test accuracy; how
many seeds the search wins against the grid's best rate and against the best rate of the
same seed; and whether the issue's criterion (the search at least as low as the grid's best
and as Adam) holds by the mean and by the median.

    python benchmarks/armijo.py            # both parts, both models (about 10 minutes)
    python benchmarks/armijo.py --parts convergence --problems convnet --rates 0.2,0.3,0.5
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


def convnet(seed: int) -> keras.Model:
    """A small convnet on the 8x8 images: conv 16 3x3, max-pool 2, conv 32 3x3, dense 10."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((64,)), keras.layers.Reshape((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Flatten(), keras.layers.Dense(10)])


PROBLEMS = {"mlp": ("MLP 64-64-10", mlp),
            "convnet": ("convnet conv16-pool-conv32-dense10", convnet)}


def batches_in_order(x, y, seed: int, epochs: int, batch: int):
    """The epochs' batches in one fixed order per seed, the same for every method: epoch e is
    a permutation of the training set drawn from numpy's RNG seeded with (seed, e), cut into
    batches of `batch` (the last one smaller). Fit it with steps_per_epoch = the batches per
    epoch (Keras then keeps one iterator across the epochs)."""
    parts = []
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(x))
        parts.append(tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(batch))
    dataset = parts[0]
    for part in parts[1:]:
        dataset = dataset.concatenate(part)
    return dataset, -(-len(x) // batch)


def _fmt(value: float, digits: str = ".4f") -> str:
    return f"{value:{digits}}" if np.isfinite(value) else "-"


def convergence(seeds: list[int], epochs: int, rates: list[float], with_adam: bool = True,
                problem: str = "mlp", batch: int = 32) -> None:
    """Final training loss (full training set, inference mode, the same loss for every method)
    and test accuracy after `epochs` epochs; every method of a seed starts from the same
    weights and sees the same batches in the same order."""
    x_train, y_train, x_test, y_test = digits()
    title, build = PROBLEMS[problem]
    methods: dict[str, Callable[[keras.Model], keras.Model]] = {}
    searches: dict[int, armijo.StochasticArmijo] = {}

    def searched(model):
        search = armijo.StochasticArmijo()  # the defaults; n_batches_per_epoch from fit
        searches[len(searches)] = search
        trainer = armijo.LineSearchModel(model, search)
        trainer.compile(loss=LOSS)
        return trainer

    armijo_name = "Armijo SGD (defaults)"
    methods[armijo_name] = searched
    sgd_names = []
    for rate in rates:
        def plain(model, rate=rate):
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=rate), loss=LOSS)
            return model
        sgd_names.append(f"SGD lr={rate:g}")
        methods[sgd_names[-1]] = plain

    def adam(model):
        model.compile(optimizer=keras.optimizers.Adam(), loss=LOSS)
        return model

    adam_name = "Adam (lr=0.001)"
    if with_adam:
        methods[adam_name] = adam
    losses = {name: [] for name in methods}
    accuracies = {name: [] for name in methods}
    diverged = {name: 0 for name in methods}
    seconds = {name: 0.0 for name in methods}
    steps_per_epoch = None
    for seed in seeds:
        start_weights = build(seed).get_weights()
        initial_loss = None
        for name, make in methods.items():
            model = build(seed)
            model.set_weights(start_weights)
            if initial_loss is None:
                initial_loss = float(LOSS(y_train, model(x_train, training=False)))
            trainer = make(model)
            dataset, steps_per_epoch = batches_in_order(x_train, y_train, seed, epochs, batch)
            keras.utils.set_random_seed(seed)
            start = time.perf_counter()
            trainer.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, shuffle=False,
                        verbose=0)
            seconds[name] += time.perf_counter() - start
            loss = float(LOSS(y_train, model(x_train, training=False)))
            if not np.isfinite(loss) or loss > initial_loss:
                diverged[name] += 1
                loss = float("nan")
            losses[name].append(loss)
            accuracies[name].append(
                float(np.mean(np.argmax(model(x_test, training=False), 1) == y_test)))
    n = len(seeds)
    step_sizes = [float(s.step_size.numpy()) for s in searches.values()]
    print(f"digits: {title}, batch {batch} ({steps_per_epoch} steps per epoch), {epochs} "
          f"epochs, seeds {seeds}; each seed: the same initial weights and batch order for every "
          "method. Final training loss (full training set, inference mode): mean, median "
          "[min-max] over seeds; diverged (final loss nan or above the initial loss) counted "
          "apart, a method with any diverged seed gets no mean; test accuracy mean [min-max]")
    for name in methods:
        ls, acc = np.array(losses[name]), accuracies[name]
        finite = ls[np.isfinite(ls)]
        if len(finite):
            spread = (f"{_fmt(np.mean(ls))} {np.median(finite):.4f} "
                      f"[{finite.min():.4f}-{finite.max():.4f}]")
        else:
            spread = "-"
        note = f"  diverged {diverged[name]}/{n}" if diverged[name] else ""
        print(f"  {name:<22} loss {spread:<32} test acc {np.mean(acc):.4f} "
              f"[{min(acc):.4f}-{max(acc):.4f}]   fit {seconds[name] / n:5.1f} s{note}")
    print(f"  Armijo stored step size at the end: median {np.median(step_sizes):.3g} "
          f"[{min(step_sizes):.3g}-{max(step_sizes):.3g}]")
    armijo_losses = np.array(losses[armijo_name])
    grid = np.array([losses[name] for name in sgd_names])  # rates x seeds, nan = diverged
    grid_inf = np.where(np.isfinite(grid), grid, np.inf)
    means = np.array([np.mean(row) for row in grid_inf])  # inf when any seed diverged
    medians = np.array([np.median(row) for row in grid_inf])
    best_mean, best_median = int(np.argmin(means)), int(np.argmin(medians))
    print("  per seed, final training loss: " + ", ".join(
        f"{seed}: Armijo {_fmt(a, '.3g')}, best fixed "
        f"{sgd_names[int(np.argmin(grid_inf[:, i]))][4:]} {_fmt(grid_inf[:, i].min(), '.3g')}"
        + (f", Adam {_fmt(losses[adam_name][i], '.3g')}" if with_adam else "")
        for i, (seed, a) in enumerate(zip(seeds, armijo_losses))))
    armijo_inf = np.where(np.isfinite(armijo_losses), armijo_losses, np.inf)
    wins_best = int(np.sum(armijo_inf <= grid_inf[best_mean]))
    wins_oracle = int(np.sum(armijo_inf <= grid_inf.min(axis=0)))
    print(f"  Armijo <= {sgd_names[best_mean]} (the grid's best by mean) on {wins_best}/{n} "
          f"seeds; <= the best fixed rate of the same seed on {wins_oracle}/{n} seeds")
    checks = [("mean", np.mean(armijo_inf), means[best_mean], sgd_names[best_mean]),
              ("median", np.median(armijo_inf), medians[best_median], sgd_names[best_median])]
    if with_adam:
        adam_inf = np.where(np.isfinite(losses[adam_name]), losses[adam_name], np.inf)
        wins_adam = int(np.sum(armijo_inf <= adam_inf))
        print(f"  Armijo <= Adam on {wins_adam}/{n} seeds")
    for statistic, ours, theirs, best_name in checks:
        verdict = "met" if ours <= theirs else "NOT met"
        line = (f"  criterion by the {statistic}: Armijo {_fmt(ours, '.3g')} vs the grid's "
                f"best {best_name} {_fmt(theirs, '.3g')}")
        if with_adam:
            adam_stat = (np.mean if statistic == "mean" else np.median)(adam_inf)
            line += f", Adam {_fmt(adam_stat, '.3g')}"
            verdict = "met" if ours <= theirs and ours <= adam_stat else "NOT met"
        print(f"{line}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--parts", default="steps,convergence",
                        help="comma-separated: steps, convergence")
    parser.add_argument("--problems", default="mlp,convnet",
                        help="comma-separated, the convergence part's models: mlp, convnet")
    parser.add_argument("--seeds", type=int, default=10, help="convergence: seeds 0..N-1")
    parser.add_argument("--rates", default="0.01,0.03,0.1,0.3,1,3,10",
                        help="convergence: the fixed SGD learning rates, comma-separated")
    args = parser.parse_args()
    print(f"tf {tf.__version__}, keras {keras.__version__}")
    parts = args.parts.split(",")
    if "steps" in parts:
        if args.quick:
            step_costs(rounds=args.rounds or 2, steps=2, width=32, batch=64)
        else:
            step_costs(rounds=args.rounds or 40, steps=30, width=256, batch=128)
    if "convergence" in parts:
        for problem in args.problems.split(","):
            if args.quick:
                convergence(seeds=[0], epochs=args.epochs or 1, rates=[0.1], with_adam=False,
                            problem=problem)
            else:
                start = time.perf_counter()
                convergence(seeds=list(range(args.seeds)), epochs=args.epochs or 10,
                            rates=[float(r) for r in args.rates.split(",")], problem=problem)
                print(f"  ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

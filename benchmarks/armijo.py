"""Benchmark of the stochastic Armijo line search (`tb_wur_plugin.armijo`).

Part 1, cost per step (CPU, float32, tf.function, digits' batches): a plain SGD step (the
reference, "bare"), the gradient pass alone (loss and gradients), the forward pass alone
(loss), a searched step with the defaults and one with the recommended variant
(`StochasticArmijo.minimize`), interleaved in one process: each round times every function
in a random order, and the table gives the median [min–max] over rounds of each one's ratio
to the bare step of that round. It then compares each searched step with gradient + (mean
trials) x forward, where trials = 1 + backtracks per step, counted over the timed steps.

Part 2, convergence on scikit-learn's digits (batch 32, 10 epochs, `model.fit`, seeds 0-9),
for two models: an MLP 64-64-10 and a small convnet on the 8x8 images: the design of
benchmarks/RESULTS.md, "Line search variants" — `LineSearchModel` with three variants of the
search (the reference's defaults, the recommended PoNoS-style one, SaLSA's constants with
momentum) against SGD and SGD with momentum 0.9 over a grid of learning rates and Adam over
three. Per seed every method starts from the same weights and sees the same batches in the
same order (explicit per-seed permutations, no shuffling by fit). Reported: the final
training loss (the whole training set, inference mode, the same loss function for all) as
mean, median and range over seeds, diverged runs counted apart; test accuracy; wall-clock
per epoch; trials per step; and per variant the issue's four targets against the tuned
baseline with the lowest mean loss.

Part 3 ("train", not run by default), the compiled train function alone, per model: the
step `fit` runs (`model.make_train_function()`, fed from a tf.data iterator as `fit` feeds
it), for plain SGD (learning rate 0.3) and `LineSearchModel` with the recommended variant,
from the same weights on the same batches; interleaved rounds in one process, each timing
one epoch's steps of both in a random order; the ratio of the variant's time to SGD's per
round, median [min-max] over rounds. It isolates target 3's ratio from the rest of an epoch
(callbacks, the loop in Python).

    python benchmarks/armijo.py                  # both parts, both models (about 25 minutes)
    python benchmarks/armijo.py --parts convergence --problems convnet
    python benchmarks/armijo.py --parts convergence --seeds 100-102   # development seeds
    python benchmarks/armijo.py --parts train    # the train function alone, both models
    python benchmarks/armijo.py --quick          # tiny sizes, seconds (the test suite runs it)
"""

from __future__ import annotations

import argparse
import math
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
    sgd_model, search_model, variant_model = mlp(0, width), mlp(0, width), mlp(0, width)
    start_weights = search_model.get_weights()
    optimizer = keras.optimizers.SGD(learning_rate=0.01)
    optimizer.build(sgd_model.trainable_variables)
    search = armijo.StochasticArmijo(n_batches_per_epoch=n_batches)
    variant = armijo.StochasticArmijo(**armijo.RECOMMENDED)
    # trials (1 + backtracks) of the timed steps, per search
    trial_count = {s: tf.Variable(0, dtype=tf.int64) for s in ("searched", "recommended")}

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
        trial_count["searched"].assign_add(tf.cast(result.backtracks, tf.int64) + 1)

    def recommended(x, y):
        result = variant.minimize(lambda: LOSS(y, variant_model(x, training=True)),
                                  variant_model.trainable_variables)
        trial_count["recommended"].assign_add(tf.cast(result.backtracks, tf.int64) + 1)

    def loop(fn):
        def run(n):
            for _ in range(n):
                fn()
        return run

    fns = {"bare SGD step": counted(bare), "gradient pass": counted(gradient),
           "forward pass": counted(forward), "searched step": counted(searched),
           "recommended variant": counted(recommended)}
    functions = {name: loop(fn) for name, fn in fns.items()}

    def restart():
        """Each round trains from the same weights and step size over the same batches."""
        sgd_model.set_weights(start_weights)
        search_model.set_weights(start_weights)
        variant_model.set_weights(start_weights)
        search.reset_state()
        variant.reset_state()
        for counter in counters.values():
            counter.assign(0)

    for run in functions.values():  # trace and warm up
        run(2)
    for count in trial_count.values():
        count.assign(0)
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
    for name, key in (("searched step", "searched"), ("recommended variant", "recommended")):
        mean_trials = int(trial_count[key].numpy()) / (rounds * steps)
        predicted = ratio["gradient pass"] + mean_trials * ratio["forward pass"]
        print(f"  {name}: mean trials per step (1 + backtracks, over the {rounds * steps} "
              f"timed steps) {mean_trials:.2f}; gradient + trials x forward = "
              f"{ratio['gradient pass']:.3f} + {mean_trials:.2f} x {ratio['forward pass']:.3f} = "
              f"{predicted:.3f}; measured {ratio[name]:.3f}")


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

# The line-search variants compared (benchmarks/RESULTS.md, "Line search variants"): the
# reference's defaults, the recommended PoNoS-style variant, and SaLSA's constants for SGD
# with momentum (c = 0.5, decrease factor 0.8, mu = beta_3 = 0.9, growth 1.1 a step, which is
# gamma = 1.1 ** steps per epoch; initial step size 1).
RECOMMENDED_NAME = "PoNoS-style (RECOMMENDED)"


def variants(steps_per_epoch: int) -> dict[str, dict]:
    return {
        "Armijo SGD (defaults)": {},
        RECOMMENDED_NAME: dict(armijo.RECOMMENDED),
        "SaLSA-style momentum": dict(momentum=0.9, smoothing=0.9, c=0.5, beta=0.8,
                                     reset="grow", gamma=1.1 ** steps_per_epoch),
    }


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


class EpochClock(keras.callbacks.Callback):
    """Each epoch's wall-clock time (on_epoch_begin to on_epoch_end, before any later
    callback's on_epoch_end) and, when `loss_of` is given, the training loss after it."""

    def __init__(self, loss_of: Callable[[], float] | None = None):
        super().__init__()
        self.seconds: list[float] = []
        self.losses: list[float] = []
        self._loss_of = loss_of

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)
        if self._loss_of is not None:
            self.losses.append(self._loss_of())


def _fmt(value: float, digits: str = ".4f") -> str:
    return f"{value:{digits}}" if np.isfinite(value) else "-"


def convergence(seeds: list[int], epochs: int, rates: list[float], adam_rates: list[float],
                problem: str = "mlp", batch: int = 32, momentum_rates: list[float] | None = None
                ) -> None:
    """The design of benchmarks/RESULTS.md ("Line search variants"): each line-search variant
    and each tuned baseline (SGD and SGD with momentum 0.9 over `rates`, Adam over
    `adam_rates`) fitted `epochs` epochs from the same weights on the same batches per seed.
    Final training loss (full training set, inference mode), test accuracy, wall-clock per
    epoch (median of epochs 2.., the first one traces), trials per searched step; then, per
    variant, the issue's four targets against the baseline with the lowest mean loss."""
    x_train, y_train, x_test, y_test = digits()
    title, build = PROBLEMS[problem]
    steps_per_epoch = -(-len(x_train) // batch)
    momentum_rates = rates if momentum_rates is None else momentum_rates
    searched = variants(steps_per_epoch)
    methods: dict[str, tuple[str, Callable[[keras.Model], keras.Model]]] = {}
    for name, kwargs in searched.items():
        def make(model, kwargs=kwargs):
            trainer = armijo.LineSearchModel(model, armijo.StochasticArmijo(**kwargs))
            trainer.compile(loss=LOSS)
            return trainer
        methods[name] = ("search", make)
    for kind, grid, optimizer in (
        ("SGD", rates, lambda r: keras.optimizers.SGD(learning_rate=r)),
        ("SGD+momentum", momentum_rates,
         lambda r: keras.optimizers.SGD(learning_rate=r, momentum=0.9)),
        ("Adam", adam_rates, lambda r: keras.optimizers.Adam(learning_rate=r)),
    ):
        for rate in grid:
            def make(model, rate=rate, optimizer=optimizer):
                model.compile(optimizer=optimizer(rate), loss=LOSS)
                return model
            methods[f"{kind} lr={rate:g}"] = (kind, make)
    losses = {name: [] for name in methods}
    accuracies = {name: [] for name in methods}
    epoch_seconds = {name: [] for name in methods}  # per run: median of epochs 2..
    trials = {name: [] for name in searched}  # per run: mean of 1 + backtracks
    curves = {name: [] for name in searched}  # per run: training loss after each epoch
    diverged = {name: 0 for name in methods}
    for seed in seeds:
        start_weights = build(seed).get_weights()
        initial_loss = None
        for name, (kind, make) in methods.items():
            model = build(seed)
            model.set_weights(start_weights)
            if initial_loss is None:
                initial_loss = float(LOSS(y_train, model(x_train, training=False)))
            trainer = make(model)
            dataset, _ = batches_in_order(x_train, y_train, seed, epochs, batch)
            clock = EpochClock(
                (lambda model=model: float(LOSS(y_train, model(x_train, training=False))))
                if kind == "search" else None)
            keras.utils.set_random_seed(seed)
            trainer.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                        shuffle=False, verbose=0, callbacks=[clock])
            epoch_seconds[name].append(float(np.median(clock.seconds[1:] or clock.seconds)))
            if kind == "search":
                steps = int(trainer.optimizer.iterations.numpy())
                rows, _ = trainer.step_log.read(max(0, steps - trainer.step_log.capacity),
                                                steps)
                trials[name].append(1.0 + float(np.mean(rows[:, 2])))
                curves[name].append(clock.losses)
            loss = float(LOSS(y_train, model(x_train, training=False)))
            if not np.isfinite(loss) or loss > initial_loss:
                diverged[name] += 1
                loss = float("nan")
            losses[name].append(loss)
            accuracies[name].append(
                float(np.mean(np.argmax(model(x_test, training=False), 1) == y_test)))
    n = len(seeds)
    print(f"digits: {title}, batch {batch} ({steps_per_epoch} steps per epoch), {epochs} "
          f"epochs, seeds {seeds}; each seed: the same initial weights and batch order for every "
          "method. Final training loss (full training set, inference mode): mean, median "
          "[min-max] over seeds (diverged: final loss nan or above the initial loss, counted "
          "apart; a method with any diverged seed gets no mean); test accuracy mean [min-max]; "
          "wall-clock per epoch: median over seeds of the median of epochs 2..; trials: "
          "1 + backtracks per step, mean over steps and seeds")
    for name in methods:
        ls, acc = np.array(losses[name]), accuracies[name]
        finite = ls[np.isfinite(ls)]
        spread = (f"{_fmt(np.mean(ls))} {np.median(finite):.4g} [{finite.min():.4g}-"
                  f"{finite.max():.4g}]") if len(finite) else "-"
        note = f"  diverged {diverged[name]}/{n}" if diverged[name] else ""
        extra = f"  trials {np.mean(trials[name]):.3f}" if name in trials else ""
        print(f"  {name:<26} loss {spread:<36} test acc {np.mean(acc):.4f} "
              f"[{min(acc):.4f}-{max(acc):.4f}]  epoch {np.median(epoch_seconds[name]) * 1e3:6.1f}"
              f" ms{extra}{note}")
    baselines = [name for name in methods if name not in searched]
    stable = [name for name in baselines if not diverged[name]]
    best = min(stable, key=lambda name: np.mean(losses[name]))
    best_accuracy = max(baselines, key=lambda name: np.mean(accuracies[name]))
    sgd_seconds = float(np.median([s for name in baselines if name.startswith("SGD lr=")
                                   for s in epoch_seconds[name]]))
    best_losses, best_acc = np.array(losses[best]), np.array(accuracies[best])
    print(f"  best tuned baseline (lowest mean final loss, no diverged seed): {best}, loss "
          f"{np.mean(best_losses):.4g}, test acc {np.mean(best_acc):.4f} (seed spread "
          f"{best_acc.max() - best_acc.min():.4f}); highest mean test acc: {best_accuracy} "
          f"{np.mean(accuracies[best_accuracy]):.4f}; plain SGD epoch (median of all its runs) "
          f"{sgd_seconds * 1e3:.1f} ms")
    for name in searched:
        ls = np.where(np.isfinite(losses[name]), losses[name], np.inf)
        wins = int(np.sum(ls <= best_losses))
        mean_trials = float(np.mean(trials[name]))
        ratio = float(np.median(epoch_seconds[name])) / sgd_seconds
        acc = float(np.mean(accuracies[name]))
        floor = float(np.mean(best_acc) - (best_acc.max() - best_acc.min()))
        reached = [next((e + 1 for e, value in enumerate(curve) if value <= np.mean(best_losses)),
                        None) for curve in curves[name]]
        reached_text = ", ".join("-" if e is None else str(e) for e in reached)
        targets = [
            ("loss", np.mean(ls) <= np.mean(best_losses) and wins >= math.ceil(0.8 * n),
             f"mean {_fmt(np.mean(ls), '.4g')} vs {np.mean(best_losses):.4g}, {wins}/{n} seeds"),
            ("trials", mean_trials <= 1.10, f"{mean_trials:.3f} per step"),
            ("epoch time", ratio <= 1.3, f"{ratio:.2f}x plain SGD"),
            ("test acc", acc >= floor, f"{acc:.4f} vs floor {floor:.4f}"),
        ]
        print(f"  {name}: " + "; ".join(
            f"{label} {'met' if ok else 'MISSED'} ({text})" for label, ok, text in targets))
        print(f"    epochs to reach the best baseline's mean final loss, per seed: "
              f"{reached_text}")


# --- part 3 -------------------------------------------------------------------------------


def train_costs(problems: list[str], rounds: int, batch: int = 32, seed: int = 0) -> None:
    """Per model, the compiled train function of plain SGD (lr 0.3) and of `LineSearchModel`
    with `armijo.RECOMMENDED`, one epoch of steps each per round, interleaved in a random
    order; each round restarts both from the same weights and search state."""
    x_train, y_train, _, _ = digits()
    steps_per_epoch = -(-len(x_train) // batch)
    dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch)
               .repeat().prefetch(2))
    for problem in problems:
        title, build = PROBLEMS[problem]
        sgd_model, searched_model = build(seed), build(seed)
        start_weights = sgd_model.get_weights()
        searched_model.set_weights(start_weights)
        sgd_model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3), loss=LOSS)
        search = armijo.StochasticArmijo(**armijo.RECOMMENDED)
        trainer = armijo.LineSearchModel(searched_model, search)
        trainer.compile(loss=LOSS)
        runs = {}
        for name, model in (("plain SGD", sgd_model), ("recommended variant", trainer)):
            model.make_train_function()
            function = model.train_function
            iterator = iter(dataset)

            def run(n, function=function, iterator=iterator):
                for _ in range(n):
                    function(iterator)
            runs[name] = run
        for run in runs.values():  # trace and warm up
            run(3)
        times = {name: [] for name in runs}
        for _ in range(rounds):
            sgd_model.set_weights(start_weights)
            searched_model.set_weights(start_weights)
            search.reset_state()
            names = list(runs)
            random.shuffle(names)
            for name in names:
                times[name].append(time_per_step(runs[name], steps_per_epoch))
        ratios = [t / b for t, b in zip(times["recommended variant"], times["plain SGD"])]
        print(f"digits: {title}, batch {batch}: the compiled train function, "
              f"{steps_per_epoch} steps per round, {rounds} rounds; time per step, median "
              f"[min-max] over rounds")
        for name in runs:
            ms = [t * 1e3 for t in times[name]]
            print(f"  {name:<22} {statistics.median(ms):7.3f} ms [{min(ms):.3f}-{max(ms):.3f}]")
        print(f"  recommended variant / plain SGD: {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--parts", default="steps,convergence",
                        help="comma-separated: steps, convergence, train")
    parser.add_argument("--problems", default="mlp,convnet",
                        help="comma-separated, the models of the convergence and train "
                        "parts: mlp, convnet")
    parser.add_argument("--seeds", default="0-9",
                        help="convergence: seeds, a range a-b or a comma-separated list")
    parser.add_argument("--rates", default="0.01,0.03,0.1,0.3,1,3,10",
                        help="convergence: the learning rates of SGD and SGD with momentum")
    parser.add_argument("--adam-rates", default="0.0003,0.001,0.003",
                        help="convergence: the learning rates of Adam")
    args = parser.parse_args()
    print(f"tf {tf.__version__}, keras {keras.__version__}")
    parts = args.parts.split(",")
    if "steps" in parts:
        if args.quick:
            step_costs(rounds=args.rounds or 2, steps=2, width=32, batch=64)
        else:
            step_costs(rounds=args.rounds or 40, steps=30, width=256, batch=128)
    if "convergence" in parts:
        if "-" in args.seeds:
            first, last = (int(part) for part in args.seeds.split("-"))
            seeds = list(range(first, last + 1))
        else:
            seeds = [int(seed) for seed in args.seeds.split(",")]
        for problem in args.problems.split(","):
            start = time.perf_counter()
            if args.quick:
                convergence(seeds=[0], epochs=args.epochs or 2, rates=[0.1], adam_rates=[1e-3],
                            problem=problem)
            else:
                convergence(seeds=seeds, epochs=args.epochs or 10,
                            rates=[float(r) for r in args.rates.split(",")],
                            adam_rates=[float(r) for r in args.adam_rates.split(",")],
                            problem=problem)
            print(f"  ({time.perf_counter() - start:.0f} s)")
    if "train" in parts:
        train_costs(args.problems.split(","), rounds=args.rounds or (2 if args.quick else 30))


if __name__ == "__main__":
    main()

"""Training-step benchmark: what logging weight-update ratios costs, against the alternatives.

Every variant runs in this one process, interleaved: each round times every variant (in a
random order) over --steps steps, the bare step twice (its second timing is the noise floor),
and once more as another traced function of the same body (functions with identical graphs
differ by a few percent), and reports the median [min–max] over rounds of the per-round
RATIO to the bare step.

Workloads (CPU, float32, Adam, tf.function steps):
  M1  MLP 784-512-512-10, batch 128 (6 variables)
  M2  CNN, 3 conv + 2 dense, 32x32x3 inputs, batch 64 (10 variables)
  M3  100 stacked Dense(64), batch 32 (200 variables)
  MEM one Dense layer of about 200 MB of weights, for peak memory

    python benchmarks/training.py               # the tables of benchmarks/RESULTS.md
    python benchmarks/training.py --smoke       # tiny sizes, for CI: workload M3 (3 layers)
                                                # (M1's model runs in the fit part), one try
    python benchmarks/training.py --parts fit --rounds 30   # one part, more rounds
    python benchmarks/training.py --parts fit --steps-per-execution 10   # fit, 10 steps a call
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_wur_plugin import wur_summary  # noqa: E402
from tb_wur_plugin.keras import WeightUpdateRatioCallback  # noqa: E402
from fit_rounds import interleaved_fit_epochs  # noqa: E402

LOG_EVERY = 100


def make_workload(name: str, smoke: bool):
    keras.utils.set_random_seed(0)
    if name == "M1":
        width = 64 if smoke else 512
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(width, activation="relu"),
                                  keras.layers.Dense(width, activation="relu"), keras.layers.Dense(10)])
        x, y = tf.random.normal([128, 784]), tf.random.normal([128, 10])
    elif name == "M2":
        model = keras.Sequential([
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ])
        x, y = tf.random.normal([64, 32, 32, 3]), tf.random.normal([64, 10])
    elif name == "M3":
        depth = 3 if smoke else 100
        model = keras.Sequential([keras.Input((64,))] + [keras.layers.Dense(64, activation="relu")
                                                         for _ in range(depth)])
        x, y = tf.random.normal([32, 64]), tf.random.normal([32, 64])
    else:  # MEM: about 200 MB of float32 weights
        width = 512 if smoke else 7200
        model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width)])
        x, y = tf.random.normal([8, width]), tf.random.normal([8, width])
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    return model, optimizer, x, y


class Variants:
    """The step functions of one workload, each `() -> None` running one training step."""

    def __init__(self, model, optimizer, x, y, writer):
        self.model, self.optimizer, self.x, self.y, self.writer = model, optimizer, x, y, writer
        self.variables = model.trainable_variables
        self.flag = tf.Variable(False)

    def _grads(self):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(self.x, training=True) - self.y))
        return tape.gradient(loss, self.variables)

    def _apply(self, grads):
        self.optimizer.apply_gradients(zip(grads, self.variables))

    def bare_body(self):
        self._apply(self._grads())

    def watch_body(self, histograms=False, from_optimizer=True):
        grads = self._grads()
        with wur_summary.watch(self.variables, step=self.optimizer.iterations,
                               histograms=histograms,
                               optimizer=self.optimizer if from_optimizer else None):
            self._apply(grads)

    def global_norm_body(self):
        """The old approach: the global weight norm before and after every step."""
        grads = self._grads()
        before = tf.linalg.global_norm(self.variables)
        self._apply(grads)
        after = tf.linalg.global_norm(self.variables)
        tf.summary.scalar("global_update", tf.abs(after - before) / before,
                          step=self.optimizer.iterations)

    def _naive_log(self, before, histograms):
        for v, old in zip(self.variables, before):
            delta = v - old
            tf.summary.scalar(v.path, tf.norm(delta) / tf.norm(old), step=self.optimizer.iterations)
            if histograms:
                tf.summary.histogram(v.path + "/h", tf.abs(delta) / tf.abs(old),
                                     step=self.optimizer.iterations)

    def naive_body(self, histograms=False):
        """Per-variable snapshot, ratio and tf.summary.scalar, every step."""
        grads = self._grads()
        before = [tf.identity(v) for v in self.variables]
        self._apply(grads)
        self._naive_log(before, histograms)

    def naive_cond_body(self):
        """The same, gated by an in-graph tf.cond on a flag."""
        grads = self._grads()
        before = tf.cond(self.flag, lambda: [tf.identity(v) for v in self.variables],
                         lambda: [tf.zeros_like(v) for v in self.variables])
        self._apply(grads)
        tf.cond(self.flag, lambda: self._naive_log(before, False) or tf.constant(True),
                lambda: tf.constant(False))


    def empty_conds_body(self):
        """The floor of gating in-graph: two conditionals on the flag (before and after the
        update) that read every variable when it holds, and nothing else."""
        def read_all():
            return tf.add_n([tf.reduce_sum(w) for w in self.variables])

        grads = self._grads()
        before = tf.cond(self.flag, read_all, lambda: tf.constant(0.0))
        self._apply(grads)
        tf.cond(self.flag, lambda: read_all() + before, lambda: before)


def step_functions(variants: Variants) -> dict[str, tuple[Callable[[int], None], str]]:
    """name -> (run n training steps, 'recording' or 'idle'), the functions traced once here.

    Variants that log run their n steps under the writer set as the default once, as a
    training loop sets it (`writer.as_default()` flushes the writer when it exits: entered
    for every step, it would flush every step).
    """
    v, writer = variants, variants.writer
    bare = tf.function(v.bare_body)
    bare_traced_again = tf.function(v.bare_body)  # the same graph in another function
    plain = tf.function(v.watch_body)  # called without a writer: the recommended idle step
    logged = tf.function(v.watch_body)
    logged_histograms = tf.function(lambda: v.watch_body(histograms=True))
    logged_snapshot = tf.function(lambda: v.watch_body(from_optimizer=False))
    gated = tf.function(v.watch_body)
    global_norm = tf.function(v.global_norm_body)
    naive = tf.function(v.naive_body)
    naive_histograms = tf.function(lambda: v.naive_body(histograms=True))
    naive_cond = tf.function(v.naive_cond_body)
    empty_conds = tf.function(v.empty_conds_body)

    def alone(fn):
        def run(steps):
            for _ in range(steps):
                fn()
        return run

    def under_writer(fn, flag=None):
        def run(steps):
            with writer.as_default(), contextlib.ExitStack() as stack:
                if flag is not None:
                    v.flag.assign(flag)
                    stack.enter_context(tf.summary.record_if(lambda: v.flag))
                for _ in range(steps):
                    fn()
        return run

    return {
        "bare": (alone(bare), "idle"),
        "bare (again)": (alone(bare), "idle"),
        "bare, traced again": (alone(bare_traced_again), "idle"),
        "recommended: idle step": (alone(plain), "idle"),
        "recommended: logged step": (under_writer(logged), "recording"),
        "recommended: logged step, histograms": (under_writer(logged_histograms), "recording"),
        "recommended, no optimizer=: logged": (under_writer(logged_snapshot), "recording"),
        "watch + record_if: idle": (under_writer(gated, False), "idle"),
        "watch + record_if: logged": (under_writer(gated, True), "recording"),
        "global norm every step": (under_writer(global_norm), "recording"),
        "naive per-variable, every step": (under_writer(naive), "recording"),
        "naive + tf.summary.histogram": (under_writer(naive_histograms), "recording"),
        "naive tf.cond: idle": (under_writer(naive_cond, False), "idle"),
        "naive tf.cond: logged": (under_writer(naive_cond, True), "recording"),
        "two empty tf.cond: idle": (under_writer(empty_conds, False), "idle"),
    }


def time_per_step(run: Callable[[int], None], steps: int) -> float:
    start = time.perf_counter()
    run(steps)
    return (time.perf_counter() - start) / steps


def interleaved(functions: dict[str, Callable[[int], None]], rounds: int, steps: int,
                baseline: str = "bare") -> dict[str, list[float]]:
    """Per-round ratios of each function's time per step to the `baseline` function's."""
    for run in functions.values():  # trace and warm up
        run(2)
    ratios: dict[str, list[float]] = {name: [] for name in functions if name != baseline}
    for _ in range(rounds):
        names = list(functions)
        random.shuffle(names)
        times = {name: time_per_step(functions[name], steps) for name in names}
        for name in ratios:
            ratios[name].append(times[name] / times[baseline])
    return ratios


def trace_seconds(make: Callable[[], Callable], steady: float) -> float:
    """Seconds the first call of a fresh function takes beyond a steady-state step."""
    fn = make()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start - steady


def peak_memory_delta(fn: Callable) -> int:
    """Bytes TensorFlow's CPU allocator's peak rises above its current use during `fn`
    (needs TF_CPU_ALLOCATOR_USE_BFC=true, set for the memory part, run in its own process)."""
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    fn()
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


def fit_epochs(
    smoke: bool, rounds: int, logdir: str, steps_per_execution: int = 1
) -> dict[str, list[float]]:
    """Ratios of a model.fit epoch with a callback to one without, interleaved, the model
    compiled with `steps_per_execution`. With `steps_per_execution` > 1 each variant fits
    its own copy of the model (same initial weights): the callback keeps its traced train
    function on the model it fits, and a `fit` of that model without the callback traces
    Keras's own again, which alternating variants on one model would time."""

    def compiled():
        model, _, _, _ = make_workload("M1", smoke)
        model.compile(optimizer="adam", loss="mse", steps_per_execution=steps_per_execution)
        return model

    model = compiled()
    x = np.random.default_rng(0).normal(size=(128 * (20 if smoke else 200), 784)).astype("float32")
    y = np.random.default_rng(1).normal(size=(len(x), 10)).astype("float32")
    callbacks = {
        "fit": [],
        "fit (again)": [],
        "fit + WeightUpdateRatioCallback": [WeightUpdateRatioCallback(logdir, update_freq=LOG_EVERY)],
        "fit + TensorBoard(histogram_freq=1)": [
            keras.callbacks.TensorBoard(os.path.join(logdir, "tb"), histogram_freq=1)
        ],
    }
    models = {name: model if steps_per_execution == 1 else compiled() for name in callbacks}
    # trace (with steps_per_execution > 1 over the epoch's data: Keras traces its function
    # again for data of another number of batches)
    warm = 256 if steps_per_execution == 1 else len(x)
    for name, extra in callbacks.items():
        models[name].fit(x[:warm], y[:warm], batch_size=128, epochs=1, verbose=0,
                         callbacks=extra)
    return interleaved_fit_epochs(models, callbacks, x, y, rounds)


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}–{max(values):.3f}]"


def memory(smoke: bool) -> None:
    # one inter-op thread: the ops run in one order, so that the peak is the same every run
    # (with two, the bare step's own peak moved by 0.59 x the weights between runs)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model, optimizer, x, y = make_workload("MEM", smoke)
    weight_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)
    logdir = tempfile.mkdtemp(prefix="wur-bench-")
    writer = tf.summary.create_file_writer(logdir)
    functions = step_functions(Variants(model, optimizer, x, y, writer))
    print(f"\nMEM: {weight_bytes / 1e6:.0f} MB of weights; peak allocator memory during a step "
          f"above the bare step's, in units of the weight bytes (median of 3)", flush=True)
    for run, _ in functions.values():
        run(1)
    bare_peak = statistics.median(
        peak_memory_delta(lambda: functions["bare"][0](1)) for _ in range(3))
    for variant in ["recommended: idle step", "recommended: logged step",
                    "recommended: logged step, histograms",
                    "recommended, no optimizer=: logged", "watch + record_if: idle",
                    "watch + record_if: logged", "naive per-variable, every step",
                    "naive + tf.summary.histogram"]:
        run = functions[variant][0]
        extra = statistics.median(peak_memory_delta(lambda: run(1)) for _ in range(3)) - bare_peak
        print(f"  {variant:<40} {extra / weight_bytes:+.2f} x", flush=True)
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    parser.add_argument("--workloads", default=None, help="default M1,M2,M3 (--smoke: M3)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--steps-per-execution", type=int, default=1,
                        help="the fit part's model.compile(steps_per_execution=)")
    parser.add_argument("--parts", default="steps,memory,fit",
                        help="comma-separated: steps (the workloads), memory, fit")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts - {"steps", "memory", "fit"}:
        parser.error(f"unknown parts: {sorted(parts - {'steps', 'memory', 'fit'})}")
    if parts == {"memory"} and os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") == "true":
        memory(args.smoke)
        return
    if args.smoke:
        args.rounds, args.steps = 2, 2
    sys.stdout.reconfigure(line_buffering=True)
    random.seed(0)
    logdir = tempfile.mkdtemp(prefix="wur-bench-")
    print(f"{tf.__version__=} {keras.__version__=} rounds={args.rounds} steps={args.steps}")
    workloads = args.workloads or ("M3" if args.smoke else "M1,M2,M3")
    trace_tries = 1 if args.smoke else 2

    for name in workloads.split(",") if "steps" in parts else []:
        model, optimizer, x, y = make_workload(name, args.smoke)
        writer = tf.summary.create_file_writer(os.path.join(logdir, name))
        variants = Variants(model, optimizer, x, y, writer)
        functions = step_functions(variants)
        ratios = interleaved({k: fn for k, (fn, _) in functions.items()}, args.rounds, args.steps)
        print(f"\n{name}: {len(model.trainable_variables)} variables; time per step / bare step, "
              f"median [min–max] over {args.rounds} rounds")
        for variant, values in ratios.items():
            print(f"  {variant:<40} {functions[variant][1]:<10} {summary(values)}")
        if name == "M3":
            steady = time_per_step(functions["bare"][0], args.steps)
            print(f"  extra time of the first (tracing) call, seconds, the least of {trace_tries} "
                  "tries (the first function traced also pays one-time costs):")
            bodies = {
                "bare": variants.bare_body,
                "recommended: logged step": variants.watch_body,
                "recommended: logged step, histograms": lambda: variants.watch_body(True),
                "naive per-variable": variants.naive_body,
                "naive + tf.summary.histogram": lambda: variants.naive_body(True),
            }
            tries: dict[str, list[float]] = {label: [] for label in bodies}
            for _ in range(trace_tries):
                for label, body in bodies.items():
                    def make(body=body):
                        fn = tf.function(body)
                        def run():
                            with writer.as_default():
                                fn()
                        return run
                    tries[label].append(trace_seconds(make, steady))
            for label, seconds in tries.items():
                print(f"    {label:<40} {min(seconds):.2f}")
        writer.close()

    if "memory" in parts:
        # TensorFlow's CPU allocator reports its peak only as a BFC allocator, set at start-up
        command = [sys.executable, __file__, "--parts", "memory"] + (["--smoke"] if args.smoke else [])
        subprocess.run(command, env={**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true"}, check=True)
    if "fit" not in parts:
        return
    print(f"\nmodel.fit epoch (M1 model, {'20' if args.smoke else '200'} steps, "
          f"steps_per_execution={args.steps_per_execution}) / without callbacks, logging "
          f"every {LOG_EVERY} steps")
    for variant, values in fit_epochs(
        args.smoke, args.rounds, logdir, args.steps_per_execution
    ).items():
        print(f"  {variant:<40} {summary(values)}")


if __name__ == "__main__":
    main()

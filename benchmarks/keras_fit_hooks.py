"""Keras `fit` with `WeightUpdateRatioCallback` against `fit` with a callback whose batch
hook does nothing, on the backend KERAS_BACKEND names (tensorflow or jax): what each `fit`
and each epoch with the callback costs.

The model: 80 Dense layers (160 variables): 79 of 64 units (relu) side by side on 64
inputs, averaged, then one of 10 units; Adam, mse, batch 128, 300 steps an epoch, numpy
inputs. The reference callback defines `on_train_batch_begin` (a `pass`), as the callback
does, and no batch-end hook, so that Keras dispatches batch ends the same way for both.
Each variant fits its own copy of the model (same initial weights) with its own callback,
kept across fits; "no-op hooks (again)" is the noise floor.

Rounds (default): each round runs one `fit` of `--epochs` epochs of every variant, in a
random order, after a garbage collection and with the collector off during the `fit` (as
`timeit` does), and times the first epoch (from the call of `fit` to the end of its first
`on_epoch_end`: `fit`'s own setup, `on_train_begin`, the epoch), the later epochs (from one
epoch's end to the next's), the tail (from the last epoch's end to `fit`'s return:
`on_train_end`), the process's CPU time of the whole `fit`, and the time spent in the
callback's hooks. The report is the median [min–max] over rounds of the per-round ratio to
the reference, for the whole `fit` (wall and CPU time), its first epoch and its later
epochs; the tail and the hooks in milliseconds, and how many tails took over 0.1 s; and the
hooks' time over the reference's whole `fit` of the same round, the callback's own cost
without the noise of the rest.

Probe (`--probe`): a second `fit` of one epoch per variant, profiled (cProfile) for how
many functions TensorFlow traces in it (`_create_concrete_function` calls) and, on JAX, how
many JAX compiles (`jax_log_compiles`); then three more `fit`s with the callback, not
profiled, its hooks timed: `on_train_begin`, the batch begins (all, and the slowest ones,
which are the logged steps' snapshots and writes), `on_epoch_end`, `on_train_end`.

    python benchmarks/keras_fit_hooks.py --rounds 20
    python benchmarks/keras_fit_hooks.py --probe
    python benchmarks/keras_fit_hooks.py --smoke      # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import logging
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from typing import Any, Iterator, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tb_wur_plugin.keras import WeightUpdateRatioCallback  # noqa: E402

REFERENCE = "no-op hooks"
HOOKS = ("on_train_begin", "on_train_batch_begin", "on_epoch_end", "on_train_end")


class NoOpHooks(keras.callbacks.Callback):
    """A callback with a batch-begin hook that does nothing."""

    def on_train_batch_begin(self, batch, logs=None):
        pass


class EpochClock(keras.callbacks.Callback):
    """The time of each epoch's end (after the callbacks before it in the list)."""

    def __init__(self):
        super().__init__()
        self.ends: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        self.ends.append(time.perf_counter())


def model(layers: int, width: int) -> keras.Model:
    """`layers` - 1 Dense layers of `width` units (relu) side by side on the input, averaged,
    and a Dense layer of 10 units: 2 · `layers` variables, two layers deep (a chain of 80
    relu layers stops learning at once, and the callback's judgement would flag most of its
    layers at every logged step)."""
    inputs = keras.Input((width,))
    branches = [
        keras.layers.Dense(width, activation="relu",
                           kernel_initializer=keras.initializers.GlorotUniform(i))(inputs)
        for i in range(layers - 1)
    ]
    outputs = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(layers))(
        keras.layers.Average()(branches))
    net = keras.Model(inputs, outputs)
    net.compile(optimizer="adam", loss="mse")
    return net


class Fit(NamedTuple):
    """One timed `fit`, in seconds: wall time of its first epoch, of each later one, of its
    tail; the process's CPU time of the whole `fit`; the time spent in the callback's hooks."""

    first: float
    later: list[float]
    tail: float
    cpu: float
    hooks: float

    @property
    def whole(self) -> float:
        return self.first + sum(self.later) + self.tail


def timed_fit(net: keras.Model, callback: Any, x: Any, y: Any, epochs: int) -> Fit:
    """One `fit` of `epochs` epochs, after a garbage collection, with the collector off
    during it (as `timeit` does: a full collection, which the whole process's objects
    trigger, came inside some `fit`s of every variant and took up to a second); the hooks
    `HOOKS` of `callback` are timed."""
    clock = EpochClock()
    in_hooks: list[float] = []
    for hook in HOOKS:
        setattr(callback, hook, _timed(getattr(callback, hook), in_hooks))
    gc.collect()
    gc.disable()
    try:
        cpu, start = time.process_time(), time.perf_counter()
        net.fit(x, y, batch_size=128, epochs=epochs, verbose=0, callbacks=[callback, clock])
        end, cpu = time.perf_counter(), time.process_time() - cpu
    finally:
        gc.enable()
        for hook in HOOKS:
            del callback.__dict__[hook]
    ends = clock.ends
    return Fit(ends[0] - start, [b - a for a, b in zip(ends, ends[1:])], end - ends[-1], cpu,
               sum(in_hooks))


def summary(values: list[float], digits: int = 3) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}–{max(values):.{digits}f}]")


def _long(fits: list[Fit]) -> str:
    """How many of `fits` have a tail over 0.1 s, of how many."""
    return f"{sum(f.tail > 0.1 for f in fits)}/{len(fits)}"


def rounds(nets: dict, callbacks: dict, x: Any, y: Any, count: int, epochs: int) -> None:
    fits: dict[str, list[Fit]] = {name: [] for name in callbacks}
    for _ in range(count):
        names = list(callbacks)
        random.shuffle(names)
        for name in names:
            fits[name].append(timed_fit(nets[name], callbacks[name], x, y, epochs))
    print(f"per-round ratio to '{REFERENCE}', median [min–max] over {count} rounds of one "
          f"fit of {epochs} epochs each (wall time; CPU time of the process for the whole fit); "
          "the tail and the time in the callback's hooks in ms per fit")
    print(f"  {'variant':<27} {'whole fit':<20} {'first epoch':<20} {'later epochs':<20} "
          f"{'whole fit, CPU':<20} {'tail ms':<20} {'> 0.1 s':<6} hooks ms")
    reference = fits[REFERENCE]
    for name in callbacks:
        if name == REFERENCE:
            continue
        whole, first, later, cpu = [], [], [], []
        for mine, ref in zip(fits[name], reference):
            whole.append(mine.whole / ref.whole)
            first.append(mine.first / ref.first)
            later.extend(a / b for a, b in zip(mine.later, ref.later))
            cpu.append(mine.cpu / ref.cpu)
        print(f"  {name:<27} {summary(whole):<20} {summary(first):<20} "
              f"{summary(later) if later else '-':<20} {summary(cpu):<20} "
              f"{summary([1e3 * f.tail for f in fits[name]], 2):<20} "
              f"{_long(fits[name]):<6} "
              f"{summary([1e3 * f.hooks for f in fits[name]], 1)}")
    print(f"  {REFERENCE + ' (absolute)':<27} whole fit "
          f"{summary([1e3 * f.whole for f in reference], 0)} ms, first epoch "
          f"{summary([1e3 * f.first for f in reference], 0)} ms, tail "
          f"{summary([1e3 * f.tail for f in reference], 2)} ms ({_long(reference)} over 0.1 s)")
    mine = fits["callback(update_freq=100)"]
    print("  the callback's hooks / the reference's fit of the same round: "
          + summary([f.hooks / ref.whole for f, ref in zip(mine, reference)], 4))


def probe(nets: dict, callbacks: dict, x: Any, y: Any, fits: int) -> None:
    print("probe: traces in a later fit of one epoch (profiled); then the callback's hooks in "
          f"ms in {fits} more (not profiled)")
    for name in callbacks:
        with _compiles() as compiles:
            profile = cProfile.Profile()
            profile.enable()
            nets[name].fit(x, y, batch_size=128, epochs=1, verbose=0,
                           callbacks=[callbacks[name]])
            profile.disable()
        traces = sum(stats[1] for key, stats in pstats.Stats(profile).stats.items()
                     if key[2] == "_create_concrete_function")
        print(f"  {name:<30} traces {traces}"
              + (f", JAX compiles {len(compiles)}" if compiles is not None else ""))
    name = "callback(update_freq=100)"
    callback = callbacks[name]
    for _ in range(fits):
        hooks: dict[str, list[float]] = {}
        for hook in HOOKS:
            setattr(callback, hook, _timed(getattr(callback, hook), hooks.setdefault(hook, [])))
        nets[name].fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
        for hook in HOOKS:
            del callback.__dict__[hook]
        batches = hooks["on_train_batch_begin"]
        slowest = sorted(range(len(batches)), key=batches.__getitem__)[-6:]
        print(f"  {name}: on_train_begin {1e3 * hooks['on_train_begin'][0]:.2f}, batch begins "
              f"{1e3 * sum(batches):.1f} in all, the slowest "
              + ", ".join(f"#{i}: {1e3 * batches[i]:.2f}" for i in sorted(slowest))
              + f", on_epoch_end {1e3 * hooks['on_epoch_end'][0]:.2f}, "
              f"on_train_end {1e3 * hooks['on_train_end'][0]:.2f}")


@contextlib.contextmanager
def _compiles() -> Iterator[list | None]:
    """On JAX, the compilations in the block (`jax_log_compiles`' messages), listed as they
    come; elsewhere None."""
    if keras.backend.backend() != "jax":
        yield None
        return
    import jax

    compiles: list = []

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Compiling"):
                compiles.append(record.getMessage()[:80])

    handler, logger = Counter(), logging.getLogger("jax")
    logger.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        yield compiles
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)


def _timed(method: Any, into: list[float]) -> Any:
    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = method(*args, **kwargs)
        into.append(time.perf_counter() - start)
        return result

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    layers, width, steps = (4, 16, 20) if args.smoke else (80, 64, 300)
    count = 2 if args.smoke else args.rounds
    sys.stdout.reconfigure(line_buffering=True)
    random.seed(0)
    logdir = tempfile.mkdtemp(prefix="wur-bench-")
    x = np.random.default_rng(0).normal(size=(128 * steps, width)).astype("float32")
    y = np.random.default_rng(1).normal(size=(len(x), 10)).astype("float32")
    callbacks = {
        REFERENCE: NoOpHooks(),
        REFERENCE + " (again)": NoOpHooks(),
        "callback(update_freq=100)": WeightUpdateRatioCallback(logdir, update_freq=100),
    }
    nets = {name: model(layers, width) for name in callbacks}
    print(f"keras {keras.__version__}, backend {keras.backend.backend()}: {layers} Dense "
          f"layers ({len(nets[REFERENCE].trainable_variables)} variables), {steps} steps an "
          f"epoch, load average {os.getloadavg()[0]:.2f} at the start")
    for name, callback in callbacks.items():  # the first fit of each traces (jits)
        nets[name].fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
    if args.probe:
        probe(nets, callbacks, x, y, 1 if args.smoke else 3)
    else:
        rounds(nets, callbacks, x, y, count, args.epochs)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

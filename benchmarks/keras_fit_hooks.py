"""Keras `fit` with `WeightUpdateRatioCallback` against `fit` with a callback whose batch
hook does nothing, on the backend KERAS_BACKEND names (tensorflow or jax): what each `fit`
and each epoch with the callback costs.

The model: 80 Dense layers (160 variables): 79 of 64 units (relu) side by side on 64 inputs,
averaged, then one of 10 units; Adam, mse, batch 128, 300 steps an epoch, numpy inputs. The reference callback defines
`on_train_batch_begin` (a `pass`), as the callback does, and no batch-end hook, so that
Keras dispatches batch ends the same way for both. Each variant fits its own copy of the
model (same initial weights) with its own callback, kept across fits; "no-op hooks (again)"
is the noise floor.

Rounds (default): each round runs one `fit` of `--epochs` epochs of every variant, in a
random order, and times the first epoch (from the call of `fit` to the end of its first
`on_epoch_end`: `fit`'s own setup, `on_train_begin`, the epoch), the later epochs (from one
epoch's end to the next's) and the tail (from the last epoch's end to `fit`'s return:
`on_train_end`). The report is the median [min–max] over rounds of the per-round ratio to
the reference, for the whole `fit`, its first epoch and its later epochs, and the tail in
milliseconds.

Probe (`--probe`): a second `fit` of one epoch per variant, profiled (cProfile) for how
many functions TensorFlow traces in it (`_create_concrete_function` calls; none on JAX);
then three more `fit`s with the callback, not profiled, its hooks timed: `on_train_begin`,
the batch begins (all, and the slowest ones, which are the logged steps' snapshots and
writes), `on_epoch_end`, `on_train_end`.

    python benchmarks/keras_fit_hooks.py --rounds 20
    python benchmarks/keras_fit_hooks.py --probe
    python benchmarks/keras_fit_hooks.py --smoke      # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from typing import Any

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


def timed_fit(net: keras.Model, callback: Any, x: Any, y: Any, epochs: int
              ) -> tuple[float, list[float], float]:
    """One `fit`: (its first epoch, its later epochs, its tail), in seconds."""
    clock = EpochClock()
    start = time.perf_counter()
    net.fit(x, y, batch_size=128, epochs=epochs, verbose=0, callbacks=[callback, clock])
    end = time.perf_counter()
    ends = clock.ends
    return ends[0] - start, [b - a for a, b in zip(ends, ends[1:])], end - ends[-1]


def summary(values: list[float], digits: int = 3) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}–{max(values):.{digits}f}]")


def rounds(nets: dict, callbacks: dict, x: Any, y: Any, count: int, epochs: int) -> None:
    times: dict[str, list[tuple]] = {name: [] for name in callbacks}
    for _ in range(count):
        names = list(callbacks)
        random.shuffle(names)
        for name in names:
            times[name].append(timed_fit(nets[name], callbacks[name], x, y, epochs))
    print(f"per-round ratio to '{REFERENCE}', median [min–max] over {count} rounds of one "
          f"fit of {epochs} epochs each; tail (on_train_end) in ms")
    print(f"  {'variant':<30} {'whole fit':<22} {'first epoch':<22} {'later epochs':<22} "
          f"tail ms")
    reference = times[REFERENCE]
    for name in callbacks:
        if name == REFERENCE:
            continue
        whole, first, later = [], [], []
        for mine, ref in zip(times[name], reference):
            whole.append((mine[0] + sum(mine[1]) + mine[2]) / (ref[0] + sum(ref[1]) + ref[2]))
            first.append(mine[0] / ref[0])
            later.extend(a / b for a, b in zip(mine[1], ref[1]))
        tails = [1e3 * mine[2] for mine in times[name]]
        print(f"  {name:<30} {summary(whole):<22} {summary(first):<22} "
              f"{summary(later) if later else '-':<22} {summary(tails, 2)}")
    tails = [1e3 * ref[2] for ref in reference]
    first = [1e3 * ref[0] for ref in reference]
    print(f"  {REFERENCE + ' (absolute)':<30} first epoch {summary(first, 0)} ms, "
          f"tail {summary(tails, 2)} ms")


def probe(nets: dict, callbacks: dict, x: Any, y: Any, fits: int) -> None:
    print("probe: traces in a later fit of one epoch (profiled); then the callback's hooks in "
          f"ms in {fits} more (not profiled)")
    for name in callbacks:
        profile = cProfile.Profile()
        profile.enable()
        nets[name].fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[callbacks[name]])
        profile.disable()
        traces = sum(stats[1] for key, stats in pstats.Stats(profile).stats.items()
                     if key[2] == "_create_concrete_function")
        print(f"  {name:<30} traces {traces}")
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

"""Tiny trainings under a `tf.distribute` strategy, for tests/frameworks/test_distribute.py.

    python distribute_worker.py mirrored OUT     # MirroredStrategy over two logical CPUs
    python distribute_worker.py multiworker OUT  # one worker of MultiWorkerMirroredStrategy
                                                 # (the cluster comes from TF_CONFIG)

Runs in a process of its own where nothing has run on TensorFlow yet (the tests fork it from
their preloaded fork server): logical devices must be configured before TensorFlow
initializes its devices, and a worker reads TF_CONFIG when its strategy is created. Every
scenario logs into OUT/<scenario>, the same directory on every worker (as user code that
does not care which worker it runs on would), and the process saves OUT/worker<task>.json:
its pid, whether it is the chief, and per scenario the initial weights and the numpy
reference ratios of each step, from the weights before and after it; for the scenario
"fit_stop" (a NaN batch, the callback with stop_on={"nan"}) the flags the worker's callback
fired and the optimizer steps its `fit` made. The tests import the training functions to run
the same training on one device.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from helpers import reference_ratio
from tb_wur_plugin import wur_summary
from tb_wur_plugin.keras import WeightUpdateRatioCallback

GLOBAL_BATCH = 8
CUSTOM_STEPS = 3
FIT_EPOCHS, FIT_UPDATE_FREQ = 2, 2  # 16 samples: 2 steps per epoch, steps 0 and 2 logged


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.normal(size=(16, 4)).astype("float32"),
        rng.normal(size=(16, 2)).astype("float32"),
    )


def make_model(weights=None) -> keras.Model:
    """A two-layer model; call it in the strategy's scope."""
    keras.utils.set_random_seed(0)
    hidden, out = keras.layers.Dense(3, name="hidden"), keras.layers.Dense(2, name="out")
    model = keras.Sequential([keras.Input((4,)), hidden, out], name="net")
    if weights is not None:
        model.set_weights(weights)
    return model


def _weights(model) -> dict[str, np.ndarray]:
    return {v.path: v.numpy() for v in model.trainable_variables}


def train_custom(strategy, logdir, usage, weights=None, histograms=False) -> dict:
    """CUSTOM_STEPS steps of a custom loop with `wur_summary.watch` where `usage` says:
    "inside" the replica function around `optimizer.apply_gradients`, or "around"
    `strategy.run` in cross-replica context; a "_eager" suffix runs the step without
    `tf.function`. Each global batch of GLOBAL_BATCH rows is split evenly over the replicas,
    in order. Returns the initial weights and {tag: {step: numpy reference ratio}}."""
    with strategy.scope():
        model = make_model(weights)
        optimizer = keras.optimizers.Adam(1e-2)
        optimizer.build(model.trainable_variables)
    initial = [w.tolist() for w in model.get_weights()]
    x, y = data()
    per_replica = GLOBAL_BATCH // strategy.num_replicas_in_sync
    watch_inside = usage.startswith("inside")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            # the mean squared error of the global batch, whatever the replica's share
            loss = tf.reduce_sum(tf.square(model(x, training=True) - y)) / (GLOBAL_BATCH * 2)
        grads = tape.gradient(loss, model.trainable_variables)
        if watch_inside:
            with wur_summary.watch(
                model.trainable_variables, step=optimizer.iterations, histograms=histograms,
                optimizer=optimizer,  # its replicas' updates are not captured: compared
            ):
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        else:
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def step(x, y):
        if watch_inside:
            strategy.run(replica_step, args=(x, y))
        else:
            with wur_summary.watch(
                model.trainable_variables, step=optimizer.iterations, histograms=histograms,
                optimizer=optimizer,  # its replicas' updates are not captured: compared
            ):
                strategy.run(replica_step, args=(x, y))

    step_fn = step if usage.endswith("_eager") else tf.function(step)
    reference: dict[str, dict[int, float]] = {}
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for index in range(CUSTOM_STEPS):
            start = GLOBAL_BATCH * (index % 2)

            def shard(context, start=start):
                rows = slice(start + context.replica_id_in_sync_group * per_replica, None)
                return tf.constant(x[rows][:per_replica]), tf.constant(y[rows][:per_replica])

            before = _weights(model)
            step_fn(*strategy.experimental_distribute_values_from_function(shard))
            for path, new in _weights(model).items():
                reference.setdefault(path, {})[index] = reference_ratio(before[path], new)
    writer.close()
    return {"initial": initial, "reference": reference}


class _Reference(keras.callbacks.Callback):
    """Numpy reference ratios of the updates at the steps the callback logs."""

    def __init__(self):
        super().__init__()
        self.reference: dict[str, dict[int, float]] = {}

    def on_train_batch_begin(self, batch, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        self.before = _weights(self.model)

    def on_train_batch_end(self, batch, logs=None):
        if self.step % FIT_UPDATE_FREQ == 0:
            for path, new in _weights(self.model).items():
                ratio = reference_ratio(self.before[path], new)
                self.reference.setdefault(path, {})[self.step] = ratio


def train_fit(strategy, logdir, weights=None) -> dict:
    """`model.fit` with `WeightUpdateRatioCallback(logdir, update_freq=FIT_UPDATE_FREQ)`,
    batches of GLOBAL_BATCH rows in order (Keras splits each over the replicas)."""
    with strategy.scope():
        model = make_model(weights)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    initial = [w.tolist() for w in model.get_weights()]
    x, y = data()
    reference = _Reference()
    model.fit(
        x, y, batch_size=GLOBAL_BATCH, epochs=FIT_EPOCHS, shuffle=False, verbose=0,
        callbacks=[reference, WeightUpdateRatioCallback(logdir, update_freq=FIT_UPDATE_FREQ)],
    )
    return {"initial": initial, "reference": reference.reference}


STOP_NAN_STEP = 3  # the NaN batch of `train_fit_stop`


def train_fit_stop(strategy, logdir) -> dict:
    """`model.fit` over one epoch of 8 batches whose batch of step STOP_NAN_STEP is NaN, with
    `WeightUpdateRatioCallback(logdir, update_freq=1, stop_on={"nan"})`: the flags its
    callback fired and the steps the `fit` made."""
    with strategy.scope():
        model = make_model()
        model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
    x, y = data()
    x = np.concatenate([x] * 4)  # 8 batches of GLOBAL_BATCH
    y = np.concatenate([y] * 4)
    x[STOP_NAN_STEP * GLOBAL_BATCH:(STOP_NAN_STEP + 1) * GLOBAL_BATCH] = np.nan
    callback = WeightUpdateRatioCallback(logdir, update_freq=1, stop_on={"nan"})
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[callback])
    return {
        "flags": [dataclasses.asdict(flag) for flag in callback.flags],
        "iterations": int(model.optimizer.iterations.numpy()),
    }


def _work_around_keras_multi_worker_reduce(strategy) -> None:
    """Keras 3's TensorFlow trainer calls `strategy.reduce` on nested batches
    (`_maybe_symbolic_build`) and with `axis=0` on scalar losses (`reduce_per_replica`),
    which `MultiWorkerMirroredStrategy` rejects: without this, `model.fit` fails under it,
    with or without our callback. Reduce leaf by leaf, scalars without an axis."""
    reduce = strategy.reduce

    def reduce_leaves(reduce_op, value, axis=None):
        def leaf(v):
            rank = strategy.experimental_local_results(v)[0].shape.rank
            return reduce(reduce_op, v, axis=None if rank == 0 else axis)

        return tf.nest.map_structure(leaf, value)

    strategy.reduce = reduce_leaves


def main(kind: str, out: str) -> None:
    if kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        task = 0
        scenarios = ["inside", "around", "inside_eager"]
    elif kind == "multiworker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        _work_around_keras_multi_worker_reduce(strategy)
        task = strategy.cluster_resolver.task_id
        scenarios = ["inside", "around"]
    else:
        raise SystemExit(f"unknown strategy {kind!r}")
    results = {
        scenario: train_custom(
            strategy, os.path.join(out, scenario), scenario, histograms=scenario == "inside"
        )
        for scenario in scenarios
    }
    results["fit"] = train_fit(strategy, os.path.join(out, "fit"))
    if kind == "multiworker":
        results["fit_stop"] = train_fit_stop(strategy, os.path.join(out, "fit_stop"))
    with open(os.path.join(out, f"worker{task}.json"), "w") as f:
        json.dump(
            {
                "pid": os.getpid(),
                "chief": bool(strategy.extended.should_save_summary),
                "replicas": strategy.num_replicas_in_sync,
                "scenarios": results,
            },
            f,
        )


if __name__ == "__main__":
    main(*sys.argv[1:])

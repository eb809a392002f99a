"""Fits a small Keras model compiled with steps_per_execution=3 with
WeightUpdateRatioCallback on the backend KERAS_BACKEND names, and prints one JSON line. Run
by tests/frameworks/test_keras_backends.py:

    KERAS_BACKEND=jax python tests/support/keras_steps_per_execution_worker.py LOGDIR

jax: one fit per update_freq in EVERY, each into LOGDIR/every<N>/train; the model's train
step is wrapped so that every step, also inside an execution, hands the weights before and
after its update to numpy (`jax.debug.callback`): the JSON holds, per update_freq, the
numpy ratios and histogram counts of the steps 0, N, 2N, ... and the number of steps run.

torch: the errors of a fit with steps_per_execution=2 (Keras's own), and of a fit whose
model was set to steps_per_execution=2 after its train function was made (the callback's).
"""

from __future__ import annotations

import json
import os
import sys

EVERY = (1, 2, 3, 4, 7)
STEPS_PER_EXECUTION = 3
NAN_STEP = 4


def _model(keras):
    seeded = keras.initializers.GlorotUniform
    return keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(6, activation="relu", name="first", kernel_initializer=seeded(1)),
        keras.layers.Dense(1, name="head", kernel_initializer=seeded(2)),
    ], name="net")


def _data(np):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(16, 4)).astype("float32"),
            rng.normal(size=(16, 1)).astype("float32"))


def _ratio(old, new) -> float:
    import numpy as np

    old64, new64 = old.astype(np.float64), new.astype(np.float64)
    update, weight = np.sqrt(np.sum((new64 - old64) ** 2)), np.sqrt(np.sum(old64 ** 2))
    if update == 0:
        return 0.0
    return float("inf") if weight == 0 else float(update / weight)


def _jax(logdir: str) -> dict:
    import jax
    import keras
    import numpy as np

    from tb_wur_plugin.arrays import numpy_math
    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    x, y = _data(np)
    results = {}
    for every in EVERY:
        model = _model(keras)
        schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1,
                                                               decay_rate=0.9)
        model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9), loss="mse",
                      steps_per_execution=STEPS_PER_EXECUTION)
        paths = [v.path for v in model.trainable_variables]
        iterations = next(i for i, v in enumerate(model.optimizer.variables)
                          if v is model.optimizer.iterations)
        records: dict[int, list] = {}

        def keep(kind, step, values, records=records):
            entry = records.setdefault(int(step), [None, None])
            entry[kind] = [np.array(v, copy=True) for v in values]

        original = model.train_step

        def train_step(state, data, original=original, keep=keep, iterations=iterations):
            step = state[2][iterations]
            jax.debug.callback(lambda s, v: keep(0, s, v), step, state[0])
            logs, state_after = original(state, data)
            jax.debug.callback(lambda s, v: keep(1, s, v), step, state_after[0])
            return logs, state_after

        model.train_step = train_step
        callback = WeightUpdateRatioCallback(os.path.join(logdir, f"every{every}"),
                                             update_freq=every, histograms=True)
        # 16 samples / 2 = 8 steps per epoch, executions of 3, 3 and 2 steps
        model.fit(x, y, batch_size=2, epochs=3, verbose=0, shuffle=False,
                  callbacks=[callback])
        jax.effects_barrier()
        ratios, counts = {}, {}
        for step, (before, after) in records.items():
            if step % every:
                continue
            for path, old, new in zip(paths, before, after):
                ratios.setdefault(path, {})[step] = _ratio(old, new)
                delta = new - old
                with np.errstate(divide="ignore", invalid="ignore"):
                    elementwise = np.abs(np.where(delta == 0, 0, delta / old))
                counts.setdefault(path, {})[step] = numpy_math.bucket_counts(
                    elementwise.astype(old.dtype)).tolist()
        results[every] = {
            "ratios": ratios, "counts": counts, "recorded_steps": sorted(records),
            "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            "train_step_restored": model.train_function is not None
            and model.train_function.__name__ != "stepwise",
        }
    results["interrupted"] = _interrupted(keras, np, os.path.join(logdir, "interrupted"))
    results["stopped"] = _stopped(keras, np, os.path.join(logdir, "stopped"))
    return results


def _stopped(keras, np, logdir: str) -> dict:
    """A fit with stop_on={"nan"} whose batch of step NAN_STEP (in the execution of steps 3
    to 5) is NaN: the steps made and the flags."""
    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    x, y = _data(np)
    x[2 * NAN_STEP:2 * (NAN_STEP + 1)] = np.nan
    model = _model(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse",
                  steps_per_execution=STEPS_PER_EXECUTION)
    callback = WeightUpdateRatioCallback(logdir, update_freq=1, stop_on={"nan"})
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, shuffle=False, callbacks=[callback])
    return {"iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
            "flags": sorted((f.tag, f.reason, f.step) for f in callback.flags)}


def _interrupted(keras, np, logdir: str) -> dict:
    """A fit with the callback that raises after its first execution, then a fit without:
    the train function each runs, the steps made and the steps logged."""
    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    class RaiseAtBatch(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch >= 3:
                raise RuntimeError("stop here")

    x, y = _data(np)
    model = _model(keras)
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=3)
    callback = WeightUpdateRatioCallback(logdir, update_freq=2)
    try:
        model.fit(x, y, batch_size=4, verbose=0, callbacks=[callback, RaiseAtBatch()])
    except RuntimeError:
        pass
    left = model.train_function.__name__
    model.fit(x, y, batch_size=4, verbose=0)
    return {"left": left, "after": model.train_function.__name__,
            "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations))}


def _torch(logdir: str) -> dict:
    import keras
    import numpy as np

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    x, y = _data(np)
    errors = {}
    model = _model(keras)
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    try:
        model.fit(x, y, batch_size=4, verbose=0,
                  callbacks=[WeightUpdateRatioCallback(os.path.join(logdir, "keras"))])
    except ValueError as error:
        errors["keras"] = str(error)
    model = _model(keras)
    model.compile(optimizer="sgd", loss="mse")
    model.make_train_function()
    model.steps_per_execution = 2
    try:
        model.fit(x, y, batch_size=4, verbose=0,
                  callbacks=[WeightUpdateRatioCallback(os.path.join(logdir, "callback"))])
    except ValueError as error:
        errors["callback"] = str(error)
    errors["files"] = sorted(
        os.path.relpath(os.path.join(root, name), logdir)
        for root, _, names in os.walk(logdir) for name in names
    )
    return errors


def main() -> None:
    logdir = sys.argv[1]
    import keras

    run = {"jax": _jax, "torch": _torch}[keras.backend.backend()]
    print(json.dumps({"backend": keras.backend.backend(), "result": run(logdir)}))


if __name__ == "__main__":
    main()

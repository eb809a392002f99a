"""Fits a small Keras model with WeightUpdateRatioCallback on the backend KERAS_BACKEND
names (jax or torch), beside a numpy reference, and prints what the test compares as one
JSON line. Run by tests/frameworks/test_keras_backends.py:

    KERAS_BACKEND=jax python tests/support/keras_backend_worker.py LOGDIR OPTIMIZER

It writes LOGDIR/train. No TensorFlow is imported by this script; it reports which
TensorFlow modules were loaded and by whom.
"""

from __future__ import annotations

import json
import sys
import threading


def _tf_modules() -> set[str]:
    return {name for name in sys.modules if name == "tensorflow" or name.startswith("tensorflow.")}


class _TensorFlowImportWitness:
    """A meta-path finder that finds nothing and remembers where the first few attempts to
    find `tensorflow` came from (an import, or a probe such as `importlib.util.find_spec`):
    the frames of the stack in keras, tensorboard and tb_wur_plugin."""

    def __init__(self):
        self.stacks = []

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" and len(self.stacks) < 4:
            import traceback

            self.stacks.append([
                f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
                for frame in traceback.extract_stack()
                if any(part in frame.filename for part in ("keras", "tensorboard", "tb_wur_plugin"))
            ])
        return None


def main() -> None:
    logdir, optimizer_name = sys.argv[1], sys.argv[2]
    witness = _TensorFlowImportWitness()
    sys.meta_path.insert(0, witness)
    import keras
    import numpy as np

    from_keras = _tf_modules()
    before = set(sys.modules)
    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    ours = {name for name in set(sys.modules) - before if "tensorflow" in name.split(".")[0]}
    from tb_wur_plugin.arrays import numpy_math

    every = 3

    def _seeded(seed):
        return keras.initializers.GlorotUniform(seed=seed)

    class Block(keras.layers.Layer):
        """A nested layer: two Dense sublayers and a variable of its own."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.inner = keras.layers.Dense(5, activation="tanh", name="inner",
                                            kernel_initializer=_seeded(2))
            self.outer = keras.layers.Dense(3, name="outer", kernel_initializer=_seeded(3))

        def build(self, shape):
            self.inner.build(shape)
            self.outer.build((shape[0], 5))
            self.gain = self.add_weight(shape=(3,), initializer="ones", name="gain")

        def call(self, x):
            return self.outer(self.inner(x)) * self.gain

    # (not keras.utils.set_random_seed, which imports TensorFlow to seed it where installed)
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(6, activation="relu", name="first", kernel_initializer=_seeded(1)),
        Block(name="block"),
        keras.layers.Dense(1, name="head", kernel_initializer=_seeded(4)),
    ])
    optimizer = {
        "momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
        "adam": lambda: keras.optimizers.Adam(1e-2),
    }[optimizer_name]()
    model.compile(optimizer=optimizer, loss="mse")

    class Reference(keras.callbacks.Callback):
        """Weights copied at each batch's beginning and each epoch's end only (no batch-end
        hook): numpy ratios and histograms of the updates at steps 0, every, 2·every, ..."""

        def __init__(self):
            super().__init__()
            self.ratios, self.counts, self.rates, self.last = {}, {}, {}, None

        def on_train_batch_begin(self, batch, logs=None):
            self._observe()

        def on_epoch_end(self, epoch, logs=None):
            self._observe()

        def _observe(self):
            model = self.model  # on JAX, syncs the trained state into the variables
            step = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
            weights = {v.path: np.array(keras.ops.convert_to_numpy(v), copy=True)
                       for v in model.trainable_variables}
            if self.last is not None:
                last_step, last = self.last
                if step == last_step + 1 and last_step % every == 0:
                    for path, old in last.items():
                        new = weights[path]
                        old64, new64 = old.astype(np.float64), new.astype(np.float64)
                        self.ratios.setdefault(path, {})[last_step] = float(
                            np.sqrt(np.sum((new64 - old64) ** 2)) / np.sqrt(np.sum(old64 ** 2)))
                        delta = new - old  # float32, as on the device
                        with np.errstate(divide="ignore", invalid="ignore"):
                            elementwise = np.abs(np.where(delta == 0, 0, delta / old))
                        self.counts.setdefault(path, {})[last_step] = (
                            numpy_math.bucket_counts(elementwise.astype(old.dtype)).tolist())
            if step % every == 0:
                self.rates[step] = float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
            self.last = (step, weights)

    class ThreadProbe(keras.callbacks.Callback):
        async_safe = True  # does not itself stop asynchronous dispatch

        def __init__(self):
            super().__init__()
            self.threads = set()

        def on_train_batch_end(self, batch, logs=None):
            self.threads.add(threading.get_ident())

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 1)).astype("float32")
    reference, probe = Reference(), ThreadProbe()
    callback = WeightUpdateRatioCallback(logdir, update_freq=every, histograms=True)
    callbacks = [reference, callback, probe]
    asynchronous = keras.callbacks.CallbackList(callbacks, model=model)._async_train
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False, callbacks=callbacks)
    print(json.dumps({
        "backend": keras.backend.backend(),
        "tags": [v.path for v in model.trainable_variables],
        "ratios": reference.ratios,
        "counts": reference.counts,
        "rates": reference.rates,
        "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "tf_loaded_by_keras": sorted(from_keras),
        "tf_loaded_by_tb_wur_plugin_keras": sorted(ours),
        "tf_loaded_after_fit": bool(_tf_modules()),
        "tf_import_attempts": witness.stacks,
        "async_train": asynchronous,
        "batch_ends_off_main_thread": bool(probe.threads)
        and threading.get_ident() not in probe.threads,
    }))


if __name__ == "__main__":
    main()

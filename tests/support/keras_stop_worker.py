"""Fits a small Keras model on the backend KERAS_BACKEND names (jax or torch) with
`WeightUpdateRatioCallback(update_freq=1, spectral=True, stop_on={"nan"})` on data whose
batch of step NAN_STEP is NaN, and prints as one JSON line what the test compares: the steps
the `fit` made, the callback's flags, those passed to `on_flag`, the messages of the
`tb_wur_plugin` logger. Run by tests/frameworks/test_keras_backends.py:

    KERAS_BACKEND=jax python tests/support/keras_stop_worker.py LOGDIR NAN_STEP

It writes LOGDIR/train.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main() -> None:
    logdir, nan_step = sys.argv[1], int(sys.argv[2])
    import keras
    import numpy as np

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    told = _Messages()
    logging.getLogger("tb_wur_plugin").addHandler(told)

    def _seeded(seed):
        return keras.initializers.GlorotUniform(seed=seed)

    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(6, activation="tanh", name="hidden", kernel_initializer=_seeded(1)),
        keras.layers.Dense(1, name="out", kernel_initializer=_seeded(2)),
    ], name="net")
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")  # 8 batches of 4
    y = rng.normal(size=(32, 1)).astype("float32")
    x[4 * nan_step:4 * (nan_step + 1)] = np.nan
    seen = []
    callback = WeightUpdateRatioCallback(logdir, update_freq=1, spectral=True,
                                         stop_on={"nan"}, on_flag=seen.append)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False, callbacks=[callback])
    print(json.dumps({
        "backend": keras.backend.backend(),
        "iterations": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "flags": [dataclasses.asdict(flag) for flag in callback.flags],
        "on_flag": [dataclasses.asdict(flag) for flag in seen],
        "told": told.messages,
    }))


if __name__ == "__main__":
    main()

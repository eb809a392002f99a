"""Trains a tiny model, logging every step's ratios, until the test kills it with SIGKILL.

    python tests/support/train_until_killed.py callback LOGDIR  # the callback, its defaults
    python tests/support/train_until_killed.py watch LOGDIR     # watch in a custom loop, one
                                                                # writer block, flush_millis=100

Each step sleeps a little, so that a test that waits for a few logged steps kills it long
before MAX_STEPS; after MAX_STEPS (below the plugin's 10,000 kept steps per tag, should the
test be slow to kill it) it stops training and waits to be killed.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_wur_plugin import wur_summary  # noqa: E402
from tb_wur_plugin.keras import WeightUpdateRatioCallback  # noqa: E402

STEP_SECONDS = 0.002
MAX_STEPS = 5000


class Pace(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(STEP_SECONDS)


def main(mode: str, logdir: str) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, name="hidden"), keras.layers.Dense(1, name="out")]
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 1)).astype("float32")
    optimizer = keras.optimizers.SGD(1e-3)
    print("training", flush=True)
    if mode == "callback":
        model.compile(optimizer=optimizer, loss="mse")
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        callback = WeightUpdateRatioCallback(logdir, update_freq=1)
        # One long epoch: no end-of-epoch flush helps; each logged step is flushed.
        model.fit(data, steps_per_epoch=MAX_STEPS, epochs=1, verbose=0, callbacks=[callback, Pace()])
        time.sleep(3600)
        return

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    writer = tf.summary.create_file_writer(logdir, flush_millis=100)
    with writer.as_default():  # one block: flushed by max_queue and flush_millis only
        for _ in range(MAX_STEPS):
            train_step()
            time.sleep(STEP_SECONDS)
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""Keras models, optimizers and a numpy reference callback for the tests of the TensorFlow
writers (importing this module imports Keras, hence TensorFlow on its default backend)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from helpers import reference_ratio

# The optimizers the ratio tests train with, by name (SGD's lr is 0.1: a test relies on it).
OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(1e-2),
    "adamw": lambda: keras.optimizers.AdamW(1e-2, weight_decay=0.5),
}


def mixed_model_and_data(seed: int = 0):
    """A model with Dense, Conv2D, BatchNormalization, Embedding and LSTM layers, and a batch."""
    keras.utils.set_random_seed(seed)
    image = keras.Input((8, 8, 1), name="image")
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    seen = keras.layers.Conv2D(4, 3, name="conv")(image)
    seen = keras.layers.BatchNormalization(name="norm")(seen)
    seen = keras.layers.Flatten()(seen)
    read = keras.layers.Embedding(20, 4, name="embed")(tokens)
    read = keras.layers.LSTM(5, name="lstm")(read)
    merged = keras.layers.Concatenate()([seen, read])
    output = keras.layers.Dense(3, name="head")(merged)
    model = keras.Model([image, tokens], output, name="mixed")
    rng = np.random.default_rng(seed)
    x = [
        rng.normal(size=(16, 8, 8, 1)).astype("float32"),
        rng.integers(0, 20, size=(16, 6)).astype("int32"),
    ]
    y = rng.normal(size=(16, 3)).astype("float32")
    return model, x, y


def apply_non_finite_gradients(optimizer, variables) -> None:
    """One optimizer step whose gradients are not finite (+inf in the first element of the
    first gradient, zeros elsewhere), as an overflowing float16 backward pass gives them.
    A `LossScaleOptimizer` skips it: weights and `iterations` stay, the loss scale halves.
    For testing what is logged for a skipped step, e.g. inside `wur_summary.watch`."""
    variables = list(variables)
    grads = [np.zeros(v.shape, v.dtype) for v in variables]
    grads[0].reshape(-1)[0] = np.inf
    optimizer.apply([tf.constant(g) for g in grads], variables)


class ReferenceRatios(keras.callbacks.Callback):
    """Saves the weights around every step; numpy ratios of the updates at steps 0, N, 2N..."""

    def __init__(self, every):
        super().__init__()
        self.every = every
        self.expected = {}
        self.skipped = []

    def on_train_batch_begin(self, batch, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        self.before = {v.path: v.numpy() for v in self.model.trainable_variables}

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.skipped.append(self.step)
            return
        if self.step % self.every == 0:
            for v in self.model.trainable_variables:
                if v.path not in self.before:  # created during this step
                    continue
                self.expected[(v.path, self.step)] = reference_ratio(
                    self.before[v.path], v.numpy()
                )


def record_every_step(model) -> dict[int, tuple[dict, dict]]:
    """Wrap `model.train_step` (TensorFlow backend, not XLA-compiled) so that every step,
    also inside an execution of `steps_per_execution` > 1, copies the trainable weights to
    numpy before and after its update: returns {step: (before, after)}, each {path: array},
    filled while the model trains (step: `optimizer.iterations` before the update)."""
    records: dict[int, tuple[dict, dict]] = {}
    variables = list(model.trainable_variables)
    paths = [v.path for v in variables]
    original = model.train_step

    def keep(kind, step, *values):
        entry = records.setdefault(int(step), ({}, {}))[kind]
        entry.update({p: np.array(v, copy=True) for p, v in zip(paths, values)})
        return tf.constant(0)

    def train_step(data):
        step = tf.identity(model.optimizer.iterations)
        tf.py_function(lambda s, *v: keep(0, s, *v), [step, *map(tf.convert_to_tensor, variables)],
                       Tout=tf.int32)
        outputs = original(data)
        tf.py_function(lambda s, *v: keep(1, s, *v), [step, *map(tf.convert_to_tensor, variables)],
                       Tout=tf.int32)
        return outputs

    model.train_step = train_step
    return records

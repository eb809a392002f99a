"""Test helpers: an independent reader of event files and numpy reference ratios."""

from __future__ import annotations

import collections
import json
import os

import keras
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

from tb_wur_plugin import metadata


def read_events(logdir: str) -> dict[str, list[tuple[int, np.ndarray, dict]]]:
    """tag -> [(step, value, plugin content)] of the wur series in the event files of `logdir`
    (any path `tf.io.gfile` reads, e.g. `ram://...`)."""
    series = collections.defaultdict(list)
    contents = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    contents[value.tag] = value.metadata
                meta = contents.get(value.tag)
                if meta is None or meta.plugin_data.plugin_name != metadata.PLUGIN_NAME:
                    continue
                content = json.loads(meta.plugin_data.content)
                stored = tensor_util.make_ndarray(value.tensor)
                if content["kind"] == metadata.KIND_HISTOGRAM:
                    stored = metadata.decode_histogram(stored)
                series[value.tag].append((event.step, stored, content))
    return dict(series)


def ratio_series(logdir: str) -> dict[str, dict[int, float]]:
    """tag -> {step: ratio} of the ratio series in `logdir`."""
    return {
        tag: {step: float(value) for step, value, _ in points}
        for tag, points in read_events(logdir).items()
        if points[0][2]["kind"] == metadata.KIND_RATIO
    }


def reference_ratio(before: np.ndarray, after: np.ndarray) -> float:
    """‖after − before‖ / ‖before‖ in float64, with the contract's special values."""
    old = np.asarray(before, dtype=np.float64)
    new = np.asarray(after, dtype=np.float64)
    if not (np.all(np.isfinite(old)) and np.all(np.isfinite(new))):
        return float("nan")
    weight = np.sqrt(np.sum(old**2))
    update = np.sqrt(np.sum((new - old) ** 2))
    if update == 0:
        return 0.0
    if weight == 0:
        return float("inf")
    return float(update / weight)


def reference_buckets(values: np.ndarray) -> np.ndarray:
    """Bucket counts by the protocol's rules, computed with float64 log10 (no searchsorted)."""
    counts = np.zeros(metadata.NUM_BUCKETS, dtype=np.int64)
    for x in np.asarray(values, dtype=np.float64).ravel():
        if np.isnan(x) or x < 0:
            counts[metadata.NAN_BUCKET] += 1
        elif x == 0:
            counts[metadata.ZERO_BUCKET] += 1
        elif np.isinf(x):
            counts[metadata.INF_BUCKET] += 1
        elif x < 10.0**metadata.LOG10_MIN:
            counts[metadata.UNDERFLOW_BUCKET] += 1
        elif x >= 10.0**metadata.LOG10_MAX:
            counts[metadata.OVERFLOW_BUCKET] += 1
        else:
            k = int(np.floor((np.log10(x) - metadata.LOG10_MIN) * metadata.BINS_PER_DECADE))
            counts[metadata.FIRST_BIN + k] += 1
    return counts


# The optimizers the ratio tests train with, by name (SGD's lr is 0.1: a test relies on it).
OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda: keras.optimizers.Adam(1e-2),
    "adamw": lambda: keras.optimizers.AdamW(1e-2, weight_decay=0.5),
}


def assert_ratios_close(actual: dict, expected: dict, rtol: float) -> None:
    """Compare {key: ratio} dicts, where inf must match inf and NaN must match NaN.

    Ratios are summed in float32 (relative error about 1e-7) and stored as float32 (6e-8):
    rtol=5e-7 allows both."""
    assert set(actual) == set(expected), (sorted(actual), sorted(expected))
    for key, want in expected.items():
        got = actual[key]
        if np.isnan(want) or np.isinf(want):
            assert np.isnan(got) if np.isnan(want) else got == want, (key, got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, err_msg=str(key))


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

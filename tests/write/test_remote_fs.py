"""Logdirs on filesystems TensorFlow reaches through `tf.io.gfile` (gs://, hdfs://, ...).

Tested with TensorFlow's in-memory `ram://` filesystem, which lives inside one process: the
events are written there by `watch` and by the callback, read back with TensorBoard's own
event reader, and served by the plugin over TensorBoard's Python loader in this process.
(The `tensorboard` command cannot see another process's `ram://`, and its fast loader reads
local files and gs:// only.)
"""

import csv
import io
import json
import os
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf

from backend import Backend
from helpers import assert_ratios_close, ratio_series, reference_ratio
from keras_helpers import ReferenceRatios
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.keras import WeightUpdateRatioCallback


@pytest.fixture
def ram_logdir():
    root = f"ram://wur-{uuid.uuid4().hex}"
    assert not tf.io.gfile.exists(root)
    yield root + "/logs"
    if tf.io.gfile.exists(root):
        tf.io.gfile.rmtree(root)


def test_this_tensorflow_has_the_ram_filesystem(ram_logdir):
    tf.io.gfile.makedirs(ram_logdir)
    assert tf.io.gfile.isdir(ram_logdir)
    with tf.io.gfile.GFile(f"{ram_logdir}/probe", "w") as f:
        f.write("x")
    assert tf.io.gfile.exists(f"{ram_logdir}/probe")
    assert not os.path.exists(ram_logdir) and not os.path.exists("ram:")


def _model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="a"), keras.layers.Dense(2, name="b")],
        name="net",
    )


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")


def _logged(logdir):
    return {(tag, step): r for tag, points in ratio_series(logdir).items() for step, r in points.items()}


def _watch_run(logdir):
    """Three steps under watch, eagerly then in a tf.function; the numpy reference ratios."""
    model, (x, y) = _model(), _data()
    optimizer = keras.optimizers.Adam(1e-2)

    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    expected = {}
    writer = tf.summary.create_file_writer(logdir)
    for step, fn in enumerate([train_step, tf.function(train_step), tf.function(train_step)]):
        before = {v.path: v.numpy() for v in model.trainable_variables}
        with writer.as_default():
            fn()
        for v in model.trainable_variables:
            expected[(v.path, step)] = reference_ratio(before[v.path], v.numpy())
    writer.close()
    return expected


def test_watch_writes_to_a_gfile_path(ram_logdir):
    expected = _watch_run(ram_logdir)
    files = tf.io.gfile.glob(f"{ram_logdir}/events.out.tfevents.*")
    assert len(files) == 1
    assert_ratios_close(_logged(ram_logdir), expected, rtol=5e-7)
    # tf's own reader agrees with TensorBoard's on what was written: the layers of the
    # packed series (their tags in the metadata of each packed tag's first event)
    layers = {
        layer.tag
        for event in tf.compat.v1.train.summary_iterator(files[0])
        for v in event.summary.value if v.HasField("metadata")
        for layer in metadata.packed_layers(
            metadata.parse_plugin_content(v.metadata.plugin_data.content))
    }
    assert {tag for tag, _ in expected} <= layers


def test_the_callback_writes_to_a_gfile_path(ram_logdir):
    model, (x, y) = _model(), _data()
    model.compile(optimizer="adam", loss="mse")
    reference = ReferenceRatios(every=2)
    callback = WeightUpdateRatioCallback(ram_logdir, update_freq=2)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[reference, callback])
    assert callback.log_dir == ram_logdir
    assert tf.io.gfile.isdir(f"{ram_logdir}/train")
    logged = _logged(f"{ram_logdir}/train")
    assert {step for _, step in logged} == {0, 2, 4, 6}
    assert_ratios_close(logged, reference.expected, rtol=5e-7)


def test_the_plugin_serves_a_gfile_logdir(ram_logdir):
    expected = _watch_run(f"{ram_logdir}/run1")
    backend = Backend(ram_logdir)
    runs = backend.json("runs")["runs"]
    assert [r["run"] for r in runs] == ["run1"]
    exported = json.loads(backend.get("export", run="run1", format="json").get_data())
    got = {(tag, step): float(ratio) for tag, rows in exported.items() for _, step, ratio in rows}
    assert_ratios_close(got, expected, rtol=5e-7)
    rows = list(csv.reader(io.StringIO(backend.get("export", run="run1", format="csv").get_data(as_text=True))))
    assert rows[0] == ["tag", "step", "wall_time", "ratio"] and len(rows) == 1 + len(expected)

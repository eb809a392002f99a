"""Sparse updates: an Embedding trained from `tf.IndexedSlices` gradients.

The ratios must match numpy's, and a logged step must not hold more dense copies of a big
embedding than needed. Memory is measured in a subprocess by TensorFlow's BFC allocator
(tests/support/measure_sparse_memory.py), deterministic with one inter-op thread.

Note: once a variable has been read or written sparsely (a gather, a scatter), TensorFlow
copies it on every dense read ("copy-on-read mode"): the bare step's forward pass already
copies the embedding once, and so does each of watch's reads (the snapshot, the weights
after the update).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import assert_ratios_close, ratio_series, reference_ratio
from keras_helpers import ReferenceRatios
from measure_sparse_memory import embedding_model
from suite_paths import ROOT, SUPPORT
from tb_wur_plugin import wur_summary
from tb_wur_plugin.keras import WeightUpdateRatioCallback

ROWS, WIDTH = 50_000, 64


def _model_and_data():
    model = embedding_model(ROWS, WIDTH)
    rng = np.random.default_rng(0)
    x = rng.integers(0, ROWS, size=(32, 8)).astype("int32")
    y = rng.normal(size=(32, 1)).astype("float32")
    return model, x, y


def _logged(logdir):
    return {(tag, step): r for tag, points in ratio_series(logdir).items() for step, r in points.items()}


OPTIMIZERS = {"sgd": lambda: keras.optimizers.SGD(0.5), "adam": lambda: keras.optimizers.Adam(1e-2)}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_watch_ratios_of_sparse_updates_match_numpy(logdir, name):
    model, x, y = _model_and_data()
    optimizer = OPTIMIZERS[name]()
    variables = model.trainable_variables
    kinds = []

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, variables)
        kinds.append([type(g).__name__ for g in grads])  # at tracing
        with wur_summary.watch(variables, step=optimizer.iterations):
            optimizer.apply_gradients(zip(grads, variables))

    expected, changed_rows = {}, []
    batches = [x, (x + 1) % ROWS, x]  # other rows at step 1
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for step, batch in enumerate(batches):
            before = [v.numpy() for v in variables]
            train_step(batch)
            for v, old in zip(variables, before):
                expected[(v.path, step)] = reference_ratio(old, v.numpy())
            changed_rows.append(np.flatnonzero(np.any(before[0] != variables[0].numpy(), axis=1)))
    writer.close()
    assert kinds[0][0] == "IndexedSlices"
    if name == "sgd":  # only the rows looked up move
        assert all(set(rows) == set(np.unique(b)) for rows, b in zip(changed_rows, batches))
        assert len(changed_rows[0]) < ROWS // 100
    assert_ratios_close(_logged(logdir), expected, rtol=5e-7)


def test_the_callback_with_sparse_updates_matches_numpy(logdir):
    model, x, y = _model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    reference = ReferenceRatios(every=2)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[reference, WeightUpdateRatioCallback(logdir, update_freq=2)])
    logged = _logged(os.path.join(logdir, "train"))
    assert {step for _, step in logged} == {0, 2}
    assert_ratios_close(logged, reference.expected, rtol=5e-7)


# --- peak memory --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def peak_memory():
    """{optimizer: {step kind: peak rise in units of the embedding's bytes}}, measured in
    one process after the other: two at once competing for the CPU changed the order of the
    ops, and so the peak (Adam's logged step: +1.00 instead of +0.01 in 2 of 12 runs with
    four at once, 0 of 8 alone)."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": ROOT}
    results = {}
    for name in ("sgd", "adam"):
        process = subprocess.run(
            [sys.executable, os.path.join(SUPPORT, "measure_sparse_memory.py"), name],
            capture_output=True, env=env, text=True, timeout=300,
        )
        assert process.returncode == 0, process.stderr[-3000:]
        results[name] = json.loads(process.stdout.strip().splitlines()[-1])
    return results


@pytest.mark.alone  # peaks measured with no other test competing for the CPU
def test_a_logged_sparse_step_holds_one_copy_beyond_the_bare_step(peak_memory):
    """The snapshot is one dense copy (see the module note); Δw and the read after the update
    are held one variable at a time (measured: SGD +1.00, Adam +0.00 under its own dense
    moments; before the overflow check recomputed Δw instead of holding it, Adam gave +1.00
    in 3 of 4 runs when processes competed for the CPU). When nothing moved the sums are
    taken again, scaled, from Δw computed again, which holds Δw and Δw/m at once (measured
    +1.00, +2.00 possible by op order).
    With optimizer=, Adam's dense update is captured: +0.01 in 8 of 9 runs, +1.01 in one
    (the captured Δw lives until its sum runs, which the op order decides), within the
    issue's bound of one copy for any optimizer. SGD's sparse update is not captured, so it
    is compared with the snapshot as without. A float64 copy would exceed these bounds."""
    sgd, adam = peak_memory["sgd"], peak_memory["adam"]
    assert 0.9 < sgd["bare"] < 1.1  # the forward pass's copy-on-read of the embedding
    assert sgd["logged"] - sgd["bare"] <= 1.1, peak_memory
    assert sgd["logged_from_optimizer"] - sgd["bare"] <= 1.1, peak_memory
    assert sgd["logged_no_change"] - sgd["bare"] <= 2.1, peak_memory
    assert adam["logged"] - adam["bare"] <= 0.1, peak_memory
    assert adam["logged_from_optimizer"] - adam["bare"] <= 1.1, peak_memory

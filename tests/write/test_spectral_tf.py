"""Spectral update ratios ‖ΔW‖₂ / ‖W‖₂ of the TensorFlow writers and the Keras callback
against numpy's SVD (`np.linalg.norm(M, 2)` of the kernel viewed as (prod(kernel) · in, out),
float64) on real training steps of Embedding, Conv2D and Dense layers, read back from the
event files: `wur_summary.watch(spectral=True)` traced under a writer, eagerly and under a
tensor `record_if`; `WeightUpdateRatioCallback(spectral=True)` on Keras's TensorFlow backend
here and on its JAX and PyTorch backends in a subprocess each (this file run as a script).

    KERAS_BACKEND=jax python tests/write/test_spectral_tf.py LOGDIR   # the worker
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
ROOT = os.path.dirname(os.path.dirname(SUPPORT))
sys.path.insert(0, SUPPORT)
sys.path.insert(0, ROOT)

TOLERANCE = 1e-3  # the contract's: relative to numpy's SVD
UPDATE_FREQ = 3
STEPS = 16  # 2 epochs of 8 batches: logged steps 0, 3, ..., 15


def reference(before: np.ndarray, after: np.ndarray) -> float:
    """‖after − before‖₂ / ‖before‖₂ of the Keras matrix view, by numpy's SVD in float64."""
    w = np.asarray(before, np.float64)
    w = w.reshape(-1, w.shape[-1])
    u = np.asarray(after, np.float64).reshape(w.shape) - w
    return float(np.linalg.norm(u, 2) / np.linalg.norm(w, 2))


def build_model(keras):
    """Embedding (50 x 8), Conv2D (3 x 3 x 1 x 4) and Dense (96 x 10) kernels, seeded."""
    init = keras.initializers.GlorotUniform
    return keras.Sequential([
        keras.Input((6,), dtype="int32"),
        keras.layers.Embedding(50, 8, embeddings_initializer=keras.initializers.RandomNormal(
            stddev=0.3, seed=1), name="embed"),
        keras.layers.Reshape((6, 8, 1)),
        keras.layers.Conv2D(4, 3, kernel_initializer=init(seed=2), name="conv"),
        keras.layers.Flatten(),
        keras.layers.Dense(10, kernel_initializer=init(seed=3), name="dense"),
    ])


def data():
    rng = np.random.default_rng(0)
    return rng.integers(0, 50, (64, 6)).astype("int32"), rng.integers(0, 10, 64)


def fit_with_references(logdir: str) -> dict[str, dict[int, float]]:
    """Fit `build_model` (AdamW) with the spectral callback for STEPS steps, beside a callback
    that copies the weights at batch begins; the reference ratio of each kernel at each
    logged step: {path: {step: ratio}}."""
    import keras

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    model = build_model(keras)
    model.compile(keras.optimizers.AdamW(1e-2), "sparse_categorical_crossentropy")
    snapshots: dict[int, list[np.ndarray]] = {}

    class Snapshots(keras.callbacks.Callback):
        def _take(self):
            step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            snapshots[step] = [np.array(keras.ops.convert_to_numpy(v.value), np.float64)
                               for v in self.model.trainable_variables]

        def on_train_batch_begin(self, batch, logs=None):
            self._take()

        def on_train_end(self, logs=None):
            self._take()

    x, y = data()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[
        Snapshots(), WeightUpdateRatioCallback(logdir, update_freq=UPDATE_FREQ, spectral=True)])
    expected: dict[str, dict[int, float]] = {}
    for step in range(0, STEPS, UPDATE_FREQ):
        for variable, before, after in zip(
                model.trainable_variables, snapshots[step], snapshots[step + 1]):
            if before.ndim >= 2:
                expected.setdefault(variable.path, {})[step] = reference(before, after)
    return expected


def assert_spectral_read_back(run_dir: str, expected: dict[str, dict[int, float]]) -> None:
    """The spectral series of `run_dir`: one per kernel of `expected`, at the steps of the
    ratios, each within TOLERANCE of numpy's SVD."""
    from helpers import read_packed

    run = read_packed(run_dir)
    assert sorted(run.spectral) == sorted(expected)  # biases have none
    for tag, points in run.spectral.items():
        assert [s for s, _ in points] == [s for s, _ in run.ratios[tag]]
        assert [s for s, _ in points] == sorted(expected[tag])
        for step, ratio in points:
            assert float(ratio) == pytest.approx(expected[tag][step], rel=TOLERANCE), (tag, step)


# --- wur_summary.watch -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["traced", "eager", "record_if"])
def test_watch_spectral(tmp_path, mode):
    """The recommended pattern (a step traced under the writer, another without), eager
    steps, and one traced step under a tensor `record_if` (a conditional snapshot); logged
    steps 0, 4, 8, with SGD's momentum updates; the second and third warm-started."""
    import keras
    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    model = build_model(keras)
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    x, y = data()
    logging = tf.Variable(False)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                y, model(x, training=True), from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations,
                               optimizer=optimizer, spectral=True):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    plain, logged = tf.function(train_step), tf.function(train_step)
    writer = tf.summary.create_file_writer(str(tmp_path))
    expected: dict[str, dict[int, float]] = {}
    for step in range(10):
        batch = (x[8 * (step % 8):][:8], y[8 * (step % 8):][:8])
        before = [v.numpy() for v in model.trainable_variables]
        logs = step % 4 == 0
        if mode == "record_if":
            logging.assign(logs)
            with writer.as_default(), tf.summary.record_if(lambda: logging):
                logged(*batch)
        elif logs:
            with writer.as_default():
                (train_step if mode == "eager" else logged)(*batch)
        else:
            plain(*batch)
        if logs:
            for variable, old in zip(model.trainable_variables, before):
                if old.ndim >= 2:
                    expected.setdefault(variable.path, {})[step] = reference(
                        old, variable.numpy())
    writer.close()
    assert_spectral_read_back(str(tmp_path), expected)


def test_watch_spectral_marks_a_skipped_step_and_leaves_vectors_alone(tmp_path):
    """An update that changes nothing: spectral ratio 0 at the step, marked skipped like the
    ratios; spectral=False writes no spectral series; a bad value is refused."""
    import keras
    import tensorflow as tf

    from helpers import read_packed
    from tb_wur_plugin import wur_summary

    kernel = keras.Variable(np.eye(4, 3), dtype="float32", name="kernel")
    bias = keras.Variable(np.ones(3), dtype="float32", name="bias")
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        with wur_summary.watch([kernel, bias], step=0, spectral=True):
            kernel.assign_add(tf.ones([4, 3]) * 0.1)
        with wur_summary.watch([kernel, bias], step=1, spectral=True):
            pass
        with wur_summary.watch([kernel, bias], step=2):
            kernel.assign_add(tf.ones([4, 3]))
        with pytest.raises(TypeError, match="spectral"):
            with wur_summary.watch([kernel], step=3, spectral="yes"):
                pass
    writer.close()
    run = read_packed(str(tmp_path))
    (tag,) = run.spectral
    assert tag == kernel.path
    steps = [s for s, _ in run.spectral[tag]]
    assert steps == [0, 1]
    assert float(run.spectral[tag][0][1]) == pytest.approx(
        reference(np.eye(4, 3), np.eye(4, 3) + 0.1), rel=TOLERANCE)
    assert run.spectral[tag][1] == (1, 0.0)
    assert run.skipped[:2] == [(0, 0.0), (1, 1.0)]


def test_tf_kernel_gram_iterations_and_conventions():
    """The kernel (`tf_write.spectral.spectral_ratios`) on matrices iterated on their Gram
    matrices, together by the Gram matrices' shape (tall, wide and convolution views;
    rank-one and rank-two updates), and on a matrix of many columns both ways (the matrix
    iterations): ratios within the tolerance of numpy's SVD, cold then warm; 0 for ΔW = 0,
    +inf for W = 0 ≠ ΔW, NaN for a non-finite ΔW or W."""
    import tensorflow as tf

    from tb_wur_plugin.arrays import spectral
    from tb_wur_plugin.tf_write.spectral import spectral_ratios, warm_vectors

    rng = np.random.default_rng(7)
    shapes = [(9, 8), (27, 8), (8, 27), (3, 3, 2, 8), (200, 16), (16, 200), (64, 64),
              (64, 1), (1, 5), (600, 700)]
    weights, updates = [], []
    for i, shape in enumerate(shapes):
        weights.append(rng.standard_normal(shape))
        rows, columns = spectral.matrix_shape(shape, spectral.TRAILING_FAN_OUT)
        rank = i % 2 + 1
        updates.append(sum(np.outer(rng.standard_normal(rows), rng.standard_normal(columns))
                           for _ in range(rank)).reshape(shape) * 1e-3)
    assert not spectral.uses_gram(spectral.oriented((600, 700)))
    not_finite = np.ones((6, 3))
    not_finite[1, 1] = np.nan
    weights += [rng.standard_normal((5, 4)), np.zeros((5, 4)), rng.standard_normal((6, 3)),
                np.full((7, 3), np.inf)]
    updates += [np.zeros((5, 4)), np.ones((5, 4)), not_finite, np.ones((7, 3))]
    variables = [tf.Variable(w, dtype=tf.float32) for w in weights]
    vectors = warm_vectors(variables)
    for scale in (1.0, 1.5):  # cold, then warm (the same directions, another size)
        got = spectral_ratios(
            [tf.constant(w, tf.float32) for w in weights], variables,
            [tf.constant(u * scale, tf.float32) for u in updates], vectors).numpy()
        expected = [reference(w, w + u * scale) for w, u in zip(weights[:-4], updates[:-4])]
        np.testing.assert_allclose(got[:-4], expected, rtol=TOLERANCE)
        assert got[-4] == 0.0 and got[-3] == np.inf
        assert np.isnan(got[-2]) and np.isnan(got[-1])


# --- the Keras callback ------------------------------------------------------------------


def test_keras_callback_spectral_tensorflow_backend(tmp_path):
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("this process runs Keras on another backend")
    expected = fit_with_references(str(tmp_path))
    assert_spectral_read_back(str(tmp_path / "train"), expected)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_keras_callback_spectral_array_backends(tmp_path, backend):
    pytest.importorskip(backend)
    env = {**os.environ, "KERAS_BACKEND": backend, "CUDA_VISIBLE_DEVICES": "",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([ROOT, SUPPORT])}
    worker = subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(tmp_path)], env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    report = json.loads(worker.stdout.strip().splitlines()[-1])
    assert report["backend"] == backend
    expected = {tag: {int(s): r for s, r in steps.items()}
                for tag, steps in report["expected"].items()}
    assert_spectral_read_back(str(tmp_path / "train"), expected)


if __name__ == "__main__":
    import keras

    print(json.dumps({"backend": keras.backend.backend(),
                      "expected": fit_with_references(sys.argv[1])}))

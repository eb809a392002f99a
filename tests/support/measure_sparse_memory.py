"""Peak memory of a training step of an Embedding model, with and without `watch` logging.

    TF_CPU_ALLOCATOR_USE_BFC=true python tests/support/measure_sparse_memory.py sgd|adam

Prints one JSON object: the peak rise of TensorFlow's CPU allocator above its use before the
step, in units of the embedding's bytes (median of 3), for the bare step ("bare"), a logged
step ("logged"), one with `optimizer=` ("logged_from_optimizer") and, for SGD, a logged
step of an update that moves nothing ("logged_no_change"). The embedding has 65,536 x 64
float32 weights: 16 MiB, a size the BFC allocator does not round.
TensorFlow needs TF_CPU_ALLOCATOR_USE_BFC=true at start-up to report peaks; one inter-op
thread makes the order of ops, and so the peak, the same in every run.
"""

import json
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_wur_plugin import wur_summary  # noqa: E402

ROWS, WIDTH = 65_536, 64


def peak_rise(fn) -> int:
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    fn()
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


def embedding_model(rows: int, width: int) -> keras.Model:
    """Embedding (rows x width) -> mean over 8 ids -> Dense(1), seeded: its embedding is
    trained from `tf.IndexedSlices` gradients."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((8,), dtype="int32"),
        keras.layers.Embedding(rows, width, name="embed"),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(1, name="head"),
    ])


def main(optimizer_name: str) -> None:
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = embedding_model(ROWS, WIDTH)
    optimizer = {"sgd": lambda: keras.optimizers.SGD(0.1),
                 "adam": lambda: keras.optimizers.Adam(1e-3)}[optimizer_name]()
    optimizer.build(model.trainable_variables)
    x = tf.constant(np.random.default_rng(0).integers(0, ROWS, size=(32, 8)), tf.int32)
    y = tf.ones([32, 1])
    variables = model.trainable_variables

    def body(scale, from_optimizer=False):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, variables)
        assert isinstance(grads[0], tf.IndexedSlices), type(grads[0])
        grads = [tf.IndexedSlices(g.values * scale, g.indices, g.dense_shape)
                 if isinstance(g, tf.IndexedSlices) else g * scale for g in grads]
        with wur_summary.watch(variables, step=optimizer.iterations,
                               optimizer=optimizer if from_optimizer else None):
            optimizer.apply_gradients(zip(grads, variables))

    bare = tf.function(lambda: body(1.0))  # called without a writer: watch adds no op
    logged = tf.function(lambda: body(1.0))
    logged_no_change = tf.function(lambda: body(0.0))
    logged_from_optimizer = tf.function(lambda: body(1.0, from_optimizer=True))
    writer = tf.summary.create_file_writer(tempfile.mkdtemp(prefix="wur-mem-"))

    def under_writer(fn):
        def run():
            with writer.as_default():
                fn()
        return run

    steps = {"bare": bare, "logged": under_writer(logged),
             "logged_from_optimizer": under_writer(logged_from_optimizer)}
    if optimizer_name == "sgd":  # zero gradients move nothing (Adam's moments still move)
        steps["logged_no_change"] = under_writer(logged_no_change)
    weight_bytes = ROWS * WIDTH * 4
    result = {}
    for name, fn in steps.items():
        fn()
        fn()
        result[name] = statistics.median(peak_rise(fn) for _ in range(3)) / weight_bytes
    writer.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])

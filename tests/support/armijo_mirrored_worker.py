"""`LineSearchModel` under `tf.distribute.MirroredStrategy` over two logical CPUs, for
tests/armijo/test_precision_distribution.py.

    python armijo_mirrored_worker.py OUT.json

Runs in a process of its own where nothing has run on TensorFlow yet (the test forks it from
its preloaded fork server): logical devices must be configured before TensorFlow initializes
its devices. For each scenario it fits the same model from the same weights on the same
global batches twice, under the strategy and on one device, and saves per run the step log
(step, step size, backtracks, loss, new loss), the final weights and, under the strategy,
whether every variable's replicas hold the same values (and how many copies it has). It also
records the error that another multi-replica strategy gets.
"""

from __future__ import annotations

import json
import sys

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()],
)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tb_wur_plugin import armijo  # noqa: E402

GLOBAL_BATCH, SAMPLES, EPOCHS = 10, 45, 2  # batches of 10 and a last one of 5: 3 + 2 a replica
SCENARIOS = {
    # The recommended variant, on a model with dropout and BatchNormalization, its search
    # made in the strategy's scope.
    "recommended": dict(kwargs=armijo.RECOMMENDED, layers="dropout_bn", search_in_scope=True),
    # The momentum variant (slots built by fit in the scope), its search made outside it.
    "momentum": dict(kwargs=dict(momentum=0.9, smoothing=0.9, c=0.5, beta=0.8, reset="keep",
                                 initial_step_size=20.0),
                     layers="dense", search_in_scope=False),
}


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 6)).astype("float32")
    y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")
    return x, y


def make_model(layers: str) -> keras.Model:
    keras.utils.set_random_seed(1)
    hidden = [keras.layers.Dense(8, activation="tanh")]
    if layers == "dropout_bn":
        hidden += [keras.layers.BatchNormalization(), keras.layers.Dropout(0.3)]
    return keras.Sequential([keras.Input((6,)), *hidden, keras.layers.Dense(1)])


def fit(strategy, scenario: dict, weights) -> dict:
    x, y = data()
    with strategy.scope():
        model = make_model(scenario["layers"])
        model.set_weights(weights)
        if scenario["search_in_scope"]:
            search = armijo.StochasticArmijo(**scenario["kwargs"])
    if not scenario["search_in_scope"]:
        search = armijo.StochasticArmijo(**scenario["kwargs"])
    with strategy.scope():
        trainer = armijo.LineSearchModel(model, search)
        trainer.compile(loss=keras.losses.BinaryCrossentropy(from_logits=True))
    keras.utils.set_random_seed(2)
    trainer.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    steps = int(trainer.optimizer.iterations.numpy())
    rows, missing = trainer._step_log.read(0, steps)
    local_results = [strategy.experimental_local_results(v.value) for v in model.variables]
    replicas_agree = all(
        all(np.array_equal(np.asarray(local), np.asarray(parts[0])) for local in parts)
        for parts in local_results
    )
    return {
        "rows": rows.tolist(),
        "missing": missing,
        "weights": [w.tolist() for w in model.get_weights()],
        "replicas_agree": replicas_agree,
        "copies": sorted({len(parts) for parts in local_results}),
        "replicas": strategy.num_replicas_in_sync,
    }


def main(out: str) -> None:
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {}
    for name, scenario in SCENARIOS.items():
        weights = make_model(scenario["layers"]).get_weights()
        results[name] = {
            "mirrored": fit(mirrored, scenario, weights),
            "one_device": fit(tf.distribute.get_strategy(), scenario, weights),
        }
    central = tf.distribute.experimental.CentralStorageStrategy(["/cpu:0", "/cpu:1"])
    try:
        with central.scope():
            armijo.LineSearchModel(make_model("dense"), armijo.StochasticArmijo())
        results["central_storage_error"] = None
    except ValueError as error:
        results["central_storage_error"] = str(error)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1])

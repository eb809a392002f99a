"""Train an MLP on scikit-learn's digits with the stochastic Armijo line search in model.fit,
logging its weight-update ratios (WeightUpdateRatioCallback) and the line search's step
sizes and backtracks into one TensorBoard run."""

import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits

from tb_wur_plugin import armijo
from tb_wur_plugin.keras import WeightUpdateRatioCallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="logs/armijo_fit")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    x, y = load_digits(return_X_y=True)
    x = ((x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.2),  # the trials of a step use the same dropout mask
        keras.layers.Dense(10),
    ])
    # Defaults of the reference (c=0.1, beta=0.9, gamma=2, reset="grow"); fit supplies
    # n_batches_per_epoch (its steps per epoch).
    trainer = armijo.LineSearchModel(model, armijo.StochasticArmijo())
    trainer.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    # The callback writes the ratios every 10 steps and, for a LineSearchModel, the line
    # search's step size, backtracks and losses of every step (at the number of updates
    # before it) into the same run, logs/armijo_fit/train. (No writer around fit: the
    # searched steps would then write these series a second time.)
    history = trainer.fit(
        x, y.astype("int32"), batch_size=32, epochs=args.epochs, verbose=2,
        callbacks=[WeightUpdateRatioCallback(args.logdir, update_freq=10)],
    )
    print(f"final loss {history.history['loss'][-1]:.4f}, accuracy "
          f"{history.history['accuracy'][-1]:.4f}, stored step size "
          f"{float(np.asarray(trainer.search.step_size)):.4g}")
    print(f"ratios and line search written to {args.logdir}/train; see them with: "
          f"tensorboard --logdir {args.logdir}")


if __name__ == "__main__":
    main()

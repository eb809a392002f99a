"""Log weight-update ratios from model.fit with WeightUpdateRatioCallback."""

import argparse

import keras

from digits import digits, small_convnet
from tb_wur_plugin.keras import WeightUpdateRatioCallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="logs/keras_fit")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    images, labels = digits()
    model = small_convnet()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(
        images, labels, batch_size=32, epochs=args.epochs, verbose=2,
        callbacks=[WeightUpdateRatioCallback(args.logdir, update_freq=10, histograms=True)],
    )
    print(f"ratios written to {args.logdir}/train; see them with: tensorboard --logdir {args.logdir}")


if __name__ == "__main__":
    main()

"""The demo: two trainings that differ only in learning rate, then the WUR tab in TensorBoard.

Trains a small convnet on scikit-learn's digits with SGD at learning rates 0.0003 and 0.1,
logging every 5th step's weight-update ratios with WeightUpdateRatioCallback into
LOGDIR/lr_0.0003/train and LOGDIR/lr_0.1/train, then serves TensorBoard on 127.0.0.1 and
prints the tab's URL. Running it again replaces the logs.
"""

import argparse
import shutil
import time

import keras
from tensorboard import program

from digits import digits, small_convnet
from tb_wur_plugin.keras import WeightUpdateRatioCallback

LEARNING_RATES = (0.0003, 0.1)


def train(logdir: str, learning_rate: float, epochs: int) -> None:
    keras.utils.set_random_seed(0)
    images, labels = digits()
    model = small_convnet()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(
        images, labels, batch_size=32, epochs=epochs, verbose=2,
        callbacks=[
            WeightUpdateRatioCallback(f"{logdir}/lr_{learning_rate}", update_freq=5,
                                      histograms=True),
            keras.callbacks.TensorBoard(f"{logdir}/lr_{learning_rate}"),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="logs/demo")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--port", type=int, default=6006)
    parser.add_argument("--no-serve", action="store_true", help="train only")
    args = parser.parse_args()

    shutil.rmtree(args.logdir, ignore_errors=True)
    for learning_rate in LEARNING_RATES:
        print(f"training with learning rate {learning_rate}")
        train(args.logdir, learning_rate, args.epochs)
    if args.no_serve:
        return
    board = program.TensorBoard()
    board.configure(logdir=args.logdir, host="127.0.0.1", port=args.port)
    url = board.launch()
    print(f"\nThe WUR tab: {url}#wur   (Ctrl-C stops TensorBoard)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

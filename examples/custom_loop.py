"""Log weight-update ratios from a custom training loop with wur_summary.watch.

The recommended pattern: one step body, traced twice. The logged steps (every
--log_every) run the trace made under the summary writer; all other steps run the trace
made without one, in which watch adds no op, so they cost exactly a bare training step.
"""

import argparse

import keras
import tensorflow as tf

from digits import digits, small_convnet
from tb_wur_plugin import wur_summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="logs/custom_loop")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--log_every", type=int, default=10)
    args = parser.parse_args()

    images, labels = digits()
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(2048).batch(32)
    model = small_convnet()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        # step: the number of updates applied before this one (0, 1, 2, ...)
        # optimizer: Δw is taken from its update instead of a second read of the weights
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations,
                               histograms=True, optimizer=optimizer):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    plain_step = tf.function(train_step)   # traced without a writer: no ratio ops
    logged_step = tf.function(train_step)  # traced under the writer: computes and writes

    writer = tf.summary.create_file_writer(args.logdir)
    for step, (x, y) in enumerate(dataset.repeat().take(args.steps)):
        if step % args.log_every == 0:
            with writer.as_default():
                loss = logged_step(x, y)
                wur_summary.learning_rate(optimizer.learning_rate, step=step)
                tf.summary.scalar("loss", loss, step=step)
        else:
            plain_step(x, y)
    writer.close()
    print(f"ratios written to {args.logdir}; see them with: tensorboard --logdir {args.logdir}")


if __name__ == "__main__":
    main()

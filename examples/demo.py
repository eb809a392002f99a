"""The demo: a healthy training next to one with a defect, then the WUR tab in TensorBoard.

Trains the same small convnet (`convnet`: five layers with a weight matrix) on
scikit-learn's digits twice, with Adam at learning rate 1e-3, logging the weight-update
ratios of every 5th step with `wur_summary.watch` from a custom training loop:

- LOGDIR/healthy: every layer at learning rate 1e-3;
- LOGDIR/slow_logits: the same, but the layer `logits` (its kernel and bias) is trained by a
  second optimizer whose learning rate is 1000x too small (1e-6), the kind of mistake a
  parameter group with a mistyped learning rate makes.

Both reach about the same accuracy on these easy digits (the other layers make up for the
nearly frozen one), so the loss hides the defect; the ratios show it: `logits/kernel` moves
~1,800x slower than the run's other kernels, and the default judgement (`tb-wur report`, the
tab's flags) flags it, as a slow outlier, and nothing else. (Its bias is not flagged: it
starts at zero, so its norm is the sum of its own updates, and its ratio is the same at any
learning rate.) Then serves TensorBoard on 127.0.0.1 and prints the tab's URL. Running it
again replaces the logs.

The console is kept free of TensorFlow's start-up notices (see `quiet_startup`).
"""

import argparse
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO and WARNING logs

LEARNING_RATE = 1e-3
SLOW_LAYER = "logits"
SLOW_FACTOR = 1000
LOG_EVERY = 5

# What TensorFlow prints on start-up, before absl's logging is initialised (so that no log
# level, TF_CPP_MIN_LOG_LEVEL included, applies to these lines): notices, not failures.
# Lines matching them are dropped; every other line printed during start-up is shown.
STARTUP_NOTICES = [re.compile(pattern) for pattern in (
    # absl's banner before the first of these lines
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    # oneDNN's notice (it mentions "floating-point round-off errors" of any parallel sum)
    r"^I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations are on\. ",
    # TensorFlow's CUDA-enabled wheel on a machine without an NVIDIA driver: it runs on the
    # CPU. The demo says so itself (see `device`).
    r"^I\d{4} [\d:. ]+\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, "
    r"GPU will not be used\.$",
    r"^E\d{4} [\d:. ]+\d+ cuda_platform\.cc:\d+\] failed call to cuInit: ",
)]


@contextlib.contextmanager
def quiet_startup() -> Iterator[None]:
    """Captures file descriptor 2 (TensorFlow's C++ code writes there, not to sys.stderr)
    while TensorFlow starts, then prints what was captured less `STARTUP_NOTICES`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines():
                if not any(notice.search(line) for notice in STARTUP_NOTICES):
                    print(line, file=sys.stderr)


with quiet_startup():
    import keras
    import numpy as np
    import tensorflow as tf

    GPUS = tf.config.list_physical_devices("GPU")  # initialises the devices (and CUDA)
    from tensorboard import program

from digits import digits  # noqa: E402
from tb_wur_plugin import wur_summary  # noqa: E402


def convnet() -> keras.Model:
    """Five layers with a weight matrix (two convolutions, three dense layers), so that each
    has enough peers: the judgement compares a layer with the median of the run's other
    layers of its kind, and with only two others one defect would drag that median too."""
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv_1"),
            keras.layers.Conv2D(32, 3, activation="relu", name="conv_2"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", name="hidden_1"),
            keras.layers.Dense(32, activation="relu", name="hidden_2"),
            keras.layers.Dense(10, name=SLOW_LAYER),
        ],
        name="digits",
    )


def device() -> str:
    if GPUS:
        return f"training on {len(GPUS)} GPU(s)"
    return "training on the CPU (TensorFlow found no GPU it can use)"


def tb_wur() -> str:
    """The path of this environment's `tb-wur` (e.g. `.venv/bin/tb-wur`: not on PATH unless
    the environment is activated)."""
    path = os.path.join(os.path.dirname(sys.executable), "tb-wur")
    relative = os.path.relpath(path)
    return relative if not relative.startswith(os.pardir) else path


def train(logdir: str, slow_factor: float, epochs: int) -> None:
    """Trains the convnet, `SLOW_LAYER` at learning rate LEARNING_RATE / slow_factor."""
    keras.utils.set_random_seed(0)  # the same initial weights and batches in both runs
    images, labels = digits()
    dataset = (
        tf.data.Dataset.from_tensor_slices((images, labels))
        .shuffle(len(images), seed=0).batch(32)
    )
    model = convnet()
    slow = model.get_layer(SLOW_LAYER).trainable_variables
    rest = [v for v in model.trainable_variables if all(v is not s for s in slow)]
    optimizer = keras.optimizers.Adam(LEARNING_RATE)
    slow_optimizer = keras.optimizers.Adam(LEARNING_RATE / slow_factor)  # a parameter group
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accuracy = keras.metrics.SparseCategoricalAccuracy()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, rest + slow)
        # one block around both updates: each variable's ratio is that of this step's
        # update, whichever optimizer made it; step = the updates applied before this one
        with wur_summary.watch(model.trainable_variables, step=optimizer.iterations,
                               histograms=True):
            optimizer.apply_gradients(zip(grads[:len(rest)], rest))
            slow_optimizer.apply_gradients(zip(grads[len(rest):], slow))
        accuracy.update_state(y, logits)
        return loss

    plain_step = tf.function(train_step)   # traced without a writer: no ratio ops
    logged_step = tf.function(train_step)  # traced under the writer: computes and writes

    writer = tf.summary.create_file_writer(logdir)
    step = 0
    for epoch in range(epochs):
        accuracy.reset_state()
        losses = []
        for x, y in dataset:
            if step % LOG_EVERY == 0:
                with writer.as_default():
                    loss = logged_step(x, y)
                    tf.summary.scalar("loss", loss, step=step)
            else:
                loss = plain_step(x, y)
            losses.append(float(loss))
            step += 1
        print(f"  epoch {epoch + 1:2d}/{epochs}: loss {np.mean(losses):.3f}, "
              f"accuracy {float(accuracy.result()):.3f}", flush=True)
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/demo")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--port", type=int, default=6006)
    parser.add_argument("--no-serve", action="store_true", help="train only")
    args = parser.parse_args()

    shutil.rmtree(args.logdir, ignore_errors=True)
    print(device(), flush=True)
    print(f"training {args.logdir}/healthy: every layer at learning rate {LEARNING_RATE}",
          flush=True)
    train(os.path.join(args.logdir, "healthy"), 1, args.epochs)
    print(f"training {args.logdir}/slow_{SLOW_LAYER}: the same, but layer {SLOW_LAYER!r} at "
          f"learning rate {LEARNING_RATE / SLOW_FACTOR:g} ({SLOW_FACTOR}x too small)",
          flush=True)
    train(os.path.join(args.logdir, f"slow_{SLOW_LAYER}"), SLOW_FACTOR, args.epochs)
    print(f"\nwhich layers are flagged, and why:  {tb_wur()} report {args.logdir}", flush=True)
    if args.no_serve:
        return
    board = program.TensorBoard()
    board.configure(logdir=args.logdir, host="127.0.0.1", port=args.port)
    url = board.launch()
    print(f"the WUR tab:  {url}#wur   (Ctrl-C stops TensorBoard)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

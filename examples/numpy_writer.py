"""Write weight-update ratios from any training code with tb_wur_plugin.writer.SummaryWriter.

`SummaryWriter` takes plain numbers and numpy arrays, so any training code that sees its
updates can fill the WUR tab. Here the training is numpy itself: a two-layer perceptron on
scikit-learn's digits, its gradients by hand, SGD with momentum 0.9 and a learning rate
halved every 200 steps. At steps 0, every, 2·every, ... it writes
- `add_ratios`: ‖Δw‖/‖w‖ of each parameter (its tag: `hidden/kernel`, `hidden/bias`,
  `logits/kernel`, `logits/bias`, rows of the tab in this order), Δw being the step's update;
- `add_histograms`: the elementwise ratios |Δw_i|/|w_i| (raw: the writer buckets them);
- `add_learning_rate`: the learning rate of the step.
The biases start at zero, so their ratio at step 0 is +inf (a zero weight that moves at its
first update: expected, not flagged). Needs numpy and scikit-learn only: no TensorFlow,
PyTorch or JAX.

    python examples/numpy_writer.py --logdir logs/numpy_writer
    tensorboard --logdir logs/numpy_writer    # the WUR tab
    tb-wur report logs/numpy_writer           # per layer: median and last ratio, flags
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits

from tb_wur_plugin.writer import SummaryWriter

LEARNING_RATE = 0.05
HALVED_EVERY = 200
MOMENTUM = 0.9


def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{tag: weights} of a perceptron 64 -> 64 (ReLU) -> 10: He-initialised kernels, zero
    biases."""
    return {
        "hidden/kernel": rng.normal(size=(64, 64)) * np.sqrt(2 / 64),
        "hidden/bias": np.zeros(64),
        "logits/kernel": rng.normal(size=(64, 10)) * np.sqrt(2 / 64),
        "logits/bias": np.zeros(10),
    }


def loss_and_gradients(params: dict[str, np.ndarray], images: np.ndarray,
                       labels: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """The mean cross-entropy of the batch and its gradient with respect to each parameter."""
    before_relu = images @ params["hidden/kernel"] + params["hidden/bias"]
    hidden = np.maximum(before_relu, 0)
    logits = hidden @ params["logits/kernel"] + params["logits/bias"]
    logits -= logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    loss = float(-np.log(probabilities[rows, labels]).mean())
    d_logits = probabilities
    d_logits[rows, labels] -= 1
    d_logits /= len(labels)
    d_hidden = (d_logits @ params["logits/kernel"].T) * (before_relu > 0)
    return loss, {
        "hidden/kernel": images.T @ d_hidden,
        "hidden/bias": d_hidden.sum(axis=0),
        "logits/kernel": hidden.T @ d_logits,
        "logits/bias": d_logits.sum(axis=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/numpy_writer")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps to train")
    parser.add_argument("--every", type=int, default=10, help="log every N-th step")
    args = parser.parse_args()

    data = load_digits()
    images, labels = data.data / 16.0, data.target  # 1,797 flattened 8x8 digits in [0, 1]
    rng = np.random.default_rng(0)
    params = init_params(rng)
    velocity = {tag: np.zeros_like(weights) for tag, weights in params.items()}

    with SummaryWriter(args.logdir) as writer:
        for step in range(args.steps):
            batch = rng.choice(len(labels), size=32, replace=False)
            loss, gradients = loss_and_gradients(params, images[batch], labels[batch])
            learning_rate = LEARNING_RATE * 0.5 ** (step // HALVED_EVERY)
            logged = step % args.every == 0
            ratios, elementwise = {}, {}
            for tag, weights in params.items():
                velocity[tag] = MOMENTUM * velocity[tag] + gradients[tag]
                update = -learning_rate * velocity[tag]
                if logged:  # before the update: ‖Δw‖/‖w‖ (+inf for a zero w that moves)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        ratios[tag] = np.linalg.norm(update) / np.linalg.norm(weights)
                        elementwise[tag] = np.abs(update) / np.abs(weights)
                weights += update
            if logged:
                writer.add_ratios(ratios, step)
                writer.add_histograms(elementwise, step)
                writer.add_learning_rate(learning_rate, step)

    print(f"{args.steps} steps: last loss {loss:.4f}")
    print(f"ratios written to {args.logdir}; see them with: tensorboard --logdir {args.logdir}"
          f" (or: tb-wur report {args.logdir})")


if __name__ == "__main__":
    main()

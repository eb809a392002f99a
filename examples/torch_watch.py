"""Log weight-update ratios from a PyTorch training loop with tb_wur_plugin.torch.watch.

Trains a small convnet on scikit-learn's digits with Adam. `watch` hooks the optimizer's
`step()`, so the loop below is a plain PyTorch loop: at every --every-th `optimizer.step()`
(steps 0, every, 2·every, ..., counted from the `watch` call) it writes, into LOGDIR, the
ratio ‖Δw‖/‖w‖ of every parameter that requires grad (tag: the name in
`model.named_parameters()` with '.' replaced by '/': `conv/weight`, `conv/bias`,
`hidden/weight`, ...), its elementwise histogram and the learning rate. The other steps cost
an integer comparison. No TensorFlow is loaded.

    python examples/torch_watch.py --logdir logs/torch_watch
    tensorboard --logdir logs/torch_watch     # the WUR tab
    tb-wur report logs/torch_watch            # per layer: median and last ratio, flags
"""

import argparse
import collections
from typing import Iterator

import numpy as np
import torch
from sklearn.datasets import load_digits

from tb_wur_plugin.torch import watch


def digits_batches(batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled batches of scikit-learn's 1,797 8x8 digits (scaled to [0, 1], shape
    (batch, 1, 8, 8)) and their labels, epoch after epoch without end."""
    data = load_digits()
    images = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(data.target, dtype=torch.int64)
    rng = np.random.default_rng(seed)
    while True:
        order = torch.from_numpy(rng.permutation(len(labels)))
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            yield images[batch], labels[batch]


def small_convnet() -> torch.nn.Module:
    """The Keras examples' convnet in PyTorch: a convolution and two dense layers."""
    return torch.nn.Sequential(collections.OrderedDict([
        ("conv", torch.nn.Conv2d(1, 16, 3)),
        ("conv_relu", torch.nn.ReLU()),
        ("flatten", torch.nn.Flatten()),
        ("hidden", torch.nn.Linear(16 * 6 * 6, 64)),
        ("hidden_relu", torch.nn.ReLU()),
        ("logits", torch.nn.Linear(64, 10)),
    ]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/torch_watch")
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps to train")
    parser.add_argument("--every", type=int, default=10, help="log every N-th step")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = small_convnet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    # The loop does not change: watch logs from the optimizer's step hooks.
    handle = watch(optimizer, model, args.logdir, every=args.every, histograms=True)
    correct = seen = 0
    for step, (x, y) in zip(range(args.steps), digits_batches(batch_size=32, seed=0)):
        logits = model(x)
        loss = loss_fn(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= args.steps - 50:  # the training accuracy of the last 50 batches
            correct += int((logits.argmax(1) == y).sum())
            seen += len(y)
    handle.remove()  # closes the writer watch opened from the path

    print(f"{args.steps} steps: last loss {loss.item():.4f}, "
          f"training accuracy {correct / seen:.3f} over the last {seen} examples")
    print(f"ratios written to {args.logdir}; see them with: tensorboard --logdir {args.logdir}"
          f" (or: tb-wur report {args.logdir})")


if __name__ == "__main__":
    main()

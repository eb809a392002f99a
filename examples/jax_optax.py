"""Log weight-update ratios from a JAX / optax training loop with tb_wur_plugin.jax.

Trains a two-layer perceptron (a pytree of plain dicts) on scikit-learn's digits with
optax's Adam. The jitted step returns the optax `updates` beside the new parameters: the
update is Δw itself, so no copy of the weights is taken. `log_update_ratios` writes, at
steps 0, every, 2·every, ..., the ratio ‖u‖/‖w‖ of every leaf (tag: the leaf's path joined
by '/': `hidden/kernel`, `hidden/bias`, `logits/kernel`, `logits/bias`), its elementwise
histogram and the learning rate, into a `tb_wur_plugin.writer.SummaryWriter` on LOGDIR; on
the other steps it returns at once. At the end, `update_ratios` gives the last step's ratios
as a dict. No TensorFlow is loaded. (The biases start at zero: their ratio at step 0 is
+inf, as the contract says, and not a flag: a zero weight that moves at its first update is
expected.)

    python examples/jax_optax.py --logdir logs/jax_optax
    tensorboard --logdir logs/jax_optax       # the WUR tab
    tb-wur report logs/jax_optax              # per layer: median and last ratio, flags
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

from tb_wur_plugin.jax import log_update_ratios, update_ratios
from tb_wur_plugin.writer import SummaryWriter

LEARNING_RATE = 1e-3


def init_params(key: jax.Array) -> dict:
    """A perceptron 64 -> 64 (ReLU) -> 10, He-initialised kernels, zero biases."""
    hidden_key, logits_key = jax.random.split(key)
    return {
        "hidden": {"kernel": jax.random.normal(hidden_key, (64, 64)) * jnp.sqrt(2 / 64),
                   "bias": jnp.zeros(64)},
        "logits": {"kernel": jax.random.normal(logits_key, (64, 10)) * jnp.sqrt(2 / 64),
                   "bias": jnp.zeros(10)},
    }


def loss_fn(params: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(images @ params["hidden"]["kernel"] + params["hidden"]["bias"])
    logits = hidden @ params["logits"]["kernel"] + params["logits"]["bias"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


optimizer = optax.adam(LEARNING_RATE)


@jax.jit
def train_step(params, opt_state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, updates, loss


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/jax_optax")
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps to train")
    parser.add_argument("--every", type=int, default=10, help="log every N-th step")
    args = parser.parse_args()

    data = load_digits()
    images = (data.data / 16.0).astype("float32")  # 1,797 flattened 8x8 digits in [0, 1]
    labels = data.target.astype("int32")
    rng = np.random.default_rng(0)
    params = init_params(jax.random.key(0))
    opt_state = optimizer.init(params)

    with SummaryWriter(args.logdir) as writer:
        for step in range(args.steps):
            batch = rng.choice(len(labels), size=32, replace=False)
            new_params, opt_state, updates, loss = train_step(
                params, opt_state, images[batch], labels[batch])
            # params: the values before the update; step: the number of updates before it
            log_update_ratios(writer, params, updates, step, every=args.every,
                              histograms=True, learning_rate=LEARNING_RATE)
            before, params = params, new_params

    # The same ratios as a dict, for a check of your own: here those of the last update.
    last = ", ".join(f"{tag} {ratio:.3g}" for tag, ratio in update_ratios(before, updates).items())
    print(f"{args.steps} steps: last loss {float(loss):.4f}; "
          f"the ratios of the last update: {last}")
    print(f"ratios written to {args.logdir}; see them with: tensorboard --logdir {args.logdir}"
          f" (or: tb-wur report {args.logdir})")


if __name__ == "__main__":
    main()

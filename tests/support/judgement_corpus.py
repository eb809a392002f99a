"""A corpus of real training runs for the default judgement (tb_wur_plugin/judgement/):
small models trained on real data (scikit-learn's digits, offline) or synthetic token
sequences, logged by the project's own writers — PyTorch `watch`, the Keras callback, JAX
`log_update_ratios` — at every step.

Healthy runs (every one must get no flag): SGD with and without momentum, Adam, AdamW,
learning-rate warm-up and decay to a small value, biases (zero-initialised and not),
BatchNorm, LayerNorm, embeddings, a run trained until its loss is about 0, in the three
frameworks. Sick runs each seed one defect; `expected` names exactly the layers that must be
flagged and the reason each must get.

`generate(logdir)` writes every run (name = the run's directory under `logdir`; Keras runs
write into `NAME/train`, as the callback does) and returns the specs; about a minute of CPU.
Used by tests/judgement/test_judgement.py and benchmarks/judgement.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable

import numpy as np

STEPS = 150  # updates per run (logged at every step)
SEED = 0


class _Writing:
    """What `generate` asks of the writers: `spectral`, passed to each (False by default:
    the Frobenius ratios only)."""

    spectral = False


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # the run as TensorBoard names it (Keras: NAME/train)
    framework: str
    what: str  # one line: the model, optimizer, schedule
    write: Callable[[str], None]  # writes the run into the given directory
    expected: dict  # {tag: reason} of the layers that must be flagged; {} for a healthy run

    @property
    def healthy(self) -> bool:
        return not self.expected


# --- data ------------------------------------------------------------------------------------


def digits(n: int = 512):
    """(x float32 [n, 64] scaled to [0, 1], y int64 [n]) from scikit-learn's digits."""
    from sklearn.datasets import load_digits

    data = load_digits()
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(data.target))[:n]
    return (data.data[order] / 16.0).astype(np.float32), data.target[order].astype(np.int64)


def tokens(n: int = 512, length: int = 12, vocab: int = 40):
    """Synthetic token sequences whose label (0-3) is which of 4 marker tokens occurs most."""
    rng = np.random.default_rng(SEED + 1)
    x = rng.integers(4, vocab, size=(n, length))
    y = rng.integers(0, 4, size=n)
    for i in range(n):
        x[i, rng.choice(length, 4, replace=False)] = y[i]
    return x.astype(np.int64), y.astype(np.int64)


# --- PyTorch -----------------------------------------------------------------------------------


def _torch():
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    return torch


def _torch_mlp(torch, norm: str | None = None, width: int = 32):
    nn = torch.nn
    layers: list = [nn.Linear(64, width)]
    if norm == "layernorm":
        layers.append(nn.LayerNorm(width))
    layers += [nn.ReLU(), nn.Linear(width, width)]
    if norm == "layernorm":
        layers.append(nn.LayerNorm(width))
    layers += [nn.ReLU(), nn.Linear(width, 10)]
    model = nn.Sequential(*layers)
    if norm == "zero_bias":
        for m in model:
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
    return model


def _torch_train(
    logdir, model, optimizer, x, y, steps=STEPS, batch=64, scheduler=None, poison_at=None,
    loss_fn=None,
):
    """Train with `tb_wur_plugin.torch.watch` logging every step."""
    torch = _torch()
    from tb_wur_plugin.torch import watch

    x, y = torch.as_tensor(x), torch.as_tensor(y)
    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    handle = watch(optimizer, model, logdir, every=1, spectral=_Writing.spectral)
    rng = np.random.default_rng(SEED)
    try:
        for step in range(steps):
            index = torch.as_tensor(rng.choice(len(y), min(batch, len(y)), replace=False))
            xb = x[index]
            if poison_at is not None and step >= poison_at:
                xb = xb.clone()
                xb[0, 0] = math.nan  # NaN inputs
            loss = loss_fn(model(xb), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
    finally:
        handle.remove()
    return float(loss.detach())


def torch_sgd(logdir):
    torch = _torch()
    model = _torch_mlp(torch)
    _torch_train(logdir, model, torch.optim.SGD(model.parameters(), lr=0.1), *digits())


def torch_sgd_momentum_converged(logdir):
    """Zero-initialised biases; full-batch SGD with momentum until the loss is about 0."""
    torch = _torch()
    model = _torch_mlp(torch, "zero_bias", width=64)
    x, y = digits(256)
    loss = _torch_train(logdir, model, torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9),
                        x, y, steps=400, batch=256)
    assert loss < 1e-3, f"the converged run did not converge: loss {loss}"


def torch_adam_layernorm(logdir):
    torch = _torch()
    model = _torch_mlp(torch, "layernorm")
    _torch_train(logdir, model, torch.optim.Adam(model.parameters(), lr=1e-3), *digits())


def torch_adamw_warmup_decay(logdir):
    """LayerNorm; AdamW, linear warm-up over 20 steps, then cosine decay to 1e-7."""
    torch = _torch()
    model = _torch_mlp(torch, "layernorm")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warm = 20

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        t = (step - warm) / (STEPS - warm)
        return max(0.5 * (1 + math.cos(math.pi * min(t, 1.0))), 1e-7 / 3e-3)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    _torch_train(logdir, model, optimizer, *digits(), scheduler=scheduler)


def _torch_bn_convnet(torch):
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(16)
            self.fc = nn.Linear(16 * 4, 10)

        def forward(self, x):
            x = x.view(-1, 1, 8, 8)
            x = torch.relu(self.bn1(self.conv1(x)))
            x = torch.nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 4)
            return self.fc(x.flatten(1))

    return Net()


def torch_batchnorm_sgd_momentum(logdir):
    torch = _torch()
    model = _torch_bn_convnet(torch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    _torch_train(logdir, model, optimizer, *digits())


class _Bag:  # an embedding model: mean of token embeddings, a hidden layer, logits
    def __new__(cls, torch, vocab=40, dim=16):
        nn = torch.nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(vocab, dim)
                self.hidden = nn.Linear(dim, 32)
                self.out = nn.Linear(32, 4)

            def forward(self, x):
                return self.out(torch.relu(self.hidden(self.embed(x).mean(1))))

        return Model()


def torch_embedding_adam(logdir):
    torch = _torch()
    model = _Bag(torch)
    _torch_train(logdir, model, torch.optim.Adam(model.parameters(), lr=3e-3), *tokens())


def torch_embedding_sgd(logdir):
    torch = _torch()
    model = _Bag(torch)
    _torch_train(logdir, model, torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9),
                 *tokens())


# the sick ones

def torch_frozen_group(logdir):
    """SGD with momentum; the middle layer's parameter group has learning rate 0."""
    torch = _torch()
    model = _torch_mlp(torch)
    frozen = list(model[2].parameters())
    rest = [p for p in model.parameters() if all(p is not f for f in frozen)]
    optimizer = torch.optim.SGD([{"params": rest}, {"params": frozen, "lr": 0.0}], lr=0.1,
                                momentum=0.9)
    _torch_train(logdir, model, optimizer, *digits())


def torch_slow_group(logdir):
    """Adam; the first layer's parameter group 1000x slower than the rest."""
    torch = _torch()
    model = _torch_mlp(torch)
    slow = list(model[0].parameters())
    rest = [p for p in model.parameters() if all(p is not s for s in slow)]
    optimizer = torch.optim.Adam([{"params": rest}, {"params": slow, "lr": 1e-6}], lr=1e-3)
    _torch_train(logdir, model, optimizer, *digits())


def torch_killed(logdir):
    """SGD at a learning rate far too high (50): the network is killed at once."""
    torch = _torch()
    model = _torch_mlp(torch)
    _torch_train(logdir, model, torch.optim.SGD(model.parameters(), lr=50.0), *digits(),
                 steps=40)


def torch_nan_inputs(logdir):
    """Adam; from step 60 every batch holds a NaN input."""
    torch = _torch()
    model = _torch_mlp(torch, "layernorm")
    _torch_train(logdir, model, torch.optim.Adam(model.parameters(), lr=1e-3), *digits(),
                 steps=80, poison_at=60)


def torch_one_layer_100x(logdir):
    """SGD; the middle layer's parameter group at 100x the learning rate of the rest."""
    torch = _torch()
    model = _torch_mlp(torch)
    hot = list(model[2].parameters())
    rest = [p for p in model.parameters() if all(p is not h for h in hot)]
    optimizer = torch.optim.SGD([{"params": rest}, {"params": hot, "lr": 1.0}], lr=0.01)
    _torch_train(logdir, model, optimizer, *digits())


# --- Keras (the callback, TensorFlow backend) ---------------------------------------------


def _keras_fit(logdir, model, optimizer, x, y, epochs, batch=64):
    import keras

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    keras.utils.set_random_seed(SEED)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, shuffle=True,
              callbacks=[WeightUpdateRatioCallback(logdir, update_freq=1,
                                                   spectral=_Writing.spectral)])


def keras_adam_mlp(logdir):
    import keras

    keras.utils.set_random_seed(SEED)
    x, y = digits()
    model = keras.Sequential([
        keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax"),
    ])
    _keras_fit(logdir, model, keras.optimizers.Adam(1e-3), x, y, epochs=STEPS // 8)


def keras_convnet_batchnorm_sgd_momentum(logdir):
    import keras

    keras.utils.set_random_seed(SEED)
    x, y = digits()
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(8, 3, padding="same", use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.Conv2D(16, 3, padding="same", use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, activation="softmax"),
    ])
    _keras_fit(logdir, model, keras.optimizers.SGD(0.05, momentum=0.9), x.reshape(-1, 8, 8, 1),
               y, epochs=STEPS // 8)


def keras_layernorm_embedding_adamw_decay(logdir):
    import keras

    keras.utils.set_random_seed(SEED)
    x, y = tokens()
    schedule = keras.optimizers.schedules.CosineDecay(
        1e-4, decay_steps=STEPS - 20, alpha=1e-4, warmup_target=3e-3, warmup_steps=20
    )
    model = keras.Sequential([
        keras.Input((x.shape[1],), dtype="int32"), keras.layers.Embedding(40, 16),
        keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(32, activation="relu"),
        keras.layers.LayerNormalization(), keras.layers.Dense(4, activation="softmax"),
    ])
    _keras_fit(logdir, model, keras.optimizers.AdamW(schedule, weight_decay=0.01), x, y,
               epochs=STEPS // 8)


def keras_nan_inputs(logdir):
    """Adam; a NaN among the inputs (feature 0 of a third of the samples). tanh, not relu: a
    CPU kernel may take relu(NaN) as 0 (oneDNN on some x86 machines) and stop the NaN in the
    first layer, another passes it on; tanh(NaN) is NaN everywhere, so the NaN reaches the
    loss and every layer's update on any machine."""
    import keras

    keras.utils.set_random_seed(SEED)
    x, y = digits()
    x = x.copy()
    x[::3, 0] = math.nan
    model = keras.Sequential(name="nan_inputs", layers=[
        keras.Input((64,)), keras.layers.Dense(32, activation="tanh", name="hidden"),
        keras.layers.Dense(10, activation="softmax", name="out"),
    ])
    _keras_fit(logdir, model, keras.optimizers.Adam(1e-3), x, y, epochs=2)


# --- JAX / optax ---------------------------------------------------------------------------


def _jax_mlp_params(jax, sizes=(64, 32, 32, 10)):
    keys = jax.random.split(jax.random.PRNGKey(SEED), len(sizes))
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"dense_{i}"] = {
            "kernel": jax.random.normal(keys[i], (a, b)) * math.sqrt(2.0 / a),
            "bias": jax.numpy.zeros((b,)),
        }
    return params


def _jax_train(logdir, optimizer, steps=STEPS, params=None):
    import jax
    import jax.numpy as jnp
    import optax

    from tb_wur_plugin.jax import log_update_ratios
    from tb_wur_plugin.writer import SummaryWriter

    params = params or _jax_mlp_params(jax)
    x, y = digits()
    n_layers = len(params)

    def loss_fn(p, xb, yb):
        h = xb
        for i in range(n_layers):
            h = h @ p[f"dense_{i}"]["kernel"] + p[f"dense_{i}"]["bias"]
            if i < n_layers - 1:
                h = jax.nn.relu(h)
        return optax.softmax_cross_entropy_with_integer_labels(h, yb).mean()

    @jax.jit
    def update(p, state, xb, yb):
        grads = jax.grad(loss_fn)(p, xb, yb)
        updates, state = optimizer.update(grads, state, p)
        return updates, state

    state = optimizer.init(params)
    rng = np.random.default_rng(SEED)
    with SummaryWriter(logdir) as writer:
        for step in range(steps):
            index = rng.choice(len(y), 64, replace=False)
            updates, state = update(params, state, jnp.asarray(x[index]), jnp.asarray(y[index]))
            log_update_ratios(writer, params, updates, step, spectral=_Writing.spectral)
            params = optax.apply_updates(params, updates)


def jax_adam(logdir):
    import optax

    _jax_train(logdir, optax.adam(1e-3))


def jax_sgd_exponential_decay(logdir):
    """Plain SGD, the learning rate decayed exponentially from 0.2 to 2e-5."""
    import optax

    _jax_train(logdir, optax.sgd(optax.exponential_decay(0.2, STEPS, 1e-4)))


def jax_slow_group(logdir):
    """Adam; the first layer (kernel and bias) 1000x slower than the rest (optax
    multi_transform)."""
    import optax

    import jax

    params = _jax_mlp_params(jax)
    labels = {k: {"kernel": "slow" if k == "dense_0" else "rest",
                  "bias": "slow" if k == "dense_0" else "rest"} for k in params}
    _jax_train(logdir, optax.multi_transform(
        {"rest": optax.adam(1e-3), "slow": optax.adam(1e-6)}, labels), params=params)


def jax_frozen_layer(logdir):
    """Adam; the last layer frozen (optax.set_to_zero)."""
    import optax

    import jax

    params = _jax_mlp_params(jax)
    labels = {k: {"kernel": "frozen" if k == "dense_2" else "rest",
                  "bias": "frozen" if k == "dense_2" else "rest"} for k in params}
    _jax_train(logdir, optax.multi_transform(
        {"rest": optax.adam(1e-3), "frozen": optax.set_to_zero()}, labels), params=params)


# --- the corpus ----------------------------------------------------------------------------

_MLP_T = ("0/weight", "0/bias", "2/weight", "2/bias", "4/weight", "4/bias")
_MLP_J = tuple(f"dense_{i}/{p}" for i in range(3) for p in ("kernel", "bias"))

RUNS = [
    Run("torch_sgd", "pytorch", "MLP, SGD lr 0.1", torch_sgd, {}),
    Run("torch_sgd_momentum_converged", "pytorch",
        "MLP with zero-initialised biases, full-batch SGD momentum 0.9 until loss < 1e-3",
        torch_sgd_momentum_converged, {}),
    Run("torch_adam_layernorm", "pytorch", "MLP with LayerNorm, Adam 1e-3",
        torch_adam_layernorm, {}),
    Run("torch_adamw_warmup_decay", "pytorch",
        "MLP with LayerNorm, AdamW 3e-3, warm-up 20 steps, cosine decay to 1e-7",
        torch_adamw_warmup_decay, {}),
    Run("torch_batchnorm_sgd_momentum", "pytorch",
        "convnet with BatchNorm, SGD 0.05 momentum 0.9, weight decay", torch_batchnorm_sgd_momentum, {}),
    Run("torch_embedding_adam", "pytorch", "embedding bag + MLP, Adam 3e-3",
        torch_embedding_adam, {}),
    Run("torch_embedding_sgd", "pytorch", "embedding bag + MLP, SGD 0.5 momentum 0.9",
        torch_embedding_sgd, {}),
    Run("keras_adam_mlp/train", "keras", "MLP, Adam 1e-3", keras_adam_mlp, {}),
    Run("keras_convnet_batchnorm_sgd_momentum/train", "keras",
        "convnet with BatchNorm, SGD 0.05 momentum 0.9", keras_convnet_batchnorm_sgd_momentum, {}),
    Run("keras_layernorm_embedding_adamw_decay/train", "keras",
        "embedding + LayerNorm, AdamW, warm-up to 3e-3 then cosine decay to 3e-7",
        keras_layernorm_embedding_adamw_decay, {}),
    Run("jax_adam", "jax", "MLP with zero biases, optax Adam 1e-3", jax_adam, {}),
    Run("jax_sgd_exponential_decay", "jax", "MLP, optax SGD 0.2 decayed to 2e-5",
        jax_sgd_exponential_decay, {}),
    # seeded defects
    Run("torch_frozen_group", "pytorch", "MLP, SGD momentum; layer 2's group at lr 0",
        torch_frozen_group, {"2/weight": "not_moving", "2/bias": "not_moving"}),
    Run("torch_slow_group", "pytorch", "MLP, Adam 1e-3; layer 0's group at 1e-6 (1000x slower)",
        torch_slow_group, {"0/weight": "slow_outlier", "0/bias": "slow_outlier"}),
    Run("torch_killed", "pytorch", "MLP, SGD lr 50 (far too high): the ReLUs die at step 3",
        torch_killed, {**{t: "not_moving" for t in _MLP_T[:5]}, "4/bias": "too_fast"}),
    Run("torch_nan_inputs", "pytorch", "MLP with LayerNorm, Adam; NaN inputs from step 60",
        torch_nan_inputs,
        {t: "nan" for t in ("0/weight", "0/bias", "1/weight", "1/bias", "3/weight", "3/bias",
                            "4/weight", "4/bias", "6/weight", "6/bias")}),
    Run("torch_one_layer_100x", "pytorch", "MLP, SGD 0.01; layer 2's group at 1.0 (100x)",
        torch_one_layer_100x, {"2/weight": "fast_outlier", "2/bias": "fast_outlier"}),
    Run("keras_nan_inputs/train", "keras", "MLP, Adam; a third of the inputs hold a NaN",
        keras_nan_inputs,
        {f"nan_inputs/{layer}": "nan"
         for layer in ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias")}),
    Run("jax_slow_group", "jax", "MLP, optax Adam 1e-3; dense_0 at 1e-6 (1000x slower)",
        jax_slow_group, {"dense_0/kernel": "slow_outlier"}),  # its bias grows from 0: 1/k
    Run("jax_frozen_layer", "jax", "MLP, optax Adam 1e-3; dense_2 frozen (set_to_zero)",
        jax_frozen_layer, {"dense_2/kernel": "not_moving", "dense_2/bias": "not_moving"}),
]


def generate(logdir: str, runs=None, spectral: bool = False) -> list[Run]:
    """Write `runs` (default: RUNS) under `logdir`, with spectral ratios too when
    `spectral`; returns them."""
    runs = RUNS if runs is None else runs
    _Writing.spectral = spectral
    try:
        for run in runs:
            directory = os.path.join(logdir, run.name.removesuffix("/train"))
            run.write(directory)
    finally:
        _Writing.spectral = False
    return runs


if __name__ == "__main__":
    import sys
    import time

    target = sys.argv[1]
    wanted = sys.argv[2:]
    for run in RUNS:
        if wanted and run.name.removesuffix("/train") not in wanted:
            continue
        t = time.perf_counter()
        generate(target, [run])
        print(f"{run.name}: {time.perf_counter() - t:.1f}s", flush=True)

"""Spectral update ratios: what `spectral=True` adds to a logged training step, against the
Frobenius ratios alone, on a stack of 12 transformer blocks (CPU, float32, Adam).

Every variant runs in this one process, interleaved: each round times every variant of a
framework (in a random order) over --steps training steps, the bare step twice (its second
timing is the noise floor), and reports the median [min–max] over rounds of the per-round
RATIO to the bare step, and of the spectral logged step to the Frobenius logged step.

Variants (per framework):
  bare                   a training step, nothing logged
  bare again             the same (the noise floor)
  frobenius: logged      every step logged (the ratios, no spectral)
  spectral: logged       every step logged with spectral=True (warm-started after the first)
  spectral: other step   spectral=True, a step that is not logged

Workload: 12 pre-norm transformer blocks, d_model 256, 4 heads, feed-forward 1024, a batch of
8 sequences of 64 tokens (48 matrices of 256×256 to 256×1024 and their biases and norms).

  python benchmarks/spectral.py                  # the table of benchmarks/RESULTS.md
  python benchmarks/spectral.py --smoke          # tiny sizes, seconds
  python benchmarks/spectral.py --frameworks jax # one framework
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

Variant = Callable[[], None]


def sizes(smoke: bool) -> dict[str, int]:
    if smoke:
        return dict(blocks=2, width=32, heads=2, hidden=64, batch=2, tokens=8)
    return dict(blocks=12, width=256, heads=4, hidden=1024, batch=8, tokens=64)


def torch_variants(size: dict[str, int], logdir: str) -> dict[str, tuple[Variant, Variant, Variant]]:
    """name -> (setup, step, teardown) for PyTorch `watch`."""
    import torch

    from tb_wur_plugin.torch import watch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        size["width"], size["heads"], size["hidden"], dropout=0.0, batch_first=True,
        norm_first=True)
    model = torch.nn.TransformerEncoder(layer, size["blocks"], enable_nested_tensor=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(size["batch"], size["tokens"], size["width"])
    state: dict = {}

    def step() -> None:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    def start(every: int, spectral: bool) -> Variant:
        def setup() -> None:
            state["writer"] = SummaryWriter(os.path.join(logdir, f"torch{len(os.listdir(logdir))}"))
            state["handle"] = watch(optimizer, model, state["writer"], every=every,
                                    spectral=spectral)
            step()  # its logged step 0 (a cold start), before the timing
        return setup

    def stop() -> None:
        state["handle"].remove()
        state["writer"].close()

    nothing: Variant = lambda: None
    return {
        "bare": (nothing, step, nothing),
        "bare again": (nothing, step, nothing),
        "frobenius: logged": (start(1, False), step, stop),
        "spectral: logged": (start(1, True), step, stop),
        "spectral: other step": (start(10**9, True), step, stop),
    }


def jax_variants(size: dict[str, int], logdir: str) -> dict[str, tuple[Variant, Variant, Variant]]:
    """name -> (setup, step, teardown) for `tb_wur_plugin.jax.log_update_ratios`."""
    import jax
    import jax.numpy as jnp
    import optax

    from tb_wur_plugin.jax import log_update_ratios

    width, hidden, heads = size["width"], size["hidden"], size["heads"]
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 8 * size["blocks"] + 1))

    def dense(fan_in: int, fan_out: int) -> dict:
        kernel = jax.random.normal(next(keys), (fan_in, fan_out)) / jnp.sqrt(fan_in)
        return {"kernel": kernel, "bias": jnp.zeros(fan_out)}

    def norm() -> dict:
        return {"scale": jnp.ones(width), "bias": jnp.zeros(width)}

    params = {f"block_{i}": {"norm_1": norm(), "qkv": dense(width, 3 * width),
                             "out": dense(width, width), "norm_2": norm(),
                             "up": dense(width, hidden), "down": dense(hidden, width)}
              for i in range(size["blocks"])}
    x = jax.random.normal(next(keys), (size["batch"], size["tokens"], width))

    def layer_norm(p: dict, h: jax.Array) -> jax.Array:
        mean = h.mean(-1, keepdims=True)
        centred = h - mean
        return centred * jax.lax.rsqrt((centred**2).mean(-1, keepdims=True) + 1e-5) \
            * p["scale"] + p["bias"]

    def apply(p: dict, h: jax.Array) -> jax.Array:
        return h @ p["kernel"] + p["bias"]

    def block(p: dict, h: jax.Array) -> jax.Array:
        b, t, _ = h.shape
        q, k, v = jnp.split(apply(p["qkv"], layer_norm(p["norm_1"], h)), 3, axis=-1)
        split = lambda a: a.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3)
        attention = jax.nn.softmax(split(q) @ split(k).transpose(0, 1, 3, 2)
                                   / jnp.sqrt(width // heads))
        mixed = (attention @ split(v)).transpose(0, 2, 1, 3).reshape(b, t, width)
        h = h + apply(p["out"], mixed)
        return h + apply(p["down"], jax.nn.gelu(apply(p["up"], layer_norm(p["norm_2"], h))))

    def loss(p: dict) -> jax.Array:
        h = x
        for i in range(size["blocks"]):
            h = block(p[f"block_{i}"], h)
        return (h**2).mean()

    optimizer = optax.adam(1e-4)

    @jax.jit
    def updates_of(p, opt_state):
        return optimizer.update(jax.grad(loss)(p), opt_state, p)

    apply_updates = jax.jit(optax.apply_updates)
    state = {"params": params, "opt_state": optimizer.init(params), "step": 0}

    def train(log: dict | None) -> None:
        updates, state["opt_state"] = updates_of(state["params"], state["opt_state"])
        if log is not None:
            log_update_ratios(state["writer"], state["params"], updates, state["step"], **log)
        state["params"] = apply_updates(state["params"], updates)
        state["step"] += 1
        jax.block_until_ready(state["params"])

    def start(every: int, spectral: bool) -> Variant:
        def setup() -> None:
            state["writer"] = SummaryWriter(os.path.join(logdir, f"jax{len(os.listdir(logdir))}"))
            state["log"] = dict(every=every, spectral=spectral)
            state["step"] = 0
            train(state["log"])  # its logged step 0 (a cold start), before the timing
        return setup

    def stop() -> None:
        state["writer"].close()

    nothing: Variant = lambda: None
    logged: Variant = lambda: train(state["log"])
    train(None)  # compile
    return {
        "bare": (nothing, lambda: train(None), nothing),
        "bare again": (nothing, lambda: train(None), nothing),
        "frobenius: logged": (start(1, False), logged, stop),
        "spectral: logged": (start(1, True), logged, stop),
        "spectral: other step": (start(10**9, True), logged, stop),
    }


FRAMEWORKS = {"torch": torch_variants, "jax": jax_variants}


def timed(variant: tuple[Variant, Variant, Variant], steps: int) -> float:
    setup, step, teardown = variant
    setup()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = (time.perf_counter() - start) / steps
    teardown()
    return elapsed


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}–{max(values):.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="steps per timing")
    parser.add_argument("--frameworks", nargs="+", choices=sorted(FRAMEWORKS),
                        default=sorted(FRAMEWORKS))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds")
    args = parser.parse_args()
    rounds, steps = (2, 1) if args.smoke else (args.rounds, args.steps)
    size = sizes(args.smoke)
    print(f"workload: {size}; {rounds} rounds × {steps} steps per timing")
    for framework in args.frameworks:
        with tempfile.TemporaryDirectory() as logdir:
            variants = FRAMEWORKS[framework](size, logdir)
            ratios: dict[str, list[float]] = {name: [] for name in variants}
            spectral_to_frobenius: list[float] = []
            bare_seconds: list[float] = []
            for _ in range(rounds):
                order = list(variants)
                random.shuffle(order)
                seconds = {name: timed(variants[name], steps) for name in order}
                bare_seconds.append(seconds["bare"])
                for name in variants:
                    ratios[name].append(seconds[name] / seconds["bare"])
                spectral_to_frobenius.append(
                    seconds["spectral: logged"] / seconds["frobenius: logged"])
        print(f"\n{framework}: bare step {statistics.median(bare_seconds) * 1e3:.1f} ms "
              "(median); ratio to the bare step, median [min–max] over rounds")
        for name, values in ratios.items():
            print(f"  {name:<22} {summary(values)}")
        print(f"  {'spectral / frobenius':<22} {summary(spectral_to_frobenius)} "
              "(logged steps)")


if __name__ == "__main__":
    main()

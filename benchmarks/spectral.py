"""Spectral update ratios: what `spectral=True` adds to a logged training step, against the
Frobenius ratios alone, on a stack of 12 transformer blocks (CPU, float32, Adam), or on
GPT-2 small (PyTorch, any device).

Every variant runs in this one process, interleaved: each round times every variant of a
framework (in a random order) over --steps training steps, the bare step twice (its second
timing is the noise floor), and reports the median [min–max] over rounds of the per-round
RATIO to the bare step, and of the spectral logged step to the Frobenius logged step. On a
CUDA device each timing synchronizes the device before it starts and before it ends.

Variants (per framework):
  bare                   a training step, nothing logged
  bare again             the same (the noise floor)
  frobenius: logged      every step logged (the ratios, no spectral)
  frobenius: other step  a step that is not logged (every=10**9, after its logged step 0)
  spectral: logged       every step logged with spectral=True (warm-started after the first)
  spectral: other step   spectral=True, a step that is not logged

Workloads (--model):
  blocks  12 pre-norm transformer blocks, d_model 256, 4 heads, feed-forward 1024, a batch of
          8 sequences of 64 tokens (48 matrices of 256×256 to 256×1024 and their biases and
          norms); PyTorch, JAX and TensorFlow (`wur_summary.watch` in a `tf.function`, the
          logged step traced under a writer, the other step traced without one)
  small   the same blocks at a small model's size: 4 blocks, d_model 32, 2 heads, feed-forward
          64, a batch of 8 sequences of 16 tokens (16 matrices of 32×32 to 32×64: on the CPU
          PyTorch and JAX decompose them at once, `spectral.decomposed_on_cpu`)
  gpt2    GPT-2 small (transformers' GPT2LMHeadModel: 12 layers, n_embd 768, 12 heads, vocab
          50257; random initialisation, nothing downloaded), a batch of 8 sequences of 512
          random tokens, the language-model loss; PyTorch only

--check (PyTorch) also logs one step of a fresh copy of the workload with spectral=True,
reads both metrics back (`tb_wur_plugin.read_ratios`) and prints their worst relative
difference from a float64 reference of the same update taken by hand (‖ΔW‖₂/‖W‖₂ from the
largest eigenvalue of the smaller Gram matrix).

  python benchmarks/spectral.py                  # the table of benchmarks/RESULTS.md
  python benchmarks/spectral.py --smoke          # tiny sizes, seconds
  python benchmarks/spectral.py --frameworks jax # one framework
  python benchmarks/spectral.py --model small     # a small model's matrices
  python benchmarks/spectral.py --frameworks tf
  python benchmarks/spectral.py --frameworks torch --model gpt2 --device cuda --check
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

Variant = Callable[[], None]


def sizes(smoke: bool, model: str) -> dict[str, int]:
    if model == "gpt2":
        if smoke:
            return dict(layers=2, width=32, heads=2, vocab=64, batch=2, tokens=8)
        return dict(layers=12, width=768, heads=12, vocab=50257, batch=8, tokens=512)
    if smoke:
        return dict(blocks=2, width=32, heads=2, hidden=64, batch=2, tokens=8)
    if model == "small":
        return dict(blocks=4, width=32, heads=2, hidden=64, batch=8, tokens=16)
    return dict(blocks=12, width=256, heads=4, hidden=1024, batch=8, tokens=64)


def torch_workload(size: dict[str, int], device: str) -> tuple[Any, Any, Variant]:
    """(model, Adam optimizer, one training step) of the workload `size` on `device`."""
    import torch

    torch.manual_seed(0)
    if "vocab" in size:  # GPT-2
        import transformers

        config = transformers.GPT2Config(
            n_layer=size["layers"], n_embd=size["width"], n_head=size["heads"],
            vocab_size=size["vocab"], n_positions=max(size["tokens"], 16),
            bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config).to(device)
        tokens = torch.randint(0, size["vocab"], (size["batch"], size["tokens"]), device=device)
        loss = lambda: model(input_ids=tokens, labels=tokens).loss  # noqa: E731
    else:
        layer = torch.nn.TransformerEncoderLayer(
            size["width"], size["heads"], size["hidden"], dropout=0.0, batch_first=True,
            norm_first=True)
        model = torch.nn.TransformerEncoder(layer, size["blocks"],
                                            enable_nested_tensor=False).to(device)
        x = torch.randn(size["batch"], size["tokens"], size["width"], device=device)
        loss = lambda: model(x).pow(2).mean()  # noqa: E731
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 matrix products, as GPU training runs

    def step() -> None:
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()

    return model, optimizer, step


def torch_synchronize(device: str) -> Variant:
    """A function that waits for the work queued on `device` (nothing to wait for on a CPU)."""
    import torch

    if torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def torch_variants(size: dict[str, int], logdir: str,
                   device: str) -> dict[str, tuple[Variant, Variant, Variant]]:
    """name -> (setup, step, teardown) for PyTorch `watch`."""
    from tb_wur_plugin.torch import watch

    model, optimizer, step = torch_workload(size, device)
    state: dict = {}

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
    step()  # Adam's state, the kernels' first launches
    return {
        "bare": (nothing, step, nothing),
        "bare again": (nothing, step, nothing),
        "frobenius: logged": (start(1, False), step, stop),
        "frobenius: other step": (start(10**9, False), step, stop),
        "spectral: logged": (start(1, True), step, stop),
        "spectral: other step": (start(10**9, True), step, stop),
    }


def torch_check(size: dict[str, int], logdir: str, device: str) -> None:
    """Log one step of a fresh workload (after two unlogged ones: no zero bias left) with
    spectral=True and print the worst relative difference of each metric read back from a
    float64 reference of the same update."""
    import torch

    from tb_wur_plugin import read_ratios
    from tb_wur_plugin.torch import watch

    model, optimizer, step = torch_workload(size, device)
    step()
    step()
    named = [(n.replace(".", "/"), p) for n, p in model.named_parameters()]
    before = {tag: p.detach().double().clone() for tag, p in named}
    handle = watch(optimizer, model, logdir, every=1, spectral=True)
    step()
    handle.remove()

    def largest_singular_value(matrix: torch.Tensor) -> float:
        gram = matrix.T @ matrix if matrix.shape[1] <= matrix.shape[0] else matrix @ matrix.T
        return float(torch.linalg.eigvalsh(gram)[-1].clamp(min=0).sqrt())

    want: dict[str, dict[str, float]] = {"frobenius": {}, "spectral": {}}
    for tag, p in named:
        w, update = before[tag], p.detach().double() - before[tag]
        want["frobenius"][tag] = float(update.norm() / w.norm())
        if w.dim() >= 2:
            matrix = w.reshape(w.shape[0], -1)
            want["spectral"][tag] = (largest_singular_value(update.reshape(matrix.shape))
                                     / largest_singular_value(matrix))
    for metric, reference in want.items():
        frame = read_ratios(logdir, metric=metric, load_fast=False)
        got = dict(zip(frame["tag"], frame["ratio"]))
        if sorted(got) != sorted(reference):
            raise AssertionError(f"{metric}: tags read back {sorted(got)} != {sorted(reference)}")
        errors = [abs(got[t] - r) / abs(r) for t, r in reference.items()]
        worst = max(range(len(errors)), key=errors.__getitem__)
        print(f"  check {metric:<9}: {len(errors)} parameters, one logged step; worst relative "
              f"difference from float64 {errors[worst]:.2e} ({list(reference)[worst]})")


def jax_variants(size: dict[str, int], logdir: str,
                 device: str) -> dict[str, tuple[Variant, Variant, Variant]]:
    """name -> (setup, step, teardown) for `tb_wur_plugin.jax.log_update_ratios` on JAX's
    default device (`device` is not used: `main` allows only "cpu" with JAX)."""
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
        "frobenius: other step": (start(10**9, False), logged, stop),
        "spectral: logged": (start(1, True), logged, stop),
        "spectral: other step": (start(10**9, True), logged, stop),
    }


def tf_variants(size: dict[str, int], logdir: str,
                device: str) -> dict[str, tuple[Variant, Variant, Variant]]:
    """name -> (setup, step, teardown) for `wur_summary.watch` in a `tf.function` training
    step on TensorFlow's default device (`device` is not used: `main` allows only "cpu"),
    the recommended pattern: the logged step traced under a writer, the other step a
    function traced without one; Δw from the Keras Adam optimizer (`optimizer=`)."""
    import keras
    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    width, hidden, heads = size["width"], size["hidden"], size["heads"]
    rng = np.random.default_rng(0)

    def variable(shape: tuple[int, ...], name: str, scale: float | None = None) -> Any:
        value = (np.zeros(shape) if scale is None
                 else rng.standard_normal(shape) * scale)
        return keras.Variable(value.astype("float32"), name=name)

    def dense(block: int, name: str, fan_in: int, fan_out: int) -> dict:
        return {"kernel": variable((fan_in, fan_out), f"block_{block}_{name}_kernel",
                                   fan_in ** -0.5),
                "bias": variable((fan_out,), f"block_{block}_{name}_bias")}

    def norm(block: int, name: str) -> dict:
        return {"scale": keras.Variable(np.ones(width, "float32"),
                                        name=f"block_{block}_{name}_scale"),
                "bias": variable((width,), f"block_{block}_{name}_bias")}

    params = [{"norm_1": norm(i, "norm_1"), "qkv": dense(i, "qkv", width, 3 * width),
               "out": dense(i, "out", width, width), "norm_2": norm(i, "norm_2"),
               "up": dense(i, "up", width, hidden), "down": dense(i, "down", hidden, width)}
              for i in range(size["blocks"])]
    variables = [v for block in params for layer in block.values() for v in layer.values()]
    x = tf.constant(rng.standard_normal((size["batch"], size["tokens"], width)), tf.float32)

    def layer_norm(p: dict, h: tf.Tensor) -> tf.Tensor:
        mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)
        return (h - mean) * tf.math.rsqrt(variance + 1e-5) * p["scale"] + p["bias"]

    def apply(p: dict, h: tf.Tensor) -> tf.Tensor:
        return tf.tensordot(h, p["kernel"], 1) + p["bias"]

    def block(p: dict, h: tf.Tensor) -> tf.Tensor:
        b, t = size["batch"], size["tokens"]
        q, k, v = tf.split(apply(p["qkv"], layer_norm(p["norm_1"], h)), 3, axis=-1)
        split = lambda a: tf.transpose(tf.reshape(a, [b, t, heads, width // heads]),
                                       [0, 2, 1, 3])
        attention = tf.nn.softmax(tf.matmul(split(q), split(k), transpose_b=True)
                                  / (width // heads) ** 0.5)
        mixed = tf.reshape(tf.transpose(tf.matmul(attention, split(v)), [0, 2, 1, 3]),
                           [b, t, width])
        h = h + apply(p["out"], mixed)
        return h + apply(p["down"], tf.nn.gelu(apply(p["up"], layer_norm(p["norm_2"], h))))

    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(variables)

    def gradients() -> list:
        with tf.GradientTape() as tape:
            h = x
            for p in params:
                h = block(p, h)
            loss = tf.reduce_mean(h**2)
        return tape.gradient(loss, variables)

    def bare_body() -> None:
        optimizer.apply_gradients(zip(gradients(), variables))

    def watched_body(spectral: bool) -> None:
        grads = gradients()
        with wur_summary.watch(variables, step=optimizer.iterations, optimizer=optimizer,
                               spectral=spectral):
            optimizer.apply_gradients(zip(grads, variables))

    bare = tf.function(bare_body)
    functions = {spectral: (tf.function(lambda s=spectral: watched_body(s)),
                            tf.function(lambda s=spectral: watched_body(s)))
                 for spectral in (False, True)}
    # one writer: a function traced under a writer keeps that writer
    writer = tf.summary.create_file_writer(os.path.join(logdir, "tf"))
    state: dict = {}

    def start(spectral: bool, logged: bool) -> Variant:
        def setup() -> None:
            if logged:
                state["context"] = writer.as_default()
                state["context"].__enter__()
            state["step"] = functions[spectral][0 if logged else 1]
            state["step"]()  # the first logged step is a cold start, before the timing
        return setup

    def stop() -> None:
        if "context" in state:
            state.pop("context").__exit__(None, None, None)  # flushes the writer

    nothing: Variant = lambda: None
    bare()  # trace
    step: Variant = lambda: state["step"]()
    return {
        "bare": (nothing, bare, nothing),
        "bare again": (nothing, bare, nothing),
        "frobenius: logged": (start(False, True), step, stop),
        "frobenius: other step": (start(False, False), step, stop),
        "spectral: logged": (start(True, True), step, stop),
        "spectral: other step": (start(True, False), step, stop),
    }


FRAMEWORKS = {"torch": torch_variants, "jax": jax_variants, "tf": tf_variants}


def timed(variant: tuple[Variant, Variant, Variant], steps: int, synchronize: Variant) -> float:
    setup, step, teardown = variant
    setup()
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
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
    parser.add_argument("--model", choices=("blocks", "small", "gpt2"), default="blocks",
                        help="the workload (gpt2: PyTorch only)")
    parser.add_argument("--device", default="cpu",
                        help="PyTorch's device: cpu (default), cuda (JAX: cpu only)")
    parser.add_argument("--check", action="store_true",
                        help="PyTorch: also check one logged step against float64")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds")
    args = parser.parse_args()
    for name, label in (("jax", "JAX"), ("tf", "TensorFlow")):
        if name in args.frameworks and (args.model == "gpt2" or args.device != "cpu"):
            parser.error(f"{label} runs --model blocks or small on --device cpu only: "
                         "pass --frameworks torch")
    rounds, steps = (2, 1) if args.smoke else (args.rounds, args.steps)
    size = sizes(args.smoke, args.model)
    print(f"workload: {args.model} {size}; {rounds} rounds × {steps} steps per timing")
    for framework in args.frameworks:
        synchronize = torch_synchronize(args.device) if framework == "torch" else lambda: None
        with tempfile.TemporaryDirectory() as logdir:
            variants = FRAMEWORKS[framework](size, logdir, args.device)
            seconds: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(rounds):
                order = list(variants)
                random.shuffle(order)
                for name in order:
                    seconds[name].append(timed(variants[name], steps, synchronize))
        bare = seconds["bare"]
        print(f"\n{framework} ({args.device}): bare step {statistics.median(bare) * 1e3:.1f} ms "
              "(median); ratio to the bare step, median [min–max] over rounds; median ms")
        for name, values in seconds.items():
            print(f"  {name:<22} {summary([v / b for v, b in zip(values, bare)])}; "
                  f"{statistics.median(values) * 1e3:.1f} ms")
        spectral_to_frobenius = [s / f for s, f in zip(seconds["spectral: logged"],
                                                       seconds["frobenius: logged"])]
        print(f"  {'spectral / frobenius':<22} {summary(spectral_to_frobenius)} "
              "(logged steps)")
        if args.check and framework == "torch":
            with tempfile.TemporaryDirectory() as logdir:
                torch_check(size, logdir, args.device)


if __name__ == "__main__":
    main()

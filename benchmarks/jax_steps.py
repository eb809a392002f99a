"""JAX / optax benchmark: what `tb_wur_plugin.jax.log_update_ratios` adds to a jitted
training step.

Every variant runs in this one process, interleaved: each round times every variant (in a
random order) over --steps steps, each step waited for (`block_until_ready`), the bare step
twice (its second timing is the noise floor), and reports the median [min–max] over rounds
of the per-round RATIO to the bare step.

Variants (each with its own parameters and optimizer state, same initial values):
  bare                  the jitted step: loss, gradients, optax Adam, `apply_updates`;
                        returns the new parameters and state
  updates returned      the same step returning the updates too (what the documented pattern
                        does), and `log_update_ratios(..., every=10**9)` on a step it does
                        not log: the cost of every other step
  logged step           `log_update_ratios(..., every=1)` into a `SummaryWriter` (flushed
                        each step): the norms of parameters and updates (one jitted call),
                        the ratios on the host, the event write and the judgement
  + histograms          the same with `histograms=True`
  static flag           the pattern of docs/frameworks.md: one step function jitted with a
                        static `logged` argument, which returns the updates only when True
                        (two programs); other steps (every=10**9) and logged ones (every=1)

Workloads (float32, CPU unless JAX_PLATFORMS says otherwise):
  MLP   784-1024-1024-10, batch 128 (6 leaves, 1.9 M weights), as torch_watch.py's MLP
  P200  100 stacked Dense(64), batch 32 (200 leaves, 0.4 M weights)

    python benchmarks/jax_steps.py              # the table of benchmarks/RESULTS.md
    python benchmarks/jax_steps.py --smoke      # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import functools
import logging
import random
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tb_wur_plugin.jax import log_update_ratios
from tb_wur_plugin.writer import SummaryWriter


def make_workload(name: str, smoke: bool):
    """(params, x, y) of the workload: a list of {"kernel", "bias"} layers."""
    rng = np.random.default_rng(0)
    if name == "MLP":
        sizes = [784, 64, 64, 10] if smoke else [784, 1024, 1024, 10]
        batch = 128
    else:  # P200
        sizes = [64] * ((3 if smoke else 100) + 1)
        batch = 32
    params = [{"kernel": jnp.asarray(rng.normal(size=(m, n)) / np.sqrt(m), jnp.float32),
               "bias": jnp.zeros((n,), jnp.float32)} for m, n in zip(sizes[:-1], sizes[1:])]
    x = jnp.asarray(rng.normal(size=(batch, sizes[0])), jnp.float32)
    y = jnp.asarray(rng.normal(size=(batch, sizes[-1])), jnp.float32)
    return params, x, y


def loss_fn(params, x, y):
    for i, layer in enumerate(params):
        x = x @ layer["kernel"] + layer["bias"]
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return jnp.mean(jnp.square(x - y))


def make_steps(optimizer):
    @jax.jit
    def bare_step(params, opt_state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    @jax.jit
    def step_with_updates(params, opt_state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, updates

    @functools.partial(jax.jit, static_argnames="logged")
    def flagged_step(params, opt_state, x, y, logged=False):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        return (new_params, opt_state, updates) if logged else (new_params, opt_state)

    return bare_step, step_with_updates, flagged_step


class Variant:
    """One variant's training state; `step()` runs (and waits for) one training step."""

    def __init__(self, params, optimizer, x, y, step_functions, every=None, histograms=False,
                 flagged=False, logdir=None):
        self.params, self.opt_state = params, optimizer.init(params)
        self.x, self.y = x, y
        self.bare_step, self.step_with_updates, self.flagged_step = step_functions
        self.every, self.histograms, self.number = every, histograms, 0
        self.flagged = flagged
        self.writer = SummaryWriter(tempfile.mkdtemp(dir=logdir)) if every else None

    def step(self):
        if self.every is None:
            self.params, self.opt_state = self.bare_step(self.params, self.opt_state,
                                                         self.x, self.y)
        elif self.flagged and self.number % self.every:  # the program without updates
            self.params, self.opt_state = self.flagged_step(self.params, self.opt_state,
                                                            self.x, self.y)
        else:
            with_updates = (functools.partial(self.flagged_step, logged=True) if self.flagged
                            else self.step_with_updates)
            new_params, self.opt_state, updates = with_updates(
                self.params, self.opt_state, self.x, self.y)
            log_update_ratios(self.writer, self.params, updates, self.number,
                              every=self.every, histograms=self.histograms)
            self.params = new_params
        self.number += 1
        jax.block_until_ready(self.params)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def run(name: str, rounds: int, steps: int, smoke: bool, logdir: str) -> None:
    params, x, y = make_workload(name, smoke)
    optimizer = optax.adam(1e-3)
    step_functions = make_steps(optimizer)

    def variant(**kwargs):
        return Variant(params, optimizer, x, y, step_functions, logdir=logdir, **kwargs)

    variants = {
        "bare": variant(),
        "bare (again)": variant(),
        "updates returned, other step": variant(every=10**9),
        "logged step": variant(every=1),
        "logged step, histograms": variant(every=1, histograms=True),
        "static flag, other step": variant(every=10**9, flagged=True),
        "static flag, logged step": variant(every=1, flagged=True),
    }
    for v in variants.values():  # compile; step 0 is logged in every variant that logs
        for _ in range(2):
            v.step()
    times = {key: [] for key in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for key in order:
            start = time.perf_counter()
            for _ in range(steps):
                variants[key].step()
            times[key].append((time.perf_counter() - start) / steps)
    leaves = len(jax.tree_util.tree_leaves(params))
    weights = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
    print(f"\n{name}: {leaves} leaves, {weights / 1e6:.2f} M weights; bare step "
          f"{statistics.median(times['bare']) * 1e3:.2f} ms (median); time per step / bare "
          f"step, median [min–max] over {rounds} rounds")
    for key, values in times.items():
        ratios = sorted(t / b for t, b in zip(values, times["bare"]))
        print(f"  {key:32s} {statistics.median(ratios):.3f} [{ratios[0]:.3f}–{ratios[-1]:.3f}]")
    for v in variants.values():
        v.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="default 12 (--smoke: 2)")
    parser.add_argument("--steps", type=int, default=None, help="default 20 (--smoke: 2)")
    parser.add_argument("--workloads", nargs="+", default=["MLP", "P200"],
                        choices=["MLP", "P200"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    # P200's deep layers stop moving (a real flag, judged on every logged step); not printed
    logging.getLogger("tb_wur_plugin").setLevel(logging.ERROR)
    rounds = args.rounds or (2 if args.smoke else 12)
    steps = args.steps or (2 if args.smoke else 20)
    print(f"jax {jax.__version__}, optax {optax.__version__}, devices {jax.devices()}, "
          f"rounds={rounds} steps={steps}")
    with tempfile.TemporaryDirectory() as logdir:
        for name in args.workloads:
            run(name, rounds, steps, args.smoke, logdir)


if __name__ == "__main__":
    main()

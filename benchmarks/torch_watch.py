"""PyTorch benchmark: what `tb_wur_plugin.torch.watch` adds to `optimizer.step()`, against
the usual alternatives.

Every variant runs in this one process, interleaved: each round times every variant (in a
random order) over --steps calls of `optimizer.step()` (gradients set once, before), the
bare step twice (its second timing is the noise floor), and reports the median [min–max]
over rounds of the per-round RATIO to the bare step.

Variants:
  bare                 optimizer.step(), nothing watched
  watch: other step    watch(every=10**9) after its logged step 0: the hooks compare and return
  watch: logged step   watch(every=1), into a SummaryWriter (flushed each step)
  watch: + histograms  watch(every=1, histograms=True)
  wandb-style histc    after the step, per parameter: min/max .item(), torch.histc(64 bins),
                       .tolist() (what wandb.watch does for each parameter it logs)
  naive .item() loop   a clone per parameter before the step, then per parameter
                       ‖w − w_before‖.item() / ‖w_before‖.item()

Workloads (CPU, float32, Adam):
  MLP   784-1024-1024-10 (6 parameters, 1.9 M weights)
  P200  100 stacked Linear(64, 64) (200 parameters, 0.4 M weights)

    python benchmarks/torch_watch.py            # the table of benchmarks/RESULTS.md
    python benchmarks/torch_watch.py --smoke    # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

import torch

from tb_wur_plugin.torch import watch
from tb_wur_plugin.writer import SummaryWriter


def make_workload(name: str, smoke: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "MLP":
        width = 64 if smoke else 1024
        model = torch.nn.Sequential(
            torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 10))
    else:
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(10 if smoke else 100)])
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return model


def variants(model, optimizer, logdir):
    """name -> (setup, step, teardown): setup() before a timing, step() timed."""
    params = list(model.parameters())
    state = {}

    def bare():
        optimizer.step()

    def start_watch(every, histograms):
        def setup():
            state["writer"] = SummaryWriter(os.path.join(logdir, f"run{len(os.listdir(logdir))}"))
            state["handle"] = watch(optimizer, model, state["writer"], every=every,
                                    histograms=histograms)
            if every > 1:
                optimizer.step()  # its logged step 0, before the timing
        return setup

    def stop_watch():
        state["handle"].remove()
        state["writer"].close()

    def wandb_style():
        optimizer.step()
        for p in params:
            flat = p.detach().reshape(-1)
            low, high = flat.min().item(), flat.max().item()
            torch.histc(flat, bins=64, min=low, max=high).tolist()

    def naive_items():
        before = [p.detach().clone() for p in params]
        optimizer.step()
        for p, b in zip(params, before):
            (p.detach() - b).norm().item() / b.norm().item()

    nothing = lambda: None  # noqa: E731
    return {
        "bare": (nothing, bare, nothing),
        "bare, again": (nothing, bare, nothing),
        "watch: other step": (start_watch(10**9, False), bare, stop_watch),
        "watch: logged step": (start_watch(1, False), bare, stop_watch),
        "watch: + histograms": (start_watch(1, True), bare, stop_watch),
        "wandb-style histc": (nothing, wandb_style, nothing),
        "naive .item() loop": (nothing, naive_items, nothing),
    }


def run(name: str, rounds: int, steps: int, smoke: bool) -> None:
    model = make_workload(name, smoke)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    optimizer.step()  # Adam's state exists before any timing
    with tempfile.TemporaryDirectory() as logdir:
        table = variants(model, optimizer, logdir)
        times: dict[str, list[float]] = {v: [] for v in table}
        for _ in range(rounds):
            order = list(table)
            random.shuffle(order)
            for variant in order:
                setup, step, teardown = table[variant]
                setup()
                start = time.perf_counter()
                for _ in range(steps):
                    step()
                times[variant].append((time.perf_counter() - start) / steps)
                teardown()
    bare = times["bare"]
    n_params = sum(1 for _ in model.parameters())
    n_weights = sum(p.numel() for p in model.parameters())
    print(f"{name}: {n_params} parameters, {n_weights / 1e6:.2f} M weights, Adam; "
          f"{rounds} rounds x {steps} steps; bare step {statistics.median(bare) * 1e3:.3f} ms "
          "(median)")
    print(f"{'variant':<24} ratio to bare step: median [min-max]")
    for variant, values in times.items():
        if variant == "bare":
            continue
        ratios = [v / b for v, b in zip(values, bare)]
        print(f"{variant:<24} {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    random.seed(0)
    rounds, steps = (2, 3) if args.smoke else (args.rounds, args.steps)
    for name in ("MLP", "P200"):
        run(name, rounds, steps, args.smoke)


if __name__ == "__main__":
    main()

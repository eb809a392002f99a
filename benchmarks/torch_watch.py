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

Workloads (float32, Adam; CPU unless --device names another):
  MLP   784-1024-1024-10 (6 parameters, 1.9 M weights)
  P200  100 stacked Linear(64, 64) (200 parameters, 0.4 M weights)
  GPT2  GPT-2 small (transformers' GPT2LMHeadModel, 12 layers, n_embd 768, 12 heads, vocab
        50257; random initialisation, nothing downloaded): 148 parameters, 124 M weights

Each line also gives the median minor page faults per step. On the CPU they come mostly
from the bare step itself: Adam allocates temporaries of each parameter's size, and glibc's
malloc, in some of its states, returns freed memory to the kernel and faults it in again at
the next step (about 2,000 pages per MLP step). Which state a timing meets is chance; with
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 in the environment no
step faults, and the ratios compare the steps' own work.

On a CUDA device each timing synchronizes the device before it starts and before it ends.

    python benchmarks/torch_watch.py            # the table of benchmarks/RESULTS.md
    python benchmarks/torch_watch.py --smoke    # tiny sizes, seconds
    python benchmarks/torch_watch.py --device cuda --workloads GPT2
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import tempfile
import time

import torch

from tb_wur_plugin.torch import watch
from tb_wur_plugin.writer import SummaryWriter


def make_workload(name: str, smoke: bool, device: torch.device) -> torch.nn.Module:
    """The workload `name`, on `device`, with a random gradient on every parameter."""
    torch.manual_seed(0)
    if name == "GPT2":
        import transformers

        config = (transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                          n_positions=16, bos_token_id=0, eos_token_id=0)
                  if smoke
                  else transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12))
        model = transformers.GPT2LMHeadModel(config)
    elif name == "MLP":
        width = 64 if smoke else 1024
        model = torch.nn.Sequential(
            torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 10))
    else:
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(10 if smoke else 100)])
    model.to(device)
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
            # its logged step 0, before the timing: a handle's first logged step allocates
            # the copies that its later logged steps reuse
            optimizer.step()
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


def minor_faults() -> int:
    """This process's minor page faults so far (pages the kernel mapped in on first touch)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (a CUDA device; nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(name: str, rounds: int, steps: int, smoke: bool, device: torch.device) -> None:
    model = make_workload(name, smoke, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    optimizer.step()  # Adam's state exists before any timing
    with tempfile.TemporaryDirectory() as logdir:
        table = variants(model, optimizer, logdir)
        times: dict[str, list[float]] = {v: [] for v in table}
        faults: dict[str, list[float]] = {v: [] for v in table}
        for _ in range(rounds):
            order = list(table)
            random.shuffle(order)
            for variant in order:
                setup, step, teardown = table[variant]
                setup()
                synchronize(device)
                start_faults = minor_faults()
                start = time.perf_counter()
                for _ in range(steps):
                    step()
                synchronize(device)
                times[variant].append((time.perf_counter() - start) / steps)
                faults[variant].append((minor_faults() - start_faults) / steps)
                teardown()
    bare = times["bare"]
    n_params = sum(1 for _ in model.parameters())
    n_weights = sum(p.numel() for p in model.parameters())
    print(f"{name} ({device}): {n_params} parameters, {n_weights / 1e6:.2f} M weights, Adam; "
          f"{rounds} rounds x {steps} steps; bare step {statistics.median(bare) * 1e3:.3f} ms "
          "(median)")
    print(f"{'variant':<24} ratio to bare step: median [min-max]; median ms per step; "
          "median page faults per step")
    for variant, values in times.items():
        ratios = [v / b for v, b in zip(values, bare)]
        print(f"{variant:<24} {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]; {statistics.median(values) * 1e3:.3f} ms; "
              f"{statistics.median(faults[variant]):.0f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--device", default="cpu", help="a torch device: cpu (default), cuda")
    parser.add_argument("--workloads", nargs="+", choices=("MLP", "P200", "GPT2"),
                        default=["MLP", "P200"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    random.seed(0)
    rounds, steps = (2, 3) if args.smoke else (args.rounds, args.steps)
    for name in args.workloads:
        run(name, rounds, steps, args.smoke, torch.device(args.device))


if __name__ == "__main__":
    main()

"""The judgement while training (tb_wur_plugin/judgement/online.py): host time of one logged
step's `OnlineJudgement.observe` for 2, 10, 100 and 1,000 layers (target: at most 2 ms at 1,000
layers), and of the spectral judgement's step (`others_moving_at` of the step's Frobenius
ratios, then `observe` of the matrices' spectral ratios).

The layers are half matrices, half vectors (as a network's kernels and biases), every one
logged at every step, their ratios log-normal around 1e-3 (matrices) and 1e-2 (vectors), as a
healthy Adam run's; one matrix stops moving halfway, so that a streak grows and fires. Each
round times --steps logged steps after as many warm-up steps; the table gives the median
[min–max] over rounds of the per-step median.

    python benchmarks/online_judgement.py          # 2 to 1000 layers; 7 rounds of 200 steps
    python benchmarks/online_judgement.py --smoke  # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement.online import OnlineJudgement, others_moving_at


def layers(n: int) -> tuple[list[str], list[str]]:
    """(tags, kinds) of `n` layers, half kernels, half biases."""
    tags = [f"block{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(n)]
    kinds = [metadata.LAYER_MATRIX if i % 2 == 0 else metadata.LAYER_VECTOR for i in range(n)]
    return tags, kinds


def ratios(n: int, steps: int, seed: int) -> np.ndarray:
    """float32[steps, n]: healthy ratios, layer 0 stopping halfway."""
    rng = np.random.default_rng(seed)
    level = np.where(np.arange(n) % 2 == 0, 1e-3, 1e-2)
    out = (level[None, :] * np.exp(rng.normal(0, 0.3, (steps, n)))).astype(np.float32)
    out[steps // 2:, 0] = 0.0
    return out


def round_ms(n: int, steps: int, seed: int) -> tuple[float, float, int]:
    """(median ms of a Frobenius step, median ms of a spectral step, flags fired) of one
    round of 2·`steps` logged steps, the first `steps` a warm-up."""
    tags, kinds = layers(n)
    matrices = [t for t, k in zip(tags, kinds) if k == metadata.LAYER_MATRIX]
    matrix_kinds = [metadata.LAYER_MATRIX] * len(matrices)
    values = ratios(n, 2 * steps, seed)
    spectral_values = values[:, ::2] * np.float32(0.8)
    frobenius = OnlineJudgement()
    spectral = OnlineJudgement(metadata.METRIC_SPECTRAL)
    frobenius_ms, spectral_ms = [], []
    for step in range(2 * steps):
        start = time.perf_counter()
        frobenius.observe(step, tags, kinds, values[step])
        middle = time.perf_counter()
        moving = others_moving_at(matrices, tags, values[step])
        spectral.observe(step, matrices, matrix_kinds, spectral_values[step], moving=moving)
        end = time.perf_counter()
        if step >= steps:
            frobenius_ms.append((middle - start) * 1e3)
            spectral_ms.append((end - middle) * 1e3)
    return (statistics.median(frobenius_ms), statistics.median(spectral_ms),
            len(frobenius.flags) + len(spectral.flags))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 10, 100, 1000])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.rounds = [10, 40], 20, 2
    print(f"OnlineJudgement.observe, host ms per logged step: median [min-max] over "
          f"{args.rounds} rounds of {args.steps} steps")
    print(f"{'layers':>7}  {'frobenius':>22}  {'spectral (+ others_moving_at)':>30}  flags")
    for n in args.layers:
        rounds = [round_ms(n, args.steps, seed) for seed in range(args.rounds)]
        cells = []
        for column in (0, 1):
            times = [r[column] for r in rounds]
            cells.append(f"{statistics.median(times):.3f} [{min(times):.3f}-{max(times):.3f}]")
        print(f"{n:>7}  {cells[0]:>22}  {cells[1]:>30}  {rounds[0][2]}")


if __name__ == "__main__":
    main()

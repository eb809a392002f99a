"""The read side's two heavy answers in process, over a synthetic run of LAYERS × STEPS
float32 ratios held as the plugin holds a run's matrix (`read.heatmap.RunMatrix`): the
judgement of `/flags` (`judge.flag_layers`, the default judgement) and the reduction of a
`/heatmap` range not asked before (`heatmap.reduce_columns` then `hold_gaps`, mean_log10,
2,000 columns, the matrix's cell classes already computed as after the first heatmap).

    .venv/bin/python benchmarks/read_side.py [--layers 1000] [--steps 100000]
        [--rounds 3] [--what flags,heatmap] [--added-layer] [--smoke]

It measures the package its interpreter imports: in the dev venv the editable install of
this tree, whatever PYTHONPATH says (setuptools' editable finder comes first); to measure
another tree, load that tree's module beside this one (importlib) or install it in another
venv. The ratios are large_run.py's: each layer its own level, 10 ** U(-5, -1),
times 10 ** N(0, 0.15) at each step. Prints one JSON line per measurement: the seconds of
each round, their median, and the process's peak resident memory (ru_maxrss) before the
first round (the matrix built) and after the last.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import numpy as np

from tb_wur_plugin.judgement import judge
from tb_wur_plugin.read import heatmap


def synthetic_matrix(layers: int, steps: int, added_layer: bool = False) -> heatmap.RunMatrix:
    """large_run.py's ratios as a matrix, built 10,000 steps at a time; with `added_layer`,
    layer 0 logged from the middle step on only (a layer added mid-run: its earlier cells
    are missing, which the heatmap's `hold_gaps` then looks at)."""
    rng = np.random.default_rng(0)
    level = rng.uniform(-5, -1, size=layers)
    values = np.empty((layers, steps), np.float32)
    for c0 in range(0, steps, 10_000):
        c1 = min(steps, c0 + 10_000)
        values[:, c0:c1] = 10.0 ** (level[:, None] + rng.normal(0, 0.15, size=(layers, c1 - c0)))
    tags = tuple(f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers))
    present = np.ones((layers, steps), bool)
    if added_layer:
        present[0, :steps // 2] = False
    return heatmap.RunMatrix(tags, np.arange(steps, dtype=np.int64), values, present,
                             np.zeros(steps, bool))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--what", default="flags,heatmap")
    parser.add_argument("--columns", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="20 layers x 300 steps, 1 round")
    parser.add_argument("--added-layer", action="store_true",
                        help="layer 0 logged from the middle step on (missing cells before)")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.rounds, args.columns = 20, 300, 1, 100
    matrix = synthetic_matrix(args.layers, args.steps, args.added_layer)
    matrix.classes  # computed by the first heatmap of the run
    for what in args.what.split(","):
        before = peak_mb()
        seconds = []
        for k in range(1, args.rounds + 1):
            began = time.perf_counter()
            if what == "flags":
                answer = len(judge.flag_layers(matrix))
            elif what == "heatmap":  # a range not asked before: [k, steps - 1 - k]
                cols = heatmap.make_columns(matrix.steps, k, args.steps - 1 - k, args.columns)
                values, missing = heatmap.reduce_columns(matrix, cols, "mean_log10")
                values, missing, _ = heatmap.hold_gaps(matrix, cols, values, missing)
                answer = float(np.nansum(values))
            else:
                raise SystemExit(f"unknown measurement {what!r}")
            seconds.append(time.perf_counter() - began)
        print(json.dumps({
            "what": what, "layers": args.layers, "steps": args.steps,
            "seconds": [round(s, 3) for s in seconds],
            "median_s": round(statistics.median(seconds), 3),
            "peak_rss_before_mb": round(before), "peak_rss_after_mb": round(peak_mb()),
            "answer": answer,
        }), flush=True)


if __name__ == "__main__":
    main()

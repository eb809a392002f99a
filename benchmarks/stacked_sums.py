"""How the logged step's sums of squares are taken: the project's way against the others tried.

A logged step needs Σw² and Σ(Δw)² of every watched variable. The small variables of one
shape are stacked and reduced together (`ratios._stacked_log_sums`); on M3 (200 variables of
two shapes) that is most of what a logged step computes. Each variant below replaces
`_stacked_log_sums` alone, everything else being the recommended logged step of
`benchmarks/training.py` (`watch(..., optimizer=)` under a writer), and all run in this one
process, interleaved as there: each round times every variant in a random order over --steps
steps, and the table gives the median [min–max] over rounds of the per-round ratio to the
bare step.

  project      cast the float32 stack to float64, square and sum: exact, no check needed
  no sums      log Σ = 0 for every variable: capture and write only, the floor of any way
  float32 rows norms of rows of at most 512 elements in float32, squared and summed in
               float64, with no overflow or underflow check: not safe (|x| > 1e19 overflows,
               |x| < 1e-19 underflows), the bound of every way that reduces in float32
  rows + cond  the same, checked by one conditional per stack that sums all again in
               float64 when a row's norm is not finite or too small to be exact
  rows + redo  the same, with no conditional: the suspect rows (found by `tf.where`)
               gathered, summed again in float64 and scattered back
  XLA float64  the float64 cast, square and sum as one XLA-compiled function

    python benchmarks/stacked_sums.py              # M3, 12 rounds of 50 steps
    python benchmarks/stacked_sums.py --smoke      # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training import Variants, interleaved, make_workload, summary  # noqa: E402

from tb_wur_plugin.tf_write import ratios  # noqa: E402

ROW_ELEMENTS = 512
# above this norm, the squares a float32 row of ROW_ELEMENTS elements loses to underflow
# change its sum by less than 1e-9
SAFE_NORM = float(np.sqrt(np.finfo(np.float32).tiny * ROW_ELEMENTS * 1e9))


def _rows(stacked: tf.Tensor) -> tf.Tensor:
    """[k, r, L]: each stacked variable as r rows of L elements, L the largest divisor of its
    size that is at most ROW_ELEMENTS (a reshape: no copy)."""
    count, size = stacked.shape[0], stacked.shape[1:].num_elements()
    length = max(d for d in range(1, max(1, min(size, ROW_ELEMENTS)) + 1) if size % d == 0)
    return tf.reshape(stacked, [count, size // length, length])


def _float64_sums(x: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.square(tf.cast(x, tf.float64)), list(range(1, x.shape.rank)))


def no_sums(stacked: tf.Tensor) -> tf.Tensor:
    return tf.zeros([stacked.shape[0]], tf.float64)


def float32_rows(stacked: tf.Tensor) -> tf.Tensor:
    norms = tf.cast(tf.math.reduce_euclidean_norm(_rows(stacked), -1), tf.float64)
    return tf.math.log(tf.reduce_sum(tf.square(norms), -1))


def _suspect(norms: tf.Tensor) -> tf.Tensor:
    return ~tf.math.is_finite(norms) | (norms < SAFE_NORM)


def rows_and_cond(stacked: tf.Tensor) -> tf.Tensor:
    norms = tf.math.reduce_euclidean_norm(_rows(stacked), -1)
    plain = tf.math.log(tf.reduce_sum(tf.square(tf.cast(norms, tf.float64)), -1))
    return tf.cond(tf.reduce_any(_suspect(norms)),
                   lambda: tf.math.log(_float64_sums(stacked)), lambda: plain)


def rows_and_redo(stacked: tf.Tensor) -> tf.Tensor:
    rows = _rows(stacked)
    norms = tf.math.reduce_euclidean_norm(rows, -1)
    redo = tf.where(_suspect(norms))
    again = _float64_sums(tf.gather_nd(rows, redo))
    sums = tf.tensor_scatter_nd_update(tf.square(tf.cast(norms, tf.float64)), redo, again)
    return tf.math.log(tf.reduce_sum(sums, -1))


_xla_float64_sums = tf.function(_float64_sums, jit_compile=True, autograph=False)


def xla_float64(stacked: tf.Tensor) -> tf.Tensor:
    return tf.math.log(_xla_float64_sums(stacked))


VARIANTS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    "project": ratios._stacked_log_sums,
    "no sums": no_sums,
    "float32 rows": float32_rows,
    "rows + cond": rows_and_cond,
    "rows + redo": rows_and_redo,
    "XLA float64": xla_float64,
}


def logged_steps(variants: Variants) -> dict[str, Callable[[int], None]]:
    """name -> run n logged steps, each variant's step traced with its `_stacked_log_sums`."""
    bare, bare_again = tf.function(variants.bare_body), tf.function(variants.bare_body)
    runs = {"bare": bare, "bare (again)": bare, "bare, traced again": bare_again}
    project = ratios._stacked_log_sums
    try:
        for name, stacked_log_sums in VARIANTS.items():
            ratios._stacked_log_sums = stacked_log_sums
            step = tf.function(variants.watch_body)
            with variants.writer.as_default():
                step.get_concrete_function()  # traced now, with this variant
            runs[name] = step
    finally:
        ratios._stacked_log_sums = project

    def run(step, logged):
        def steps(n):
            if logged:
                with variants.writer.as_default():
                    for _ in range(n):
                        step()
            else:
                for _ in range(n):
                    step()
        return steps

    return {name: run(step, name in VARIANTS) for name, step in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=50, help="steps per timing")
    parser.add_argument("--workload", default="M3")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.steps = 2, 2
    random.seed(0)
    model, optimizer, x, y = make_workload(args.workload, args.smoke)
    writer = tf.summary.create_file_writer(tempfile.mkdtemp(prefix="wur-bench-"))
    runs = logged_steps(Variants(model, optimizer, x, y, writer))
    ratios_to_bare = interleaved(runs, args.rounds, args.steps)
    print(f"{tf.__version__=} {args.workload}: {len(model.trainable_variables)} variables; "
          f"logged step / bare step, median [min–max] over {args.rounds} rounds of "
          f"{args.steps} steps")
    for name, values in ratios_to_bare.items():
        print(f"  {name:<20} {summary(values)}")
    writer.close()


if __name__ == "__main__":
    main()

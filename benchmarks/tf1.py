"""TF1 graph-mode benchmark: what `tb_wur_plugin.compat.v1` costs per step, against a bare
graph's step.

A TF1 MLP 784-512-512-10 (6 variables), batch 128, Adam, placeholders fed from numpy, one
`tf.compat.v1.Session` per graph (CPU). Every variant runs in this one process, interleaved:
each round times every variant (in a random order) over --steps steps and reports the median
[min–max] over rounds of the per-round RATIO to the bare graph's step.

  bare graph, again        the bare step timed a second time: the noise floor
  watched graph: train_op  the graph built with watch, running the optimizer's own train op
  summary step             sess.run([wur.train_op, wur.summary]) + FileWriter.add_summary
  summary step, histograms the same with watch(histograms=True)
  hook: logged step        MonitoredSession with WeightUpdateRatioHook(every_n_steps=1)
                           around sess.run(train_op): the hook's two runs on a logged step
  hook: other step         the same with every_n_steps larger than the run: no logged step

    python benchmarks/tf1.py            # the table of benchmarks/RESULTS.md
    python benchmarks/tf1.py --smoke    # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_wur_plugin.compat import v1 as wur_v1  # noqa: E402
from training import interleaved, time_per_step  # noqa: E402

v1 = tf.compat.v1
CONFIG = v1.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)


def build(width: int, watch: bool, histograms: bool = False):
    """A graph: (graph, x, y, train_op, wur or None)."""
    graph = tf.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 784], name="x")
        y = v1.placeholder(tf.int64, [None], name="y")
        h = x
        for index, units in enumerate([width, width, 10]):
            with v1.variable_scope(f"dense_{index}"):
                kernel = v1.get_variable("kernel", initializer=rng.normal(
                    0, 0.05, (h.shape[1], units)).astype(np.float32))
                bias = v1.get_variable("bias", initializer=np.zeros(units, np.float32))
            h = tf.matmul(h, kernel) + bias
            if units != 10:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        global_step = v1.train.get_or_create_global_step()
        optimizer = v1.train.AdamOptimizer(1e-3)
        grads_and_vars = optimizer.compute_gradients(loss)
        wur = None
        if watch:
            with wur_v1.watch(histograms=histograms) as wur:
                train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
        else:
            train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)
        init = v1.global_variables_initializer()
    return graph, x, y, train_op, wur, init


def variants(width: int, logdir: str) -> dict[str, Callable[[dict], None]]:
    rng = np.random.default_rng(1)
    batch = (rng.normal(size=(128, 784)).astype(np.float32), rng.integers(0, 10, 128))
    steps: dict[str, Callable[[], None]] = {}

    def session_of(graph, init):
        session = v1.Session(graph=graph, config=CONFIG)
        session.run(init)
        return session

    graph, x, y, train_op, _, init = build(width, watch=False)
    bare = session_of(graph, init)
    feed_bare = {x: batch[0], y: batch[1]}
    steps["bare graph"] = lambda op=train_op: bare.run(op, feed_bare)
    steps["bare graph, again"] = lambda op=train_op: bare.run(op, feed_bare)

    for histograms in (False, True):
        graph, x, y, train_op, wur, init = build(width, watch=True, histograms=histograms)
        session = session_of(graph, init)
        feed = {x: batch[0], y: batch[1]}
        with graph.as_default():
            writer = v1.summary.FileWriter(os.path.join(logdir, f"h{int(histograms)}"))
        fetches = [wur.train_op, wur.summary]

        def summary_step(session=session, feed=feed, writer=writer, fetches=fetches):
            _, summary = session.run(fetches, feed)
            writer.add_summary(summary, 0)

        if histograms:
            steps["summary step, histograms"] = summary_step
        else:
            steps["watched graph: train_op"] = (
                lambda session=session, op=train_op, feed=feed: session.run(op, feed))
            steps["summary step"] = summary_step

    for name, every in (("hook: logged step", 1), ("hook: other step", 10**9)):
        graph, x, y, train_op, wur, init = build(width, watch=True)
        with graph.as_default():
            hook = wur_v1.WeightUpdateRatioHook(wur, os.path.join(logdir, f"hook{every}"), every)
            monitored = v1.train.MonitoredSession(
                session_creator=v1.train.ChiefSessionCreator(config=CONFIG), hooks=[hook])
        feed = {x: batch[0], y: batch[1]}
        steps[name] = lambda m=monitored, op=train_op, feed=feed: m.run(op, feed)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    width, rounds, steps = (64, 2, 3) if args.smoke else (512, args.rounds, args.steps)
    with tempfile.TemporaryDirectory() as logdir:
        runs = {name: (lambda n, step=step: [step() for _ in range(n)])
                for name, step in variants(width, logdir).items()}
        ratios = interleaved(runs, rounds, steps, baseline="bare graph")
        bare_ms = [time_per_step(runs["bare graph"], steps) * 1e3 for _ in range(3)]
    print(f"TF1 MLP 784-{width}-{width}-10, batch 128, Adam; {rounds} rounds x {steps} steps; "
          f"bare step {statistics.median(bare_ms):.2f} ms (median)")
    print(f"{'variant':28s} {'ratio to bare step: median [min-max]'}")
    for name, values in ratios.items():
        print(f"{name:28s} {statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")


if __name__ == "__main__":
    main()

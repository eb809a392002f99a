"""Bytes on disk of a large run (issue #18): 300 layers x N steps of ratios written by
`wur_summary.watch` (TensorFlow) and by the TF-free `SummaryWriter`, with the layout of
protocol version 2 (each tag's metadata once per file, varint histograms) and with the old
one (metadata at every step, int64 histograms), and the time to write them.

Layers alternate a [256, 256] kernel and a [256] bias, tags "dense_{i}/kernel" and
"dense_{i}/bias" (14 to 16 characters). Bytes per ratio point = file size / (layers x
steps) (the skipped-step marker and the metadata of the first step counted in). Bytes per
histogram = (size of the run with histograms - size without) / (layers x steps), measured
over --histogram-steps steps (a histogram's size does not depend on N).

    python benchmarks/scale.py                   # N = 1000
    python benchmarks/scale.py --steps 10000     # the issue's run
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))

from tb_wur_plugin import metadata, wur_summary  # noqa: E402
from tb_wur_plugin.tf_write import watch
from tb_wur_plugin.tf_write.variables import WatchedVariable
from tb_wur_plugin.writer import Counts, SummaryWriter  # noqa: E402
from tb_wur_plugin.arrays.numpy_math import bucket_counts  # noqa: E402
from old_layout import OldLayoutWriter  # noqa: E402


def tags(layers):
    return [f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers)]


def shapes(layers):
    return [[256, 256] if i % 2 == 0 else [256] for i in range(layers)]


class _AlwaysMetadata:
    """`recording.MetadataOnce` as the old code behaved: metadata at every write."""

    include = True

    def __init__(self, *args):
        pass

    def written(self, written):
        return written


@contextlib.contextmanager
def layout(old: bool):
    saved = (metadata.HISTOGRAM_WRITE_VERSION, watch.MetadataOnce)
    metadata.HISTOGRAM_WRITE_VERSION = 1 if old else 2
    if old:
        watch.MetadataOnce = _AlwaysMetadata
    try:
        yield
    finally:
        metadata.HISTOGRAM_WRITE_VERSION, watch.MetadataOnce = saved


def write_tf(logdir, layers, steps, histograms, old):
    rng = np.random.default_rng(0)
    variables = [tf.Variable(rng.standard_normal(s).astype(np.float32)) for s in shapes(layers)]
    watched_list = [WatchedVariable(t, v) for t, v in zip(tags(layers), variables)]
    original = watch.watched_variables
    watch.watched_variables = lambda _: watched_list

    @tf.function
    def step_fn(step):
        with wur_summary.watch(variables, step=step, histograms=histograms):
            for v in variables:
                v.assign_sub(1e-3 * v * tf.sin(tf.cast(step, tf.float32) + v))

    try:
        with layout(old), tf.summary.create_file_writer(logdir).as_default():
            start = time.perf_counter()
            for step in range(steps):
                step_fn(tf.constant(step, tf.int64))
            return time.perf_counter() - start
    finally:
        watch.watched_variables = original


def write_free(logdir, layers, steps, histograms, old):
    rng = np.random.default_rng(0)
    names = tags(layers)
    # precomputed counts of realistic elementwise ratios: lognormal around 1e-3
    counts = [Counts(bucket_counts(np.exp(rng.normal(np.log(1e-3), 1.0, int(np.prod(s))))))
              for s in shapes(layers)] if histograms else None
    with layout(old):
        writer = (OldLayoutWriter if old else SummaryWriter)(logdir)
        start = time.perf_counter()
        for step in range(steps):
            writer.add_ratios({t: 1e-3 * (1 + 0.5 * np.sin(step + i)) for i, t in enumerate(names)}, step)
            if histograms:
                writer.add_histograms(dict(zip(names, counts)), step)
        writer.close()
        return time.perf_counter() - start


def size(logdir):
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(logdir, "events.out.tfevents.*")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--histogram-steps", type=int, default=50)
    parser.add_argument("--ways", default="tf,free")
    parser.add_argument("--keep", help="write the runs into this directory and keep them")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp()
    print(f"{args.layers} layers; ratios over {args.steps} steps, histograms over "
          f"{args.histogram_steps} steps")
    print(f"{'writer':<6} {'layout':<6} {'file MB':>9} {'B/point':>8} {'B/hist':>7} "
          f"{'write s':>8} {'s/step':>8}")
    for way in args.ways.split(","):
        write = {"tf": write_tf, "free": write_free}[way]
        for old in (True, False):
            name = "old" if old else "new"
            logdir = os.path.join(root, f"{way}_{name}")
            seconds = write(logdir, args.layers, args.steps, False, old)
            ratios_bytes = size(logdir)
            plain = os.path.join(root, f"{way}_{name}_plain")
            write(plain, args.layers, args.histogram_steps, False, old)
            hist = os.path.join(root, f"{way}_{name}_hist")
            write(hist, args.layers, args.histogram_steps, True, old)
            per_hist = (size(hist) - size(plain)) / (args.layers * args.histogram_steps)
            print(f"{way:<6} {name:<6} {ratios_bytes / 1e6:9.2f} "
                  f"{ratios_bytes / (args.layers * args.steps):8.1f} {per_hist:7.1f} "
                  f"{seconds:8.1f} {seconds / args.steps * 1e3:6.2f}ms", flush=True)
            if not args.keep:
                for d in (logdir, plain, hist):
                    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

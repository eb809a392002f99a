"""A small logdir whose run and tag names are hostile: unicode, HTML, spaces, '%', '&',
quotes, backslashes. Written with the project's own summary API."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tb_wur_plugin import wur_summary

# run -> its ratio tags. A '/' in a run name makes a subdirectory: TensorBoard names the run
# by its path relative to the logdir.
RUNS = {
    "plain": ["dense/kernel", "dense/bias"],
    "ünï cødé ☃ 100% a&b=c;d+e": ["<b>bold</b>/kernel", "spa ce/%41&x=1#y", "ü/κ/😀"],
    "<script>alert(1)</script>": ["<img src=x onerror=alert(1)>", "q\"uo'te`s\\"],
}
# written by `watch` (ratios, histograms, the skipped-step marker; no learning rate), with a
# step at which nothing moved
WATCHED = "watched & skipped"
RUNS[WATCHED] = ["kernel", "bias"]
# a run with a learning rate and histograms but no ratio
NO_RATIOS = "lr & histograms only"
STEPS = 8
# the second tag of every run but WATCHED logs these, one per step
SPECIALS = [1e-3, math.inf, 0.0, math.nan, 5e-2, 1e-7, 2.5e-4, 1.0]


def value(tag_index: int, step: int) -> float:
    return SPECIALS[step] if tag_index == 1 else 1e-4 * (tag_index + 1) * (step + 1)


def write_runs(logdir: str) -> None:
    """Every run of RUNS (ratios for STEPS steps, histograms of its first tag, the learning
    rate; WATCHED as `watch` writes it), and NO_RATIOS."""
    for run, tags in RUNS.items():
        if run == WATCHED:
            continue
        writer = tf.summary.create_file_writer(f"{logdir}/{run}")
        with writer.as_default():
            for step in range(STEPS):
                for index, tag in enumerate(tags):
                    wur_summary.scalar(tag, value(index, step), step=step)
                    if index == 0:
                        wur_summary.histogram(tag, np.array([1e-3, 0.0, np.inf, 2e-5]), step=step)
                wur_summary.learning_rate(0.1, step=step)
        writer.close()
    writer = tf.summary.create_file_writer(f"{logdir}/{NO_RATIOS}")
    with writer.as_default():
        for step in range(STEPS):
            wur_summary.histogram("dense/kernel", np.array([1e-3]), step=step)
            wur_summary.learning_rate(0.1, step=step)
    writer.close()
    kernel = tf.Variable(np.ones((3, 2), np.float32), name="kernel")
    bias = tf.Variable(np.zeros(2, np.float32), name="bias")
    writer = tf.summary.create_file_writer(f"{logdir}/{WATCHED}")
    with writer.as_default():
        for step in range(STEPS):
            with wur_summary.watch([kernel, bias], step=step, histograms=True):
                if step != 2:
                    kernel.assign_add(tf.fill((3, 2), 1e-3))
                    bias.assign_add(tf.fill((2,), 1e-2))
    writer.close()

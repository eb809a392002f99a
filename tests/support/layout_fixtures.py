"""One small run's data, written in every layout the writers have written, for the tests that
read old and new layouts back alike (`tests/write/test_layouts.py`).

The committed fixtures under `tests/fixtures/layouts/` were written by this module's
`write_old_layouts` with the writers of protocol version 2 (commit 84db404), before the
packed layout existed, and are never rewritten: they are what users' old logdirs hold.

    python tests/support/layout_fixtures.py   # rewrites the fixtures (only with an old writer)

Layouts (one run directory each):
- ``per_tag_every_step``: one scalar per layer and step with the tag's metadata at every
  step, histograms version 1 (int64 counts), as writers before protocol version 2 wrote.
- ``per_tag_once``: the same with each tag's metadata once per event file and version-2
  (varint) histograms, as protocol version 2's writers wrote.
- ``tf_summary_ops``: `wur_summary.scalar` / `histogram` / `learning_rate`, one layer per
  call (TensorFlow's writer), as they write in every version.
"""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "layouts"
OLD_LAYOUTS = ("per_tag_every_step", "per_tag_once", "tf_summary_ops")

# the run's layers, in model order, with their shapes
LAYERS = (
    ("dense/kernel", (8, 4)),
    ("dense/bias", (4,)),
    ("out/kernel", (4, 3)),
    ("out/bias", (3,)),
)
STEPS = tuple(range(0, 40, 2))
SKIPPED_STEP = 10  # every ratio 0 there: the optimizer skipped the update
HISTOGRAM_STEPS = STEPS[::4]


def ratios() -> dict[int, dict[str, float]]:
    """{step: {tag: ratio}}: lognormal around 1e-3, all 0 at SKIPPED_STEP, a NaN and an inf
    in out/bias at the last two steps."""
    rng = np.random.default_rng(20261202)
    table = {}
    for step in STEPS:
        values = 10.0 ** rng.normal(-3, 0.5, len(LAYERS))
        if step == SKIPPED_STEP:
            values[:] = 0
        table[step] = {tag: float(v) for (tag, _), v in zip(LAYERS, values)}
    table[STEPS[-2]]["out/bias"] = float("nan")
    table[STEPS[-1]]["out/bias"] = float("inf")
    return table


def elementwise(step: int) -> dict[str, np.ndarray]:
    """{tag: the layer's elementwise ratios} at `step` (one of HISTOGRAM_STEPS)."""
    rng = np.random.default_rng(step)
    return {
        tag: 10.0 ** rng.normal(-3, 1, int(np.prod(shape))).reshape(shape).astype(np.float32)
        for tag, shape in LAYERS
    }


def learning_rate(step: int) -> float:
    return 1e-3 * 0.99 ** step


def write_with(writer, first_step: int = 0) -> None:
    """The run's data through `writer` (a `tb_wur_plugin.writer.SummaryWriter`), closed;
    its steps (and wall times) moved by `first_step`, a continuation of the run."""
    shapes = dict(LAYERS)
    for step, by_tag in ratios().items():
        at = step + first_step
        writer.add_ratios(by_tag, at, shapes=shapes, wall_time=1.7e9 + at)
        writer.add_learning_rate(learning_rate(step), at, wall_time=1.7e9 + at)
        if step in HISTOGRAM_STEPS:
            writer.add_histograms(elementwise(step), at, wall_time=1.7e9 + at)
    writer.close()


def write_old_layouts(root: pathlib.Path) -> None:
    """Each of OLD_LAYOUTS into `root/<layout>` with the writers of this checkout."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from old_layout import OldLayoutWriter

    from tb_wur_plugin import metadata
    from tb_wur_plugin.writer import SummaryWriter

    metadata.HISTOGRAM_WRITE_VERSION = 1
    write_with(OldLayoutWriter(str(root / "per_tag_every_step")))
    metadata.HISTOGRAM_WRITE_VERSION = 2
    write_with(SummaryWriter(str(root / "per_tag_once")))

    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    writer = tf.summary.create_file_writer(str(root / "tf_summary_ops"))
    with writer.as_default():
        for step, by_tag in ratios().items():
            for tag, value in by_tag.items():
                wur_summary.scalar(tag, value, step=step)
            wur_summary.learning_rate(learning_rate(step), step=step)
            if step in HISTOGRAM_STEPS:
                for tag, data in elementwise(step).items():
                    wur_summary.histogram(tag, data, step=step)
    writer.close()


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    write_old_layouts(FIXTURES)

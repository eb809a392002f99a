"""The example scripts run and write what the README says they write."""

import os
import subprocess
import sys

import numpy as np

from helpers import ratio_series, read_events
from tb_wur_plugin import metadata

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


def _run(script, *args):
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_custom_loop_example_logs_every_nth_step(tmp_path):
    _run("custom_loop.py", "--logdir", str(tmp_path), "--steps", "25", "--log_every", "10")
    series = ratio_series(str(tmp_path))
    assert len(series) == 6 and all(sorted(s) == [0, 10, 20] for s in series.values())
    events = read_events(str(tmp_path))
    assert [s for s, _, _ in events[metadata.LEARNING_RATE_TAG]] == [0, 10, 20]
    assert metadata.histogram_tag("digits/conv/kernel") in events


def test_keras_fit_example(tmp_path):
    _run("keras_fit.py", "--logdir", str(tmp_path), "--epochs", "1")
    series = ratio_series(str(tmp_path / "train"))
    assert len(series) == 6 and all(sorted(s)[:2] == [0, 10] for s in series.values())


def test_demo_runs_differ_in_their_ratios(tmp_path):
    _run("demo.py", "--logdir", str(tmp_path), "--epochs", "1", "--no-serve")
    low, high = (
        ratio_series(str(tmp_path / run / "train")) for run in ("lr_0.0003", "lr_0.1")
    )
    assert set(low) == set(high) and len(low) == 6
    for tag in (t for t in low if t.endswith("kernel")):  # biases start at 0: both huge
        low_median = np.median([r for r in low[tag].values() if np.isfinite(r)])
        high_median = np.median([r for r in high[tag].values() if np.isfinite(r)])
        assert high_median > 3 * low_median, tag

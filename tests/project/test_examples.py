"""The example scripts run and write what the README says they write."""

import json
import os
import subprocess
import sys

import numpy as np

from helpers import ratio_series, read_events
from tb_wur_plugin import cli, metadata

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")


def _run(script, *args):
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


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


def test_demo_flags_the_defect_and_nothing_else_on_a_quiet_console(tmp_path, capsys):
    """The demo's two runs: healthy, and the same with layer `logits` at a learning rate
    1000x too small. Only `logits/kernel` of the second is flagged, as a slow outlier (its
    zero-initialised bias is the sum of its own updates: its ratio does not depend on the
    learning rate); the console has no line that reads like an error (issue 23)."""
    output = _run("demo.py", "--logdir", str(tmp_path), "--epochs", "1", "--no-serve")
    assert "error" not in output.lower(), output
    healthy, slow = (ratio_series(str(tmp_path / run)) for run in ("healthy", "slow_logits"))
    assert set(healthy) == set(slow) and len(healthy) == 10

    def median(series, tag):
        return np.median([r for r in series[tag].values() if np.isfinite(r)])

    kernels = sorted(t for t in healthy if t.endswith("kernel"))
    defect = "digits/logits/kernel"
    peers = [median(slow, t) for t in kernels if t != defect]
    assert median(slow, defect) * 1000 <= np.median(peers)
    assert 500 < median(healthy, defect) / median(slow, defect) < 2000  # Adam: ratio ∝ lr
    healthy_kernels = [median(healthy, t) for t in kernels]
    assert max(healthy_kernels) < 10 * min(healthy_kernels)

    capsys.readouterr()
    assert cli.main(["report", str(tmp_path), "--format", "json", "--fail-on-flags"]) == 1
    runs = {run["run"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    flagged = {
        name: {layer["tag"]: layer["reason"] for layer in run["layers"] if layer["flagged"]}
        for name, run in runs.items()
    }
    assert flagged == {"healthy": {}, "slow_logits": {defect: "slow_outlier"}}

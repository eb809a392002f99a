"""PyTorch `watch` acting while training on two gloo ranks (tests/support/torch_acting_worker.py,
one run of it for all settings): under DDP and FSDP2, with a frozen parameter group or a NaN
(seeded on rank 0 alone), every rank fires the same flags at the same logged step, reaches
`should_stop` there, and leaves its loop after the same step, without a hang; rank 0's run
says the same as `tb-wur report`."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tb_wur_plugin import cli  # noqa: E402
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE  # noqa: E402
import torch_acting_worker as worker  # noqa: E402

WORKER_TIMEOUT_S = 240  # a hang (a rank that stopped alone) fails instead of stalling
STREAK_FIRES_AT = worker.K + (DEFAULT_PATIENCE - 1) * worker.EVERY

# setting: the flags every rank fires, (tag, reason, since, step, metric), in order
EXPECTED = {
    "ddp_frozen": [("2/weight", "not_moving", worker.K, STREAK_FIRES_AT, "frobenius"),
                   ("2/bias", "not_moving", worker.K, STREAK_FIRES_AT, "frobenius"),
                   ("2/weight", "not_moving", worker.K, STREAK_FIRES_AT, "spectral")],
    "ddp_nan": [("2/weight", "nan", worker.K, worker.K, "frobenius")],
    "fsdp2_frozen": [("2/weight", "not_moving", worker.K, STREAK_FIRES_AT, "frobenius"),
                     ("2/bias", "not_moving", worker.K, STREAK_FIRES_AT, "frobenius")],
    "fsdp2_nan": [("2/weight", "nan", worker.K, worker.K, "frobenius")],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The worker's logdir and its per-rank results {setting: [rank 0, rank 1]}."""
    logdir = str(tmp_path_factory.mktemp("acting_runs"))
    out = str(tmp_path_factory.mktemp("acting_out"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        done = subprocess.run([sys.executable, worker.__file__, logdir, out], env=env,
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the ranks did not finish in {WORKER_TIMEOUT_S} s (a hang):\n"
                             f"{(e.stderr or b'')[-3000:]!r}") from None
    assert done.returncode == 0, done.stderr[-5000:]
    results = {
        s: [json.load(open(os.path.join(out, f"{s}.rank_{r}.json"))) for r in (0, 1)]
        for s in worker.SETTINGS
    }
    return logdir, results


def _flags(result: dict) -> list[tuple]:
    return [(f["tag"], f["reason"], f["since"], f["step"], f["metric"]) for f in result["flags"]]


@pytest.mark.parametrize("setting", worker.SETTINGS)
def test_every_rank_fires_the_same_flags_and_stops_at_the_same_step(runs, setting):
    _, results = runs
    expected = EXPECTED[setting]
    fire_step = expected[0][3]
    for rank, result in enumerate(results[setting]):
        assert _flags(result) == expected, rank
        assert result["stopped_after"] == fire_step, rank
        assert result["should_stop"] == [s >= fire_step for s in range(fire_step + 1)], rank
        assert result["active"], rank  # every rank's handle listens to its optimizer
    assert results[setting][0]["flags"] == results[setting][1]["flags"]  # texts too


@pytest.mark.parametrize("setting", worker.SETTINGS)
def test_rank_0_writes_once_what_the_report_flags(runs, setting, capsys):
    logdir, results = runs
    run_dir = os.path.join(logdir, setting)
    assert len(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))) == 1
    metrics = sorted({f[4] for f in EXPECTED[setting]})
    for metric in metrics:
        capsys.readouterr()
        assert cli.main(["report", run_dir, "--format", "json", "--load_fast", "false",
                         "--metric", metric]) == 0
        (run,) = json.loads(capsys.readouterr().out)["runs"]
        reported = {(layer["tag"], layer["reason"], layer["since"])
                    for layer in run["layers"] if layer["flagged"]}
        assert reported == {(tag, reason, since) for tag, reason, since, _, m
                            in _flags(results[setting][0]) if m == metric}

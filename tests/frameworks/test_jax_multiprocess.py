"""JAX, several processes (multi-controller): two processes on CPU, two devices each,
params sharded over the four devices; every process calls log_update_ratios on the same
steps, process 0 with its writer, process 1 with writer=None. One event file; the ratios
(and spectral ratios) are those of the gathered full arrays, read back through the real
TensorBoard in both loaders. Judged while training with stop_on (process 1 with its own
TrainingJudgement), both processes fire the flags of the report and stop at the same step."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from framework_servers import both_loaders  # noqa: E402
from suite_paths import ROOT, SUPPORT  # noqa: E402
from training_flags import fired, reported  # noqa: E402

STEPS = 4
NAN_STEP = 2  # the batch of this step is NaN in the run judged while training


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two(logdir: str, spectral: bool, out: str, nan_step: int | None = None) -> None:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, os.environ.get("PYTHONPATH", "")]))
    extra = [] if nan_step is None else [str(nan_step)]
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(SUPPORT, "jax_multiprocess_worker.py"), str(pid),
             str(port), logdir, str(STEPS), "1" if spectral else "0", out, *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for pid in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=240)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("a JAX process hung (log_update_ratios must not block either process)")
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-3000:]


@pytest.mark.parametrize("spectral", [False, True])
def test_two_processes_write_one_event_file(tmp_path, spectral):
    logdir = tmp_path / "logs"
    run = logdir / "run"
    run.mkdir(parents=True)
    truth_file = str(tmp_path / "truth.json")
    _run_two(str(run), spectral, truth_file)
    events = [f for f in os.listdir(run) if "tfevents" in f]
    assert len(events) == 1, events
    with open(truth_file) as f:
        truth = json.load(f)
    metrics = ["frobenius", "spectral"] if spectral else ["frobenius"]
    with both_loaders(str(logdir), {"run": STEPS - 1}) as servers:
        for server in servers.values():
            for metric in metrics:
                status, _, body = server.get(
                    f"/data/plugin/wur/export?run=run&format=json&metric={metric}")
                assert status == 200, (metric, body[:300])
                got = {tag: {str(s): float(r) for _, s, r in points}
                       for tag, points in json.loads(body).items()}
                want = truth[metric]
                assert sorted(got) == sorted(want), metric
                rtol = 1e-5 if metric == "frobenius" else 1e-3
                for tag in want:
                    assert sorted(got[tag]) == sorted(want[tag]), (metric, tag)
                    for step, value in want[tag].items():
                        assert got[tag][step] == pytest.approx(value, rel=rtol), (
                            metric, tag, step)


def test_every_process_fires_the_same_flags_and_stops_at_the_same_step(tmp_path):
    """A NaN batch at NAN_STEP: process 0 judges through its writer, process 1 through its
    own TrainingJudgement, both with stop_on={"nan"}; both leave the loop at NAN_STEP (one
    that stopped alone would hang the other), with the flags the report gives the run."""
    logdir = tmp_path / "logs"
    run = logdir / "run"
    run.mkdir(parents=True)
    out = str(tmp_path / "stop.json")
    _run_two(str(run), True, out, nan_step=NAN_STEP)
    results = []
    for pid in range(2):
        with open(f"{out}.{pid}") as f:
            results.append(json.load(f))
    assert results[0] == results[1]
    assert results[0]["stopped_at"] == NAN_STEP
    flags = results[0]["flags"]
    # the NaN batch reaches the dense layer; the conv kernel's loss term reads no batch
    assert {(f["metric"], f["tag"]) for f in flags} == {
        ("frobenius", "dense/bias"), ("frobenius", "dense/kernel"), ("spectral", "dense/kernel")}
    assert {(f["reason"], f["since"], f["step"]) for f in flags} == {("nan", NAN_STEP, NAN_STEP)}
    assert fired(flags) == reported(str(logdir), "run", ("frobenius", "spectral"))

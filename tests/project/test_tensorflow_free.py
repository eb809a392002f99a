"""The core install without TensorFlow (README.md, "Installing into your own environment":
`pip install .` installs no TensorFlow; `.[tensorflow]` adds it).

Each check runs in a fresh interpreter whose `sys.meta_path` starts with a finder that makes
`tensorflow` (and `keras` where said) look not installed: importing it, or a submodule,
raises ModuleNotFoundError, as in a venv where only `pip install .` ran. There the
TensorFlow faces fail with one line naming `.[tensorflow]`, `writer.SummaryWriter` and the
PyTorch face write, `tb-wur report` reads, and the real `tensorboard` serves the WUR tab with
both loaders.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

import pytest

NOT_INSTALLED = '''
import importlib.util
import sys

class _NotInstalled:
    """A finder that makes the blocked top-level modules, and their submodules, look not
    installed: importing one raises ModuleNotFoundError, importlib.util.find_spec (with
    which e.g. torch probes for TensorFlow) answers None."""

    blocked = {blocked!r}

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

    @classmethod
    def wrap(cls, find_spec):
        def wrapped(name, package=None):
            if name.partition(".")[0] in cls.blocked:
                return None
            return find_spec(name, package)
        return wrapped

sys.meta_path.insert(0, _NotInstalled())
importlib.util.find_spec = _NotInstalled.wrap(importlib.util.find_spec)
'''


def _python(code: str, blocked=("tensorflow", "keras"), env=None, **kwargs):
    """`python -c CODE` with `blocked` not importable, as subprocess.Popen's arguments."""
    prelude = NOT_INSTALLED.format(blocked=set(blocked))
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return [sys.executable, "-c", prelude + textwrap.dedent(code)], environment


def _run(code: str, blocked=("tensorflow", "keras"), env=None, timeout=120):
    args, environment = _python(code, blocked, env)
    return subprocess.run(args, env=environment, capture_output=True, text=True, timeout=timeout)


FACES = {  # face -> what its message names
    "wur_summary": "TensorFlow", "armijo": "TensorFlow", "compat.v1": "TensorFlow",
    "keras": "Keras",
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_tensorflow_face_fails_with_one_line_naming_the_extra(face):
    """`python -c "from tb_wur_plugin import FACE"`: the traceback ends in one ImportError line
    naming the face and `.[tensorflow]`, with no chained ModuleNotFoundError above it."""
    package, _, name = f"tb_wur_plugin.{face}".rpartition(".")
    done = _run(f"from {package} import {name}")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"ImportError: tb_wur_plugin\.{re.escape(face)} needs {FACES[face]}\b.*: "
        r"pip install 'tb-wur-plugin\[tensorflow\]' \(or '\.\[tensorflow\]' from a checkout\)",
        last,
    ), done.stderr
    assert "During handling" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_the_keras_callback_needs_no_tensorflow_on_the_jax_backend():
    """Keras 3 without TensorFlow, on the JAX backend: the callback's module imports."""
    done = _run(
        """
        from tb_wur_plugin.keras import WeightUpdateRatioCallback
        import keras
        assert keras.backend.backend() == "jax"
        print("OK")
        """,
        blocked=("tensorflow",), env={"KERAS_BACKEND": "jax"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr


def test_the_judgement_while_training_needs_no_tensorflow():
    """`tb_wur_plugin.Flag` and `writer.TrainingJudgement` import, and a `SummaryWriter`
    judges what it writes (a NaN fires, `should_stop`), with TensorFlow and Keras blocked."""
    done = _run(
        """
        import sys, tempfile
        from tb_wur_plugin import Flag
        from tb_wur_plugin.writer import SummaryWriter, TrainingJudgement

        with tempfile.TemporaryDirectory() as directory:
            with SummaryWriter(directory, stop_on={"nan"}) as w:
                w.add_ratios({"fc1/weight": 1e-3, "fc1/bias": float("nan")}, step=0)
        assert w.should_stop and [type(f) for f in w.flags] == [Flag]
        assert TrainingJudgement(stop_on={"nan"}).flags == []
        print([m for m in sys.modules if m.partition(".")[0] in ("tensorflow", "keras")])
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def logdir():
    """Runs written with TensorFlow blocked: `writer.SummaryWriter` (ratios, histograms, the
    learning rate) and the PyTorch face; `tb-wur report` (cli.main) read with both loaders."""
    with tempfile.TemporaryDirectory() as directory:
        done = _run(
            f"""
            import contextlib, io, json
            import numpy as np
            import torch
            from tb_wur_plugin import cli, metadata, writer
            from tb_wur_plugin import torch as wur_torch

            with writer.SummaryWriter({directory!r} + "/numpy_run") as w:
                for step in range(20):
                    w.add_ratios({{"fc1/weight": 1e-3 * (1 + step), "fc1/bias": 3e-4}}, step=step)
                    w.add_histograms({{"fc1/weight": np.full(10, 1e-3 * (1 + step))}}, step=step)
                    w.add_learning_rate(1e-3, step=step)

            torch.manual_seed(0)
            model = torch.nn.Linear(3, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            handle = wur_torch.watch(optimizer, model, {directory!r} + "/torch_run", every=1)
            for _ in range(5):
                optimizer.zero_grad()
                model(torch.ones(4, 3)).sum().backward()
                optimizer.step()
            handle.remove()

            reports = {{}}
            for load_fast in ("false", "true"):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    status = cli.main(["report", {directory!r}, "--format", "json",
                                       "--load_fast", load_fast])
                reports[load_fast] = [status, json.loads(out.getvalue())]
            blocked = [m for m in sys.modules if m.partition(".")[0] in ("tensorflow", "keras")]
            print(json.dumps({{"reports": reports, "imported": blocked}}))
            """,
        )
        assert done.returncode == 0, done.stderr
        yield directory, json.loads(done.stdout.strip().splitlines()[-1])


def test_the_writers_write_and_the_report_reads_without_tensorflow(logdir):
    _, result = logdir
    assert result["imported"] == []
    for load_fast, (status, report) in result["reports"].items():
        assert status == 0, load_fast
        runs = {run["run"]: run for run in report["runs"]}
        assert sorted(runs) == ["numpy_run", "torch_run"], load_fast
        numpy_layers = {l["tag"]: l for l in runs["numpy_run"]["layers"]}
        assert sorted(numpy_layers) == ["fc1/bias", "fc1/weight"]
        assert numpy_layers["fc1/weight"]["logged_steps"] == 20
        assert numpy_layers["fc1/weight"]["last"] == pytest.approx(0.02, rel=1e-6)
        torch_layers = {l["tag"]: l for l in runs["torch_run"]["layers"]}
        assert sorted(torch_layers) == ["bias", "weight"]
        assert all(l["logged_steps"] == 5 for l in torch_layers.values())


class _TensorBoard:
    """`tensorboard --logdir LOGDIR` (tensorboard.main.run_main, the console script's
    function) in its own session, with TensorFlow and Keras blocked."""

    def __init__(self, logdir: str, load_fast: bool):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        argv = ["tensorboard", "--logdir", logdir, "--host", "127.0.0.1", "--port", "0",
                f"--load_fast={'true' if load_fast else 'false'}"]
        if not load_fast:
            argv += ["--reload_interval", "0", "--reload_task", "blocking"]
        args, environment = _python(
            f"sys.argv = {argv!r}\nfrom tensorboard import main\nmain.run_main()\n"
        )
        self.process = subprocess.Popen(args, env=environment, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.url = None

    def __enter__(self) -> "_TensorBoard":
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", self.output())
            if match:
                self.url = f"http://127.0.0.1:{match.group(1)}"
                return self
            time.sleep(0.05)
        self.__exit__()
        raise AssertionError(f"tensorboard did not start:\n{self.output()}")

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # with the fast loader's data server
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return response.status, response.read()

    def get_json(self, path: str):
        status, body = self.get(path)
        assert status == 200, (path, status)
        return json.loads(body)


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_tensorboard_serves_the_tab_without_tensorflow(logdir, load_fast):
    directory, _ = logdir
    with _TensorBoard(directory, load_fast) as server:
        assert "TensorFlow installation not found" in server.output()
        listing = server.get_json("/data/plugins_listing")
        assert listing.get("wur", {}).get("enabled") is True, (listing, server.output())
        deadline = time.monotonic() + 60
        while True:
            runs = {r["run"]: r for r in server.get_json("/data/plugin/wur/runs")["runs"]}
            if sorted(runs) == ["numpy_run", "torch_run"] and all(
                l["logged_steps"] == 20 for l in runs["numpy_run"]["layers"]
            ):
                break
            assert time.monotonic() < deadline, (runs, server.output())
            time.sleep(0.1)
        assert [l["tag"] for l in runs["numpy_run"]["layers"]] == ["fc1/weight", "fc1/bias"]
        status, body = server.get("/data/plugin/wur/heatmap?run=numpy_run")
        assert status == 200 and body
        assert "Traceback" not in server.output()

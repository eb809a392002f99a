"""Runs the real `tensorboard` command on 127.0.0.1 for tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


class TensorBoardServer:
    """`tensorboard --logdir LOGDIR` with the fast (Rust) or the Python loader."""

    def __init__(self, logdir: str, load_fast: bool, extra_args: tuple[str, ...] = ()):
        self.logdir = logdir
        self.load_fast = load_fast
        self.extra_args = extra_args
        self.url = None

    def __enter__(self) -> "TensorBoardServer":
        args = [
            sys.executable, "-m", "tensorboard.main", "--logdir", self.logdir,
            "--host", "127.0.0.1", "--port", "0",
            f"--load_fast={'true' if self.load_fast else 'false'}",
        ]
        if not self.load_fast:
            args += ["--reload_interval", "0", "--reload_task", "blocking"]
        self._log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self._process = subprocess.Popen(
            args + list(self.extra_args), stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            self._log.seek(0)
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", self._log.read())
            if match:
                self.url = f"http://127.0.0.1:{match.group(1)}"
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"tensorboard did not start:\n{self.output()}")

    def __exit__(self, *exc) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()

    def get(self, path: str, headers: dict | None = None, timeout: float = 60
            ) -> tuple[int, dict, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def get_json(self, path: str):
        status, _, body = self.get(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def wait_for(self, predicate, path: str, timeout: float = 90):
        """GET `path` as JSON until `predicate(json)` holds; return that JSON."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.get_json(path)
            if predicate(data):
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting on {path}: {data}\n{self.output()}")
            time.sleep(0.5)

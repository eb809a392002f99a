"""Runs the real `tensorboard` command on 127.0.0.1 for tests.

Each server is its own process running `tensorboard.main.run_main()` (the `tensorboard`
console script) with its own argv, in its own session. The processes are forked by one
multiprocessing fork server per test process that has imported TensorBoard, TensorFlow
(which TensorBoard's start-up imports) and the plugin once, so that a server starts in about
a second instead of the ten that importing TensorFlow takes. TB_SERVER_SUBPROCESS=1, or a
main script (which multiprocessing would run again in each process), starts `python -m
tensorboard.main` afresh instead, as before.
"""

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

import forked


def _main_is_not_rerun() -> bool:
    """Whether a process of the fork server leaves __main__ alone (it runs a main script
    again, as multiprocessing's spawn does: a benchmark run as a script starts `python -m
    tensorboard.main` instead)."""
    main = sys.modules["__main__"]
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name == "__main__" or name.endswith(".__main__")
    return getattr(main, "__file__", None) is None


def _serve(argv: list[str], log_path: str, cwd: str, env: dict[str, str]) -> None:
    """In the forked process: `tensorboard ARGV` with stdout and stderr to `log_path`."""
    os.setsid()  # its own process group: stopped with the data server it starts
    forked.enter(cwd, env, log_path)
    sys.argv = ["tensorboard", *argv]
    from tensorboard import main

    main.run_main()


class _Forked:
    """The forked server process, with the part of subprocess.Popen's interface used here."""

    def __init__(self, argv: list[str], log_path: str, env: dict[str, str]):
        self._process = forked.context().Process(
            target=_serve, args=(argv, log_path, os.getcwd(), env), daemon=True,
        )
        self._process.start()
        self.pid = self._process.pid

    def poll(self):
        return self._process.exitcode

    def wait(self, timeout=None):
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("tensorboard", timeout)
        return self._process.exitcode


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
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        if os.environ.get("TB_SERVER_SUBPROCESS") == "1" or not _main_is_not_rerun():
            self._process = subprocess.Popen(
                args + list(self.extra_args), stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True, env=env,
            )
        else:  # the same argv, after `python -m tensorboard.main`
            self._process = _Forked(args[3:] + list(self.extra_args), self._log.name, env)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            self._log.seek(0)
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", self._log.read())
            if match:
                self.url = f"http://127.0.0.1:{match.group(1)}"
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"tensorboard did not start:\n{self.output()}")

    def __exit__(self, *exc) -> None:
        if self._process.poll() is None:
            self._kill(signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._kill(signal.SIGKILL)
                self._process.wait()

    def _kill(self, sig: int) -> None:
        try:
            os.killpg(self._process.pid, sig)
        except ProcessLookupError:  # forked, not yet in its own session
            os.kill(self._process.pid, sig)

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
            time.sleep(0.1)

"""Processes forked from one interpreter that has imported TensorFlow, Keras, TensorBoard and
the plugin already, so that each skips the five or so seconds of CPU those imports take.

One multiprocessing fork server per test process, started at the first use with `PRELOAD`
imported: `tb_server` forks its TensorBoard servers from it, `run_script` and `start_script`
the scripts that import TensorFlow (the benchmarks' smoke runs, the `tf.distribute`
workers). A script that needs a fresh interpreter (an environment variable read at import,
such as KERAS_BACKEND, or its console at start-up) runs as `python SCRIPT` instead.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys
import tempfile
import threading

# what TensorBoard's start-up imports (tensorboard.main imports tensorflow) and what the
# benchmarks import
PRELOAD = ["tensorboard.main", "tensorboard.default", "tensorboard.program",
           "tensorboard.data.server_ingester", "tensorflow", "keras", "tb_wur_plugin.plugin"]
_context = None
_lock = threading.Lock()


def context() -> multiprocessing.context.ForkServerContext:
    """The multiprocessing context whose processes fork from the preloaded server."""
    global _context
    with _lock:
        if _context is None:
            forkserver = multiprocessing.get_context("forkserver")
            forkserver.set_forkserver_preload(PRELOAD)
            _context = forkserver
        return _context


def enter(cwd: str, env: dict[str, str], stdout_path: str, stderr_path: str | None = None
          ) -> None:
    """In a forked process: work in `cwd` with the environment `env` (in place of the fork
    server's); stdout (the descriptor and sys.stdout, line buffered) appended to
    `stdout_path`, stderr to `stderr_path` (default: the same file)."""
    for fd, path in ((1, stdout_path), (2, stderr_path or stdout_path)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)


def _script(argv: list[str], stdout_path: str, stderr_path: str, cwd: str,
            env: dict[str, str]) -> None:
    """In the forked process: `python ARGV` (runs ARGV[0] as __main__ with sys.argv = ARGV)."""
    enter(cwd, env, stdout_path, stderr_path)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")


class Script:
    """`python ARGV` running in a forked process (see `start_script`)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None) -> None:
        self.argv = list(argv)
        self._out = tempfile.NamedTemporaryFile("w+")
        self._err = tempfile.NamedTemporaryFile("w+")
        self._process = context().Process(target=_script, args=(
            self.argv, self._out.name, self._err.name, os.getcwd(),
            dict(os.environ if env is None else env)))
        self._process.start()

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """(exit status, stdout, stderr), once the script has ended: an uncaught exception
        exits 1 with its traceback on stderr, sys.exit(n) exits n.

        Raises:
            TimeoutError: the script ran longer than `timeout` seconds from now (it is killed).
        """
        try:
            self._process.join(timeout)
            if self._process.exitcode is None:
                self.kill()
                raise TimeoutError(
                    f"{self.argv[0]} ran over {timeout} s:\n{self._err.read()[-3000:]}")
            return self._process.exitcode, self._out.read(), self._err.read()
        finally:
            self._out.close()
            self._err.close()

    def kill(self) -> None:
        """Ends the script now if it still runs."""
        if self._process.exitcode is None:
            self._process.kill()
            self._process.join()


def start_script(argv: list[str], env: dict[str, str] | None = None) -> Script:
    """`python ARGV` started in a forked process with the environment `env` (default: this
    process's), in this directory; `Script.finish` waits for it."""
    return Script(argv, env)


def run_script(argv: list[str], timeout: float, env: dict[str, str] | None = None
               ) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python ARGV` run in a forked process (see
    `Script.finish`).

    Raises:
        TimeoutError: the script ran longer than `timeout` seconds (it is killed).
    """
    return start_script(argv, env).finish(timeout)

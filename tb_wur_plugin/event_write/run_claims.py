"""One writer of logged steps per run directory and process (issue 25).

Two PyTorch `watch` handles, or two Keras `WeightUpdateRatioCallback`s in one `fit`, writing
the same run directory count their steps independently: the run then holds each step twice,
in two event files, and TensorBoard's fast loader, reading the second file's steps going back
after the first's, keeps a different set of points than the Python loader. So each of them
claims its run directory while it is active, and a second claim of a directory held by an
active one raises a `RuntimeError` that names the directory and the holder.

Directories are compared as paths: local ones made absolute with symbolic links resolved,
URLs (`gs://...`) as written, less a trailing '/'. Imports no TensorFlow module.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable, NamedTuple


class _Claim(NamedTuple):
    holder: weakref.ref
    description: str
    remedy: str
    active: Callable[[Any], bool]


_CLAIMS: dict[str, _Claim] = {}
_LOCK = threading.Lock()


def run_key(run_dir: str | os.PathLike) -> str:
    """The key of a run directory: equal for two spellings of one directory."""
    path = os.fspath(run_dir)
    if "://" in path:
        return path.rstrip("/") or path
    return os.path.normcase(os.path.realpath(os.path.abspath(path)))


def check(run_dir: str | os.PathLike, holder: Any = None) -> str:
    """Raise the `claim` error if an active holder other than `holder` has claimed
    `run_dir`; else return its key (claiming nothing)."""
    key = run_key(run_dir)
    with _LOCK:
        _check(key, run_dir, holder)
    return key


def claim(
    run_dir: str | os.PathLike,
    holder: Any,
    description: str,
    remedy: str,
    active: Callable[[Any], bool] = lambda holder: True,
) -> str:
    """Claim `run_dir` for `holder` (held weakly: a holder that is garbage-collected frees
    it). Returns the key to pass to `release`.

    Args:
      run_dir: the directory the holder writes events into.
      holder: the object that writes (a `WatchHandle`, a callback); weak-referenceable.
      description: what the holder is, for another claimant's error message.
      remedy: what frees the directory from this holder, for that message (e.g. "Call
        remove() on the first handle"; the message adds ", or write into another
        directory.").
      active: `active(holder)` is False once the holder no longer writes (the directory is
        then free without a `release`).

    Raises:
      RuntimeError: another active holder has claimed the same directory.
    """
    key = run_key(run_dir)
    with _LOCK:
        _check(key, run_dir, holder)
        _CLAIMS[key] = _Claim(weakref.ref(holder), description, remedy, active)
    return key


def _check(key: str, run_dir: str | os.PathLike, holder: Any) -> None:
    held = _CLAIMS.get(key)
    if held is None:
        return
    other = held.holder()
    if other is None or other is holder or not held.active(other):
        return
    raise RuntimeError(
        f"{os.fspath(run_dir)!r} is already the run directory of an active "
        f"{held.description} in this process: a second writer of the same run would log "
        "its steps a second time, and TensorBoard's loaders would drop some of them. "
        f"{held.remedy}, or write into another directory."
    )


def release(key: str | None, holder: Any) -> None:
    """Free the directory `key` if `holder` holds it (idempotent)."""
    if key is None:
        return
    with _LOCK:
        held = _CLAIMS.get(key)
        if held is not None and (held.holder() is holder or held.holder() is None):
            del _CLAIMS[key]

"""The one cache of the read side: values by key, each valid for the signature of the data it
was made from, the least recently used dropped first. It keeps a run's matrix and step index
(run_data), the Python loader's scalar listing (run_data) and the plugin's `/heatmap` and
`/flags` answers (web.answers)."""

from __future__ import annotations

import collections
import threading
from typing import Generic, Hashable, TypeVar

Value = TypeVar("Value")


class LruCache(Generic[Value]):
    """Values by key, each given back only for the signature it was put with (new data makes
    it stale); thread-safe.

    Args:
        max_entries: the most values kept (None: no limit by count).
        max_bytes: the most memory the values may hold together, by their `nbytes` (None:
            no limit by size; else every value put has an `nbytes`).

    Beyond either limit the least recently used values are dropped; the last one put is
    always kept.
    """

    def __init__(self, max_entries: int | None = None, max_bytes: int | None = None):
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._entries: collections.OrderedDict[Hashable, tuple[object, Value]] = (
            collections.OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, signature: object) -> Value | None:
        """The value put for `key` with a signature equal to `signature`; None if there is
        none (also when `key` holds one of another signature)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != signature:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: Hashable, signature: object, value: Value) -> None:
        """Keeps `value` for `key` and `signature`, replacing what `key` held."""
        with self._lock:
            replaced = self._entries.pop(key, None)
            if replaced is not None:
                self._bytes -= self._size(replaced[1])
            self._entries[key] = (signature, value)
            self._bytes += self._size(value)
            while len(self._entries) > 1 and self._over_limits():
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= self._size(dropped)

    def _size(self, value: Value) -> int:
        return value.nbytes if self._max_bytes is not None else 0  # type: ignore[attr-defined]

    def _over_limits(self) -> bool:
        return (self._max_entries is not None and len(self._entries) > self._max_entries) or (
            self._max_bytes is not None and self._bytes > self._max_bytes
        )

"""read.lru_cache.LruCache: the one cache of the read side (run matrices and step indexes, the
Python loader's listings, the /heatmap answers)."""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.read.lru_cache import LruCache


def test_a_value_is_given_back_only_for_its_signature():
    cache: LruCache[str] = LruCache(max_entries=4)
    assert cache.get("run", (1,)) is None
    cache.put("run", (1,), "old")
    assert cache.get("run", (1,)) == "old"
    assert cache.get("run", (2,)) is None  # new data: stale
    cache.put("run", (2,), "new")  # replaces what the key held
    assert cache.get("run", (1,)) is None
    assert cache.get("run", (2,)) == "new"


def test_beyond_max_entries_the_least_recently_used_is_dropped():
    cache: LruCache[str] = LruCache(max_entries=2)
    cache.put("a", 0, "A")
    cache.put("b", 0, "B")
    assert cache.get("a", 0) == "A"  # a is now the most recently used
    cache.put("c", 0, "C")
    assert cache.get("b", 0) is None
    assert (cache.get("a", 0), cache.get("c", 0)) == ("A", "C")


def test_beyond_max_bytes_the_least_recently_used_are_dropped_the_last_put_kept():
    cache: LruCache[np.ndarray] = LruCache(max_bytes=100)
    cache.put("a", 0, np.zeros(40, np.uint8))
    cache.put("b", 0, np.zeros(40, np.uint8))
    cache.put("a", 0, np.zeros(50, np.uint8))  # replaced: its old bytes no longer count
    assert cache.get("b", 0) is not None and len(cache.get("a", 0)) == 50
    cache.put("c", 0, np.zeros(20, np.uint8))  # 110 bytes: b, the least recently used, goes
    assert cache.get("b", 0) is None
    assert cache.get("a", 0) is not None and cache.get("c", 0) is not None
    cache.put("huge", 0, np.zeros(1000, np.uint8))  # over the limit alone: kept, all else goes
    assert cache.get("huge", 0) is not None
    assert cache.get("a", 0) is None and cache.get("c", 0) is None

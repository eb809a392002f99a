"""numpy work shared by threads: numpy's loops run outside the GIL, so the blocks of a large
run's arrays are computed by two threads at once (the judgement of a whole run,
and the read side's heatmap reduction); and `computed_once`, a cached property that threads
working on different objects do not wait on. Pure Python.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import os
import threading
from typing import Any, Callable, Iterable, Iterator, TypeVar

# Threads that compute items at once (a pool's, made for each call).
THREADS = min(2, os.cpu_count() or 1)

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def in_threads(func: Callable[[_Item], _Result], items: Iterable[_Item]) -> Iterator[_Result]:
    """func(item) of each item, in order, computed THREADS at a time.

    A pool of THREADS threads (made for the call, ended with the iterator) computes the
    items up to 2 × THREADS ahead of the one the caller reads, so that what the caller does
    with each result runs while the pool goes on. A result that raised raises when read;
    the items not started then are not computed.

    Args:
        func: a function that spends its time in numpy (or elsewhere outside the GIL).
        items: its arguments.

    Returns:
        An iterator of the results, in the order of `items`.

    Example:
        >>> list(in_threads(lambda x: x * x, range(4)))
        [0, 1, 4, 9]
    """
    items = list(items)
    if THREADS == 1 or len(items) < 2:
        yield from map(func, items)
        return
    pool = concurrent.futures.ThreadPoolExecutor(THREADS)
    try:
        waiting = iter(items)
        ahead = collections.deque(
            pool.submit(func, item) for item in itertools.islice(waiting, 2 * THREADS))
        while ahead:
            result = ahead.popleft().result()
            for item in itertools.islice(waiting, 1):
                ahead.append(pool.submit(func, item))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class computed_once:
    """A property computed when first read and kept in the object's `__dict__`, as
    `functools.cached_property`, locked per object: Python 3.11's cached_property holds one
    lock for every object of the class while it computes, so threads reading the property of
    different objects (two blocks of a judgement, two runs' first heatmaps) waited for each
    other. Here a reader of the same object meanwhile waits for the one computation, and
    readers of other objects do not. Works on frozen dataclasses (it writes `__dict__`).

    Example:
        >>> class Square:
        ...     def __init__(self, x):
        ...         self.x = x
        ...     @computed_once
        ...     def area(self):
        ...         return self.x * self.x
        >>> Square(3).area
        9
    """

    def __init__(self, compute: Callable[[Any], Any]):
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        kept = instance.__dict__  # once set there, it is read without this descriptor
        with kept.setdefault(f"_{self.name}_lock", threading.Lock()):
            if self.name not in kept:
                kept[self.name] = self.compute(instance)
        return kept[self.name]

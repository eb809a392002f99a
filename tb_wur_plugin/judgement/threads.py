"""numpy work shared by threads: numpy's loops run outside the GIL, so the blocks of a large
run's arrays are computed by this thread and one more at once (the judgement of a whole run,
and the read side's heatmap reduction). Pure Python.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Callable, Iterable, Iterator, TypeVar

# Threads that compute items at once, this one among them.
THREADS = min(2, os.cpu_count() or 1)

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def in_threads(func: Callable[[_Item], _Result], items: Iterable[_Item]) -> Iterator[_Result]:
    """func(item) of each item, in order, computed THREADS at a time.

    One item of each THREADS is computed on the calling thread, the others on a pool's
    (made for the call, its threads ended when the iterator is).

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
    if THREADS == 1:
        yield from map(func, items)
        return
    with concurrent.futures.ThreadPoolExecutor(THREADS - 1) as pool:
        for i in range(0, len(items), THREADS):
            others = [pool.submit(func, item) for item in items[i + 1:i + THREADS]]
            yield func(items[i])
            for other in others:
                yield other.result()

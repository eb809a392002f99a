"""The timing loop that `training.py`'s fit part and `keras_fit.py` share: whole `fit` epochs
of several models, interleaved in a random order each round."""

from __future__ import annotations

import random
import time
from typing import Any


def interleaved_fit_epochs(
    models: dict[str, Any], callbacks: dict[str, list], x: Any, y: Any, rounds: int,
) -> dict[str, list[float]]:
    """Time one `fit` epoch (batch 128) of each of `models` with its `callbacks` per round.

    Args:
      models, callbacks: by variant name; the variant "fit" is the reference.
      x, y: the epoch's data.
      rounds: how many rounds.

    Returns:
      {variant: [its epoch time / the reference's, one per round]} for every variant but
      "fit".
    """
    ratios: dict[str, list[float]] = {name: [] for name in callbacks if name != "fit"}
    for _ in range(rounds):
        names = list(callbacks)
        random.shuffle(names)
        times = {}
        for name in names:
            start = time.perf_counter()
            models[name].fit(x, y, batch_size=128, epochs=1, verbose=0,
                             callbacks=callbacks[name])
            times[name] = time.perf_counter() - start
        for name in ratios:
            ratios[name].append(times[name] / times["fit"])
    return ratios

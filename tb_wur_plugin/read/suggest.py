"""Suggested learning rates: lr · target / ratio, the learning rate that would bring a layer's
weight-update ratio to `target` (exact for plain SGD, where the update is proportional to the
learning rate; a first-order estimate for Adam-type optimizers; momentum and schedules are
ignored). Pure numpy.

Per layer, over its last `last` logged steps: the steps S among them that the optimizer did
not skip, whose ratio is finite and positive and at which a finite positive learning rate was
logged (`_wur/learning_rate`, the value written last at the step). Suggested =
G(lr over S) · target / G(ratio over S), G the geometric mean; None when S is empty (no
learning rate logged at those steps, or no usable ratio).
"""

from __future__ import annotations

import numpy as np

from tb_wur_plugin.read.heatmap import RunMatrix

DEFAULT_TARGET = 1e-3
DEFAULT_LAST = 10


def suggested_learning_rates(
    matrix: RunMatrix,
    learning_rate: tuple[np.ndarray, np.ndarray] | None,
    target: float = DEFAULT_TARGET,
    last: int = DEFAULT_LAST,
) -> list[dict]:
    """The suggestion of each layer of `matrix`, in its order.

    Args:
        matrix: the run's ratios.
        learning_rate: (steps ascending and distinct, values) of the run's learning rate;
            None when the run logs none.
        target: the ratio to reach (positive).
        last: how many of each layer's last logged steps count (>= 1).

    Returns:
        One dict per layer: tag, suggested_learning_rate (None when unknown), ratio and
        learning_rate (their geometric means over S, None when S is empty), steps (|S|).
    """
    if last < 1:
        raise ValueError(f"last must be at least 1, got {last}")
    if not (target > 0 and np.isfinite(target)):
        raise ValueError(f"target must be positive and finite, got {target}")
    n_steps = len(matrix.steps)
    lr = np.full(n_steps, np.nan)
    if learning_rate is not None and len(learning_rate[0]):
        lr_steps, lr_values = learning_rate
        at = np.searchsorted(lr_steps, matrix.steps)
        hit = at < len(lr_steps)
        hit[hit] = lr_steps[at[hit]] == matrix.steps[hit]
        lr[hit] = np.asarray(lr_values, np.float64)[at[hit]]
    judged = ~matrix.skipped_mask
    with np.errstate(invalid="ignore"):
        lr_ok = (lr > 0) & (lr < np.inf)
    layers = []
    for row, tag in enumerate(matrix.tags):
        columns = np.flatnonzero(matrix.present[row])[-last:]
        r = matrix.values[row, columns]
        with np.errstate(invalid="ignore"):
            ok = judged[columns] & (r > 0) & (r < np.inf) & lr_ok[columns]
        if ok.any():
            ratio = float(np.exp(np.mean(np.log(r[ok]))))
            rate = float(np.exp(np.mean(np.log(lr[columns][ok]))))
            suggested = rate * target / ratio
        else:
            ratio = rate = suggested = None
        layers.append(
            {
                "tag": tag,
                "suggested_learning_rate": suggested,
                "ratio": ratio,
                "learning_rate": rate,
                "steps": int(ok.sum()),
            }
        )
    return layers

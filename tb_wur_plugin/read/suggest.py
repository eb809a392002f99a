"""Suggested learning rates: lr · target / ratio, the learning rate that would bring a layer's
weight-update ratio to `target`. Pure numpy.

What it assumes (`ASSUMES`; `CAVEAT` says it all to the user): the update is proportional to
the learning rate at the state logged. That holds for SGD (the update is lr · g: the ratio is
lr · ‖g‖/‖w‖), SGD with momentum (lr · the velocity, which does not depend on lr in PyTorch's
form) and for Adam-type optimizers (lr · m̂/(√v̂ + ε), and AdamW's decoupled decay lr · λ · w:
the ratio is about lr / rms(w), it scales with lr and not with the gradient). So it gives
exactly `target` for the next update from the same weights and optimizer state
(tests/judgement/test_judgement.py checks it on PyTorch SGD and Adam); what it does not model is
the course after (a schedule, the weights' growth, momentum built at another rate). What differs
between the families is the target worth aiming at: an Adam-type ratio of about lr / rms(w)
(≈ 2e-2 at lr 1e-3 for weights of rms 0.05, more for small biases) is healthy, so `target`
(default 1e-3, an SGD rule of thumb) is for the user to choose per optimizer.

A layer whose ratios are not finite (NaN at any logged step, or +inf after the first update
that moved it: the judgement's nan and inf) gets no
suggestion: its learning rate is not what is wrong, or not the only thing.

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
FORMULA = "lr * target / ratio"
ASSUMES = "update proportional to the learning rate (SGD, momentum, Adam, AdamW)"
# What a suggestion is worth, in words: the report prints it and /suggestions sends it
# (`"caveat"`), which the tab shows as it comes.
CAVEAT = (
    f"Assumes an {ASSUMES}: exact for the next update from the same weights and optimizer "
    "state; not modelled: learning-rate schedules, the weights' growth, momentum built up at "
    "the old rate. Choose the target per optimizer: Adam-type ratios (about lr / rms(w)) are "
    "healthy well above 1e-3."
)


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
        One dict per layer: tag, suggested_learning_rate (None when unknown or the layer's
        ratios are not finite), ratio and learning_rate (their geometric means over S, None
        when S is empty, given also where the ratios are not finite), steps (|S|), finite
        (False when the layer has NaN at a logged step or +inf after the first update that
        moved it).
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
        logged = np.flatnonzero(matrix.present[row])
        columns = logged[-last:]
        r = matrix.values[row, columns].astype(np.float64)
        with np.errstate(invalid="ignore"):
            ok = judged[columns] & (r > 0) & (r < np.inf) & lr_ok[columns]
            every = matrix.values[row, logged].astype(np.float64)
            moved = np.flatnonzero(judged[logged] & (every > 0))  # its first update that moved
            after = every[moved[0] + 1:] if len(moved) else every[:0]
            finite = not (np.any(~(every >= 0)) or np.any(after == np.inf))
        if ok.any():
            ratio = float(np.exp(np.mean(np.log(r[ok]))))
            rate = float(np.exp(np.mean(np.log(lr[columns][ok]))))
            suggested = rate * target / ratio if finite else None
        else:
            ratio = rate = suggested = None
        layers.append(
            {
                "tag": tag,
                "suggested_learning_rate": suggested,
                "ratio": ratio,
                "learning_rate": rate,
                "steps": int(ok.sum()),
                "finite": bool(finite),
            }
        )
    return layers

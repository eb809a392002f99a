"""The JAX and PyTorch backends of `WeightUpdateRatioCallback`: device-side snapshots and
norms, each logged step written through the TensorFlow-free write path
(`event_write.LoggedStepWriter`). Imports no TensorFlow module."""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, NamedTuple

import keras
import numpy as np

from tb_wur_plugin.arrays.numpy_math import ratios_from_norms
from tb_wur_plugin.arrays.spectral import TRAILING_FAN_OUT, SpectralState
from tb_wur_plugin.event_write import LoggedLayer, LoggedStep, LoggedStepWriter, SummaryWriter
from tb_wur_plugin.metadata import unique_tags


class Watched(NamedTuple):
    """A variable whose ratio is logged, and its tag."""

    tag: str
    variable: Any


class Logger:
    """Writes the callback's logged steps into `log_dir/train` with a `SummaryWriter`; with
    `spectral`, also the spectral ratios of the variables of two or more dimensions,
    warm-started from the vectors this logger kept at its previous logged step (one logger
    per `fit`: each `fit` starts cold). The writer, made with `judging`'s settings, judges
    each logged step as it writes it (`judgement`)."""

    active = True
    step_log = None  # the line search is TensorFlow's

    def __init__(
        self, model: Any, log_dir: str, flush_millis: int | None, histograms: bool,
        spectral: bool, judging: Mapping[str, Any],
    ):
        self._backend = keras.backend.backend()
        if self._backend not in ("jax", "torch"):
            raise NotImplementedError(
                f"WeightUpdateRatioCallback supports Keras's tensorflow, jax and torch "
                f"backends, not {self._backend!r}"
            )
        self._histograms = histograms
        self._spectral = SpectralState() if spectral else None
        self._kept: list[Any] = []  # PyTorch: the last snapshot, whose copies the next reuses
        self._flush_seconds = None if flush_millis is None else flush_millis / 1000
        self._last_flush = time.monotonic()
        self._writer = SummaryWriter(os.path.join(log_dir, "train"), **judging)
        self._step_writer = LoggedStepWriter(self._writer)
        self.judgement = self._writer.judgement

    @staticmethod
    def watched(model: Any) -> list[Watched]:
        """The trainable floating-point variables, each with a unique tag (its path; a path
        taken by an earlier variable gets the first free suffix '_1', '_2', ...)."""
        kept, seen = [], set()
        for v in model.trainable_variables:
            if id(v) in seen:
                continue
            seen.add(id(v))
            if not getattr(v, "trainable", True) or not keras.backend.is_float_dtype(v.dtype):
                continue
            kept.append((_path(v), v))
        tags = unique_tags(path for path, _ in kept)
        return [Watched(tag, v) for tag, (_, v) in zip(tags, kept)]

    def snapshot(self, watched: list[Watched], values: list[Any] | None = None) -> list[Any]:
        """Copies of the variables' values (or of `values`, theirs in a JAX trainer's state)
        on their device (the JAX trainer donates the arrays it trains with; PyTorch's
        optimizers update in place). On PyTorch, `torch_math.snapshot` as `watch` takes it:
        written into the copies of the last snapshot (a logged step allocates no new memory),
        so a snapshot is good until the next one is taken."""
        if self._backend == "jax":
            return _jax_copies(
                [w.variable.value for w in watched] if values is None else values
            )
        self._kept = _torch_snapshot([w.variable.value for w in watched], self._kept)
        return self._kept

    def learning_rate(self, rate: float, step: int) -> None:
        self._writer.add_learning_rate(rate, step)
        self._flushed()

    def record(
        self, watched: list[Watched], before: list[Any], step: int,
        after: list[Any] | None = None,
    ) -> None:
        """Write the ratios of the change of `watched` from `before` to their values now (or
        to `after`, theirs in a JAX trainer's state) at `step`; the writer judges them."""
        if after is None:
            after = [w.variable.value for w in watched]
        if self._backend == "jax":
            updates = _jax_differences(before, after)
            ratios, counts = _jax_ratios(before, updates, self._histograms)
            weights = before
        else:  # the snapshot `before` becomes −Δw (as in `watch`); the weights: −Δw + w
            ratios, counts, news = _torch_ratios(before, after, self._histograms)
            updates = before
            weights = [updates[i] + news[i] if len(news[i].shape) >= 2 else None
                       for i in range(len(news))] if self._spectral is not None else []
        layers = [
            LoggedLayer(w.tag, tuple(w.variable.shape), str(w.variable.dtype)) for w in watched
        ]
        spectral = None
        matrices = [i for i, layer in enumerate(layers) if len(layer.shape) >= 2]
        if self._spectral is not None and matrices:
            kernel = _jax_spectral() if self._backend == "jax" else _torch_spectral()
            values = kernel.spectral_ratios(
                [layers[i].tag for i in matrices], [weights[i] for i in matrices],
                [updates[i] for i in matrices], self._spectral, TRAILING_FAN_OUT,
            )
            spectral = {i: float(r) for i, r in zip(matrices, values)}
        self._step_writer.write(LoggedStep(step, layers, ratios, spectral=spectral,
                                           histograms=counts))
        self._flushed()

    def flush(self) -> None:
        self._writer.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self._writer.close()

    def _flushed(self) -> None:
        """Local logdirs get every event at once; URLs at each logged step, or with
        `flush_millis` when that long has passed since the last flush."""
        if self._flush_seconds is None or time.monotonic() - self._last_flush >= self._flush_seconds:
            self.flush()


def read_step(model: Any) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def _path(v: Any) -> str:
    path = getattr(v, "path", None)
    if isinstance(path, str) and path:
        return path
    return v.name


# --- JAX -------------------------------------------------------------------------------------


def one_step_function(model: Any) -> Any:
    """Keras's JAX train function for `steps_per_execution=1` of `model` (compiled with more),
    `(state, iterator) -> (logs, state)`: one step, one call of the jitted train step."""
    steps_per_execution, function = model.steps_per_execution, model.train_function
    try:
        model.steps_per_execution = 1
        model.make_train_function(force=True)
        return model.train_function
    finally:
        model.steps_per_execution, model.train_function = steps_per_execution, function


def state_step(model: Any, state: tuple) -> int:
    """`optimizer.iterations` as held in a JAX trainer's `state` (trainable, non-trainable,
    optimizer, metrics variables)."""
    optimizer = model.optimizer
    index = _position(optimizer.variables, optimizer.iterations)
    return int(np.asarray(state[2][index]))


def state_values(model: Any, watched: list[Watched], state: tuple) -> list[Any]:
    """The values of `watched` (trainable variables of `model`) in a JAX trainer's `state`."""
    variables = model.trainable_variables
    return [state[0][_position(variables, w.variable)] for w in watched]


def state_learning_rate(model: Any, state: tuple) -> float | None:
    """The learning rate the optimizer applies at the next step of a JAX trainer's `state`,
    if it is a number."""
    optimizer = model.optimizer
    try:
        with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, state[2]))):
            return float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None


def _position(variables: list[Any], variable: Any) -> int:
    for index, candidate in enumerate(variables):
        if candidate is variable:
            return index
    raise ValueError(f"{variable.path} is not among the state's variables")


def _jax_copies(values: list[Any]) -> list[Any]:
    import jax.numpy as jnp

    return [jnp.array(v, copy=True) for v in values]


def _jax_ratios(before: list[Any], updates: list[Any], histograms: bool):
    """float64 ratios and int counts[n, NUM_BUCKETS] (or None), from `tb_wur_plugin.jax`'s
    device-side scaled norms and bucketing of the updates Δw = after − before."""
    import jax

    from tb_wur_plugin.arrays import jax_math

    ratios = jax_math.ratios(before, updates)
    counts = None
    if histograms:
        counts = np.asarray(jax.device_get(jax_math.histogram_counts(before, updates)))
    return ratios, counts


_jitted_differences = None


def _jax_differences(before: list[Any], after: list[Any]) -> list[Any]:
    global _jitted_differences
    if _jitted_differences is None:
        import jax

        _jitted_differences = jax.jit(lambda b, a: [y - x for x, y in zip(b, a)])
    return _jitted_differences(before, after)


# --- PyTorch ---------------------------------------------------------------------------------


def _jax_spectral() -> Any:
    from tb_wur_plugin.arrays import jax_spectral

    return jax_spectral


def _torch_spectral() -> Any:
    from tb_wur_plugin.arrays import torch_spectral

    return torch_spectral


def _torch_snapshot(values: list[Any], kept: list[Any]) -> list[Any]:
    """`torch_math.snapshot` of the variables' values, written into `kept` where it fits."""
    import torch

    from tb_wur_plugin.arrays import torch_math

    with torch.no_grad():
        return torch_math.snapshot(values, kept)


def _torch_ratios(before: list[Any], after: list[Any], histograms: bool):
    """float64 ratios and int64 counts of the update from `before` (a `_torch_snapshot`,
    which then holds −Δw) to `after`, as `watch` takes them (`torch_math.update_norms`);
    and the values after, in the work dtype."""
    import torch

    from tb_wur_plugin.arrays import torch_math

    with torch.no_grad():
        news = [torch_math.work(a.detach()) for a in after]
        counts = None
        if histograms:
            counts = torch.stack(torch_math.elementwise_counts_of(before, news)).cpu().numpy()
        weight_norms, update_norms = torch_math.update_norms(before, news)
    return ratios_from_norms(update_norms, weight_norms), counts, news

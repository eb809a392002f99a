"""`StochasticArmijo`: SGD whose step size is found by a backtracking Armijo line search on
the current batch (the Armijo variant of `sls.Sls`, Vaswani et al., NeurIPS 2019).

The algorithm is the reference implementation's (`sls/sls.py`, `sls/utils.py` of
github.com/IssamLaradji/sls, ``line_search_fn="armijo"``) step for step; see `docs/armijo.md`
for where that differs from the paper.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple, Sequence

import tensorflow as tf

from tb_wur_plugin.armijo import summaries as _summaries
from tb_wur_plugin.tf_write.variables import tf_variable

RESETS = ("keep", "grow", "initial")

# The reference's constants: the gradient norm under which nothing moves, and the step
# applied when no trial is accepted.
GRAD_NORM_THRESHOLD = 1e-8
FALLBACK_STEP_SIZE = 1e-6


class StepResult(NamedTuple):
    """What one `StochasticArmijo.minimize` call did (tensors).

    step_size: float64, the step applied: the accepted step size, 1e-6 when no trial was
      accepted (the fallback), 0 when the gradient norm was below 1e-8 (nothing moved).
    backtracks: int32, the number of rejected trials.
    loss: float64, the loss f at the weights before the step.
    new_loss: float64, f' of the accepted trial; of the last rejected one on the fallback
      (not the loss at the fallback's weights, which is not evaluated); f when nothing moved.
    grad_norm: float64, ‖g‖₂ over all variables.
    """

    step_size: tf.Tensor
    backtracks: tf.Tensor
    loss: tf.Tensor
    new_loss: tf.Tensor
    grad_norm: tf.Tensor


class StochasticArmijo:
    """One SGD step per `minimize` call, its step size searched by backtracking until the
    Armijo condition f(w − s·g) ≤ f(w) − c·s·‖g‖² holds on the same batch.

    Args:
      n_batches_per_epoch: batches per epoch, for ``reset="grow"`` (which needs it): each
        call first multiplies the stored step size by ``gamma ** (1 / n_batches_per_epoch)``,
        so it can grow by at most ``gamma`` per epoch. An int >= 1, or None.
      initial_step_size: the stored step size before the first call, and the one every call
        starts from with ``reset="initial"`` (a number > 0).
      c: the Armijo constant, 0 < c < 1.
      beta: the factor a rejected trial's step size is multiplied by, 0 < beta < 1.
      gamma: the growth factor per epoch of ``reset="grow"``, >= 1.
      reset: how each call's first trial step size comes from the stored one: ``"keep"``
        (unchanged), ``"grow"`` (times ``gamma ** (1 / n_batches_per_epoch)``), ``"initial"``
        (``initial_step_size``).
      max_backtracks: the most trials per call (the reference's 100), an int >= 1. When
        none is accepted, the call applies w ← w − 1e-6·g.
      max_step_size: None (default, as the reference's Armijo search: uncapped), or a cap
        (> 0) applied to the reset step size: the paper's η_max.

    Attributes:
      step_size: a float64 `tf.Variable`, the stored step size: after a call, the accepted
        one, or the last shrunk one when none was accepted (as the reference stores it), or
        the reset one when the gradient norm was below 1e-8.
    """

    def __init__(
        self,
        n_batches_per_epoch: int | None = None,
        initial_step_size: float = 1.0,
        c: float = 0.1,
        beta: float = 0.9,
        gamma: float = 2.0,
        reset: str = "grow",
        max_backtracks: int = 100,
        max_step_size: float | None = None,
    ):
        self.initial_step_size = _positive_number("initial_step_size", initial_step_size)
        self.c = _number_in("c", c, 0.0, 1.0)
        self.beta = _number_in("beta", beta, 0.0, 1.0)
        gamma = _number("gamma", gamma)
        if not gamma >= 1.0 or math.isinf(gamma):
            raise ValueError(f"gamma must be a finite number >= 1, got {gamma!r}")
        self.gamma = gamma
        if not isinstance(reset, str):
            raise TypeError(f"reset must be one of {RESETS}, got {type(reset).__name__}: {reset!r}")
        if reset not in RESETS:
            raise ValueError(f"reset must be one of {RESETS}, got {reset!r}")
        self.reset = reset
        self.max_backtracks = _positive_int("max_backtracks", max_backtracks)
        self.max_step_size = (
            None if max_step_size is None else _positive_number("max_step_size", max_step_size)
        )
        self._n_batches_per_epoch: int | None = None
        # The growth factor of reset="grow" is read at run time, so that a traced step
        # follows a later change of n_batches_per_epoch (LineSearchModel sets it per fit).
        self._grow_factor = tf.Variable(
            1.0, dtype=tf.float64, trainable=False, name="armijo_grow_factor"
        )
        self.n_batches_per_epoch = n_batches_per_epoch
        self.step_size = tf.Variable(
            self.initial_step_size, dtype=tf.float64, trainable=False, name="armijo_step_size"
        )

    @property
    def n_batches_per_epoch(self) -> int | None:
        return self._n_batches_per_epoch

    @n_batches_per_epoch.setter
    def n_batches_per_epoch(self, value: int | None) -> None:
        if value is not None:
            value = _positive_int("n_batches_per_epoch", value)
            # As the reference: gamma ** (1. / n) in Python floats (float64).
            self._grow_factor.assign(self.gamma ** (1.0 / value))
        self._n_batches_per_epoch = value

    def __repr__(self) -> str:
        return (
            f"StochasticArmijo(n_batches_per_epoch={self.n_batches_per_epoch!r}, "
            f"initial_step_size={self.initial_step_size!r}, c={self.c!r}, beta={self.beta!r}, "
            f"gamma={self.gamma!r}, reset={self.reset!r}, "
            f"max_backtracks={self.max_backtracks!r}, max_step_size={self.max_step_size!r})"
        )

    def minimize(
        self, loss_fn: Callable[[], Any], variables: Any, step: Any = None
    ) -> StepResult:
        """One SGD step on `variables`, its step size searched on `loss_fn`.

        Args:
          loss_fn: called with no argument, returns the scalar loss of the current batch at
            the variables' current values (forward only: it is called once under a gradient
            tape and once per trial). It must compute the same function at every call:
            a random op in it (dropout) needs a fixed seed for the search to make sense
            (`LineSearchModel` does that for Keras models).
          variables: a `tf.Variable` or Keras variable, or a list of them (floating dtypes).
          step: the step at which the result is logged when a default summary writer
            records (default `tf.summary.experimental.get_step()`).

        Returns:
          A `StepResult` of tensors.
        """
        if not callable(loss_fn):
            raise TypeError(
                f"loss_fn must be a callable returning the loss, got {type(loss_fn).__name__}"
            )
        variables = _check_variables(variables)

        def value_and_gradients():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for v in variables:
                    tape.watch(tf_variable(v, "StochasticArmijo"))
                loss = _check_loss(loss_fn())
            return loss, tape.gradient(loss, [tf_variable(v, "StochasticArmijo") for v in variables])

        def trial_loss():
            return _check_loss(loss_fn())

        result = self.search_step(value_and_gradients, trial_loss, variables)
        _summaries.log_step(result, step)
        return result

    def search_step(
        self,
        value_and_gradients: Callable[[], tuple[tf.Tensor, list[Any]]],
        trial_loss: Callable[[], tf.Tensor],
        variables: Sequence[Any],
    ) -> StepResult:
        """One step of the search, given the gradient pass and the trial pass separately
        (`LineSearchModel`'s trials are stateless calls that its gradient pass is not).

        Args:
          value_and_gradients: returns (f, the gradients of `variables`) at their values.
          trial_loss: returns the loss at the variables' current (trial) values.
          variables: the variables stepped, as for `minimize`.

        Returns:
          The `StepResult`; nothing is logged (`minimize` logs).
        """
        if self.reset == "grow" and self.n_batches_per_epoch is None:
            raise ValueError(
                'reset="grow" needs n_batches_per_epoch (the number of batches per epoch): '
                'pass it to StochasticArmijo, or use reset="keep" or "initial"'
            )
        targets = [tf_variable(v, "StochasticArmijo") for v in variables]
        # 1. The trial step size of this call, from the stored one.
        if self.reset == "keep":
            s0 = tf.identity(self.step_size)
        elif self.reset == "grow":
            s0 = self.step_size * self._grow_factor
        else:
            s0 = tf.constant(self.initial_step_size, tf.float64)
        if self.max_step_size is not None:
            s0 = tf.minimum(s0, tf.constant(self.max_step_size, tf.float64))
        # 2. f and g, once.
        loss, grads = value_and_gradients()
        grads = [
            tf.zeros_like(t) if g is None else tf.convert_to_tensor(g, dtype=t.dtype)
            for g, t in zip(grads, targets)
        ]
        f = tf.cast(loss, tf.float64)
        grad_norm = tf.sqrt(tf.add_n([
            tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads
        ]))
        weights = [tf.identity(t) for t in targets]  # w, kept while the variables change
        c = tf.constant(self.c, tf.float64)
        beta = tf.constant(self.beta, tf.float64)

        def assign_step(step_size):
            return [
                t.assign(w - tf.cast(step_size, w.dtype) * g, read_value=False)
                for t, w, g in zip(targets, weights, grads)
            ]

        def search():
            # 3. Trials w' = w − s·g until f' ≤ f − c·s·‖g‖², s ← β·s after each rejection.
            def cond(trials, s, found, new_f):
                return tf.logical_and(tf.logical_not(found), trials < self.max_backtracks)

            def body(trials, s, found, new_f):
                with tf.control_dependencies(assign_step(s)):
                    next_f = tf.cast(trial_loss(), tf.float64)
                # As the reference: loss_next - (loss - step_size * c * grad_norm**2) <= 0.
                accepted = next_f - (f - s * c * grad_norm ** 2) <= 0
                s = tf.where(accepted, s, s * beta)
                return trials + 1, s, accepted, next_f

            trials, s, found, new_f = tf.while_loop(
                cond,
                body,
                (tf.constant(0, tf.int32), s0, tf.constant(False), f),
                maximum_iterations=self.max_backtracks,
            )

            def fallback():
                with tf.control_dependencies(assign_step(FALLBACK_STEP_SIZE)):
                    return tf.constant(FALLBACK_STEP_SIZE, tf.float64)

            applied = tf.cond(found, lambda: tf.identity(s), fallback)
            backtracks = tf.where(found, trials - 1, trials)
            return s, applied, backtracks, new_f

        def skip():
            return tf.identity(s0), tf.constant(0.0, tf.float64), tf.constant(0, tf.int32), f

        stored, applied, backtracks, new_f = tf.cond(
            grad_norm >= GRAD_NORM_THRESHOLD, search, skip
        )
        # 4. The stored step size.
        with tf.control_dependencies([self.step_size.assign(stored, read_value=False)]):
            return StepResult(
                step_size=tf.identity(applied),
                backtracks=tf.identity(backtracks),
                loss=tf.identity(f),
                new_loss=tf.identity(new_f),
                grad_norm=tf.identity(grad_norm),
            )


def _check_variables(variables: Any) -> list[Any]:
    if isinstance(variables, (tf.Variable,)) or _is_keras_variable(variables):
        variables = [variables]
    elif isinstance(variables, (list, tuple)):
        variables = list(variables)
    else:
        raise TypeError(
            "variables must be a tf.Variable, a Keras variable or a list of them, got "
            f"{type(variables).__name__}"
        )
    if not variables:
        raise ValueError("variables must not be empty")
    seen = set()
    for v in variables:
        target = tf_variable(v, "StochasticArmijo")
        if not target.dtype.is_floating:
            raise ValueError(
                f"variables must have a floating dtype, got {target.dtype.name} for {target.name}"
            )
        if id(target) in seen:
            raise ValueError(f"variables holds {target.name} twice")
        seen.add(id(target))
    return variables


def _is_keras_variable(v: Any) -> bool:
    try:
        import keras
    except ImportError:  # pragma: no cover
        return False
    return isinstance(v, keras.Variable)


def _check_loss(loss: Any) -> tf.Tensor:
    loss = tf.convert_to_tensor(loss)
    if not loss.dtype.is_floating:
        raise TypeError(f"loss_fn must return a floating scalar, got dtype {loss.dtype.name}")
    if loss.shape.rank is not None and loss.shape.rank != 0:
        raise ValueError(f"loss_fn must return a scalar, got shape {loss.shape}")
    return tf.reshape(loss, [])


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}: {value!r}")
    return float(value)


def _positive_number(name: str, value: Any) -> float:
    value = _number(name, value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _number_in(name: str, value: Any, low: float, high: float) -> float:
    value = _number(name, value)
    if not low < value < high:
        raise ValueError(f"{name} must be between {low:g} and {high:g} (exclusive), got {value!r}")
    return value


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)

"""`StochasticArmijo`: SGD whose step size is found by a backtracking Armijo line search on
the current batch.

With its defaults it is the Armijo variant of `sls.Sls` (Vaswani et al., NeurIPS 2019) step
for step (`sls/sls.py`, `sls/utils.py` of github.com/IssamLaradji/sls,
``line_search_fn="armijo"``). Its options add the non-monotone condition and the Polyak
initial step of PoNoS (Galli, Rauhut and Schmidt, NeurIPS 2023) and the momentum direction
and smoothed condition of SaLSA (Kenneweg, Kenneweg, Fumagalli and Hammer, 2024).
`docs/armijo.md` states the equations and where this departs from the papers and their code.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple, Sequence

import tensorflow as tf

from tb_wur_plugin.armijo import summaries as _summaries
from tb_wur_plugin.tf_write import tf_private
from tb_wur_plugin.tf_write.variables import tf_variable

RESETS = ("keep", "grow", "initial", "polyak")

# The reference's constants: the gradient norm under which nothing moves, and the step
# applied when no trial is accepted.
GRAD_NORM_THRESHOLD = 1e-8
FALLBACK_STEP_SIZE = 1e-6
# PoNoS's constants: the floor of its initial step size (min_eta), and the term that keeps
# the Polyak step's denominator positive.
POLYAK_MIN_STEP_SIZE = 1e-6
POLYAK_EPSILON = 1e-8

# The search's selects, between tensors of the same shape: TF1's select (no broadcasting),
# which with a scalar condition passes the chosen tensor on, cheaper per step than
# `tf.where`'s broadcasting select (benchmarks/RESULTS.md, "Line search variants").
_select = tf.compat.v1.where


class StepResult(NamedTuple):
    """What one `StochasticArmijo.minimize` call did (tensors).

    step_size: float64, the step applied along the direction d (the gradient g, or the
      momentum direction with ``momentum > 0``): the accepted step size, 1e-6 when no trial
      was accepted (the fallback), 0 when the gradient norm was below 1e-8 (nothing moved).
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


class SearchStep(NamedTuple):
    """What `StochasticArmijo.search_step` decided, before anything is assigned.

    result: the `StepResult`.
    assignments: (variable, value) pairs: the stepped variables' new values and the
      search's own state (the stored step size and, by option, the non-monotone reference,
      the Polyak memory, the momentum, the smoothed averages), to be assigned after the step.
    """

    result: StepResult
    assignments: list[tuple[tf.Variable, tf.Tensor]]


class StochasticArmijo:
    """One step per `minimize` call along d (the gradient g, or a momentum direction), its
    step size s searched by backtracking until an Armijo condition holds on the same batch.

    With the defaults the condition is f(w − s·g) ≤ f(w) − c·s·‖g‖² and the search is the
    reference `sls` one, step for step. The options, each off by default:

    - ``nonmonotone=ξ`` (PoNoS, after Zhang and Hager): f(w) on the right becomes
      max(C_k, f(w)), C_k the running average of the losses that weights the older ones by
      powers of ξ (ξ = 1: the mean of all losses so far; ξ = 0: the monotone condition).
    - ``reset="polyak"`` (PoNoS): the first trial is the Polyak step f(w) / (polyak_scale ·
      ‖g‖² + 1e-8) times beta^l, l the memory of recent backtracks (it grows by the
      backtracks of a step less one, never below 0), capped by ``max_step_size`` and at least
      1e-6.
    - ``momentum=μ`` (SaLSA): d is the bias-corrected moving average of the gradients,
      m ← μ·m + (1 − μ)·g, d = m / (1 − μ^k), and ‖g‖² in the condition becomes ⟨g, d⟩;
      when ⟨g, d⟩ ≤ 0 (d is no descent direction) the average restarts at this gradient.
    - ``smoothing=β₃`` (SaLSA): the condition compares moving averages: h_k ≥ c·s·ŝ_k, with
      h_k = β₃·h_{k−1} + (1 − β₃)·(f_ref − f') (h kept from the last accepted trial) and
      ŝ_k = β₃·ŝ_{k−1} + (1 − β₃)·⟨g, d⟩.

    Args:
      n_batches_per_epoch: batches per epoch, for ``reset="grow"`` (which needs it): each
        call first multiplies the stored step size by ``gamma ** (1 / n_batches_per_epoch)``,
        so it can grow by at most ``gamma`` per epoch. An int >= 1, or None.
      initial_step_size: the stored step size before the first call, and the one every call
        starts from with ``reset="initial"`` (a number > 0).
      c: the Armijo constant, 0 < c < 1.
      beta: the factor a rejected trial's step size is multiplied by, 0 < beta < 1 (PoNoS's
        delta, which also scales its Polyak step by beta^l).
      gamma: the growth factor per epoch of ``reset="grow"``, >= 1.
      reset: how each call's first trial step size is found: ``"keep"`` (the stored one),
        ``"grow"`` (the stored one times ``gamma ** (1 / n_batches_per_epoch)``),
        ``"initial"`` (``initial_step_size``), ``"polyak"`` (PoNoS: from this batch's loss
        and gradient, see above).
      max_backtracks: the most trials per call (the reference's 100), an int >= 1. When
        none is accepted, the call applies w ← w − 1e-6·d.
      max_step_size: None (default, as the reference's Armijo search: uncapped), or a cap
        (> 0) applied to the first trial's step size: the papers' η_max.
      nonmonotone: ξ, 0 <= ξ <= 1 (default 0: the monotone condition).
      polyak_scale: c_p of ``reset="polyak"``, a number > 0 (PoNoS's default 0.1).
      momentum: μ, 0 <= μ < 1 (default 0: d = g); not with ``reset="polyak"``.
      smoothing: β₃, 0 <= β₃ < 1 (default 0: no smoothing).

    Attributes:
      step_size: a float64 `tf.Variable`, the stored step size: after a call, the accepted
        one, or the last shrunk one when none was accepted (as the reference stores it), or
        the first trial's one when the gradient norm was below 1e-8.
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
        nonmonotone: float = 0.0,
        polyak_scale: float = 0.1,
        momentum: float = 0.0,
        smoothing: float = 0.0,
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
        self.nonmonotone = _number_within("nonmonotone", nonmonotone, 0.0, 1.0, high_open=False)
        self.polyak_scale = _positive_number("polyak_scale", polyak_scale)
        self.momentum = _number_within("momentum", momentum, 0.0, 1.0, high_open=True)
        self.smoothing = _number_within("smoothing", smoothing, 0.0, 1.0, high_open=True)
        if reset == "polyak" and self.momentum > 0.0:
            raise ValueError(
                'reset="polyak" with momentum > 0 is not supported: the Polyak step '
                "f / (polyak_scale * <g, d>) along a momentum direction d grows without bound "
                "as d turns orthogonal to g (on digits it diverged); use momentum with "
                'reset="grow", "keep" or "initial", or the Polyak step without momentum'
            )
        self._n_batches_per_epoch: int | None = None
        # The growth factor of reset="grow" is read at run time, so that a traced step
        # follows a later change of n_batches_per_epoch (LineSearchModel sets it per fit).
        self._grow_factor = _state(1.0, "armijo_grow_factor")
        self.n_batches_per_epoch = n_batches_per_epoch
        self.step_size = _state(self.initial_step_size, "armijo_step_size")
        # The options' state (float64 scalars; the momentum's per variable, made by build).
        self._reference_loss = _state(0.0, "armijo_reference_loss")  # C_k
        self._reference_weight = _state(0.0, "armijo_reference_weight")  # Q_k
        self._polyak_memory = _state(0.0, "armijo_polyak_memory")  # l_k
        self._momentum_steps = _state(0.0, "armijo_momentum_steps")  # k since the restart
        self._average_decrease = _state(0.0, "armijo_average_decrease")  # h_k
        self._average_slope = _state(0.0, "armijo_average_slope")  # ŝ_k
        self._momentum_slots: list[tf.Variable] | None = None
        self._slot_owners: list[Any] = []

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
            f"max_backtracks={self.max_backtracks!r}, max_step_size={self.max_step_size!r}, "
            f"nonmonotone={self.nonmonotone!r}, polyak_scale={self.polyak_scale!r}, "
            f"momentum={self.momentum!r}, smoothing={self.smoothing!r})"
        )

    def reset_state(self) -> None:
        """Restore the state before the first call: the stored step size becomes
        `initial_step_size`, the options' state (non-monotone average, Polyak memory,
        momentum and its slots, smoothed averages) zero. Eagerly, between steps."""
        self.step_size.assign(self.initial_step_size)
        for variable in (self._reference_loss, self._reference_weight, self._polyak_memory,
                         self._momentum_steps, self._average_decrease, self._average_slope):
            variable.assign(0.0)
        for slot in self._momentum_slots or []:
            slot.assign(tf.zeros_like(slot))

    def build(self, variables: Any) -> None:
        """Make the momentum's slots (one zero tensor per variable) when ``momentum > 0``;
        nothing otherwise. `minimize` calls it; a caller that traces the step under a
        `tf.distribute` strategy calls it before, in the strategy's scope.

        Raises:
          ValueError: the slots were made for other variables.
        """
        if self.momentum == 0.0:
            return
        targets = [tf_variable(v, "StochasticArmijo") for v in _check_variables(variables)]
        owners = [t.ref() for t in targets]
        if self._momentum_slots is not None:
            if owners != self._slot_owners:
                raise ValueError(
                    "this StochasticArmijo's momentum belongs to other variables: use one "
                    "search per set of variables"
                )
            return
        with tf.init_scope():
            self._momentum_slots = [
                tf.Variable(tf.zeros(t.shape, t.dtype), trainable=False, name="armijo_momentum")
                for t in targets
            ]
        self._slot_owners = owners

    def minimize(
        self, loss_fn: Callable[[], Any], variables: Any, step: Any = None
    ) -> StepResult:
        """One step on `variables`, its step size searched on `loss_fn`.

        Args:
          loss_fn: called with no argument, returns the scalar loss of the current batch at
            the variables' current values (forward only: it is called once under a gradient
            tape and once per trial; the first trial is always evaluated, so also once more
            when the gradient norm is below 1e-8 and nothing moves, its loss discarded).
            It must compute the same function at every call:
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
        targets = [tf_variable(v, "StochasticArmijo") for v in variables]
        self.build(variables)

        def value_and_gradients():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for t in targets:
                    tape.watch(t)
                loss = _check_loss(loss_fn())
            return loss, tape.gradient(loss, targets)

        def trial_loss(weights):
            assigned = [t.assign(w, read_value=False) for t, w in zip(targets, weights)]
            with tf.control_dependencies([op for op in assigned if op is not None]):
                return _check_loss(loss_fn())

        searched = self.search_step(value_and_gradients, trial_loss, variables)
        assigned = [v.assign(value, read_value=False) for v, value in searched.assignments]
        with tf.control_dependencies([op for op in assigned if op is not None]):
            result = StepResult(*(tf.identity(t) for t in searched.result))
        _summaries.log_step(result, step)
        return result

    def search_step(
        self,
        value_and_gradients: Callable[[], tuple[tf.Tensor, list[Any]]],
        trial_loss: Callable[[list[tf.Tensor]], tf.Tensor],
        variables: Sequence[Any],
    ) -> SearchStep:
        """One step of the search, given the gradient pass and the trial pass separately;
        it assigns nothing: the caller assigns the returned values (`LineSearchModel`'s
        trials are stateless calls, and under a `tf.distribute` strategy it assigns them in
        cross-replica context).

        Every variable update is left to the caller, and no synchronization happens inside
        the trial loop. `trial_loss` is called for the first trial in any case (when the
        gradient norm is below 1e-8 its loss is discarded and nothing moves), and for the
        further trials only when the first is rejected.

        Args:
          value_and_gradients: returns (f, the gradients of `variables`) at their values.
          trial_loss: given the trial weights (one tensor per variable), returns the loss
            at them.
          variables: the variables stepped, as for `minimize` (the momentum's slots must be
            built for them when ``momentum > 0``: `build`).

        Returns:
          The `SearchStep`: the `StepResult` and the assignments.

        Raises:
          ValueError: ``reset="grow"`` without n_batches_per_epoch; the momentum's slots
            are not built.
        """
        if self.reset == "grow" and self.n_batches_per_epoch is None:
            raise ValueError(
                'reset="grow" needs n_batches_per_epoch (the number of batches per epoch): '
                'pass it to StochasticArmijo, or use reset="keep", "initial" or "polyak"'
            )
        if self.momentum > 0.0 and self._momentum_slots is None:
            raise ValueError("StochasticArmijo with momentum: call build(variables) first")
        targets = [tf_variable(v, "StochasticArmijo") for v in variables]
        weights = [tf.identity(t) for t in targets]  # w, kept while the variables change
        # 1. f and g, once.
        loss, grads = value_and_gradients()
        grads = [
            tf.zeros_like(t) if g is None else tf.convert_to_tensor(g, dtype=t.dtype)
            for g, t in zip(grads, targets)
        ]
        f = tf.cast(loss, tf.float64)
        grad_norm = tf.sqrt(tf.add_n([
            tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in grads
        ]))
        searched = grad_norm >= GRAD_NORM_THRESHOLD
        assignments: list[tuple[tf.Variable, tf.Tensor]] = []
        # 2. The direction d and the slope ⟨g, d⟩ (d = g: ‖g‖², computed as the reference).
        if self.momentum > 0.0:
            directions, slope = self._momentum_direction(grads, grad_norm, searched, assignments)
        else:
            directions, slope = grads, grad_norm ** 2
        # 3. The loss the condition compares with: f, or PoNoS's max(C_k, f).
        reference = self._reference(f, assignments)
        # 4. The first trial's step size.
        s0 = self._first_trial(f, slope)
        c = tf.constant(self.c, tf.float64)
        beta = tf.constant(self.beta, tf.float64)
        smoothing = tf.constant(self.smoothing, tf.float64)
        if self.smoothing > 0.0:
            average_slope = smoothing * self._average_slope + (1.0 - smoothing) * slope
            previous_decrease = tf.identity(self._average_decrease)

        dtypes = {w.dtype for w in weights}

        def stepped(step_size):
            # The step size cast once per dtype, not once per variable.
            cast = {dtype: tf.cast(step_size, dtype) for dtype in dtypes}
            return [w - cast[w.dtype] * d for w, d in zip(weights, directions)]

        def trial(s):
            """One trial at step size s: (f', whether the condition holds, h_k)."""
            next_f = tf.cast(trial_loss(stepped(s)), tf.float64)
            if self.smoothing > 0.0:
                # SaLSA: h_k = β₃·h_{k−1} + (1 − β₃)·(f_ref − f') ≥ c·s·ŝ_k.
                decrease = smoothing * previous_decrease + (1.0 - smoothing) * (
                    reference - next_f)
                accepted = decrease >= s * c * average_slope
            else:
                # As the reference: loss_next - (loss - step_size * c * grad_norm**2) <= 0.
                decrease = tf.constant(0.0, tf.float64)
                accepted = next_f - (reference - s * c * slope) <= 0
            return next_f, accepted, decrease

        # 5. Trials w' = w − s·d until the condition holds, s ← β·s after each rejection.
        # The first trial runs unconditionally, outside any loop (also when the gradient
        # norm is tiny: its loss is then discarded); only when it is rejected does the loop
        # of the further trials run, in a conditional that is not lowered (the accepted
        # first trial, the common case, then pays for no loop).
        first_f, first_accepted, first_decrease = trial(s0)
        first = (tf.constant(1, tf.int32), _select(first_accepted, s0, s0 * beta),
                 first_accepted, first_f, first_decrease)

        def cond(trials, s, found, new_f, decrease):
            return tf.logical_and(tf.logical_not(found), trials < self.max_backtracks)

        def body(trials, s, found, new_f, decrease):
            next_f, accepted, decrease = trial(s)
            s = _select(accepted, s, s * beta)
            return trials + 1, s, accepted, next_f, decrease

        def backtrack():
            return tf.while_loop(cond, body, first, maximum_iterations=self.max_backtracks - 1)

        trials, stored, found, new_f, decrease = tf_private.unlowered_cond(
            tf.logical_or(first_accepted, tf.logical_not(searched)),
            lambda: tuple(tf.identity(t) for t in first), backtrack)
        # Nothing moves when the gradient norm is tiny: no trial counts, the stored step
        # size stays the first trial's, the new loss is f.
        found = tf.logical_and(searched, found)
        trials = _select(searched, trials, tf.constant(0, tf.int32))
        stored = _select(searched, stored, s0)
        new_f = _select(searched, new_f, f)
        # The accepted step; 1e-6 when every trial was rejected; 0 when nothing moves.
        applied = _select(found, stored, _select(
            searched, tf.constant(FALLBACK_STEP_SIZE, tf.float64), tf.constant(0.0, tf.float64)))
        backtracks = _select(found, trials - 1, trials)
        # 6. The new weights and the search's state, to be assigned by the caller.
        moved = stepped(applied)
        assignments += [
            (t, _select(searched, m, w)) for t, m, w in zip(targets, moved, weights)
        ]
        assignments.append((self.step_size, stored))
        if self.reset == "polyak":
            # PoNoS: l_{k+1} = max(l_k + b_k − 1, 0) after a search.
            memory = tf.maximum(
                self._polyak_memory + tf.cast(backtracks, tf.float64) - 1.0, 0.0)
            assignments.append(
                (self._polyak_memory, _select(searched, memory, self._polyak_memory)))
        if self.smoothing > 0.0:
            assignments.append(
                (self._average_decrease, _select(found, decrease, previous_decrease)))
            assignments.append(
                (self._average_slope, _select(searched, average_slope, self._average_slope)))
        result = StepResult(
            step_size=applied, backtracks=backtracks, loss=f, new_loss=new_f,
            grad_norm=grad_norm,
        )
        return SearchStep(result, assignments)

    def _momentum_direction(self, grads, grad_norm, searched, assignments):
        """SaLSA's direction: d = m / (1 − μ^k), m ← μ·m + (1 − μ)·g; restarted at g when
        ⟨g, d⟩ ≤ 0. Appends the slots' and k's new values (kept when nothing moves)."""
        mu = self.momentum
        previous = [tf.identity(m) for m in self._momentum_slots]
        steps = self._momentum_steps + 1.0
        averages = [mu * m + (1.0 - mu) * g for m, g in zip(previous, grads)]
        correction = 1.0 - tf.pow(tf.constant(mu, tf.float64), steps)
        directions = [m / tf.cast(correction, m.dtype) for m in averages]
        slope = tf.add_n([
            tf.reduce_sum(tf.cast(g, tf.float64) * tf.cast(d, tf.float64))
            for g, d in zip(grads, directions)
        ])
        restart = slope <= 0.0
        directions = [_select(restart, g, d) for g, d in zip(grads, directions)]
        averages = [_select(restart, (1.0 - mu) * g, m) for g, m in zip(grads, averages)]
        steps = _select(restart, tf.constant(1.0, tf.float64), steps)
        slope = _select(restart, grad_norm ** 2, slope)
        assignments += [
            (slot, _select(searched, m, p))
            for slot, m, p in zip(self._momentum_slots, averages, previous)
        ]
        assignments.append(
            (self._momentum_steps, _select(searched, steps, self._momentum_steps)))
        return directions, slope

    def _reference(self, f, assignments):
        """f, or (nonmonotone ξ > 0) PoNoS's max(C_k, f) with Zhang and Hager's average
        Q_k = ξ·Q_{k−1} + 1, C_k = (ξ·Q_{k−1}·C_{k−1} + f) / Q_k; a non-finite loss is left
        out of the average."""
        if self.nonmonotone == 0.0:
            return f
        xi = tf.constant(self.nonmonotone, tf.float64)
        weight = xi * self._reference_weight + 1.0
        average = (xi * self._reference_weight * self._reference_loss + f) / weight
        finite = tf.math.is_finite(f)
        average = _select(finite, average, self._reference_loss)
        weight = _select(finite, weight, self._reference_weight)
        assignments.append((self._reference_loss, average))
        assignments.append((self._reference_weight, weight))
        return tf.maximum(average, f)

    def _first_trial(self, f, slope):
        """The first trial's step size s₀ of this call."""
        if self.reset == "keep":
            s0 = tf.identity(self.step_size)
        elif self.reset == "grow":
            s0 = self.step_size * self._grow_factor
        elif self.reset == "initial":
            s0 = tf.constant(self.initial_step_size, tf.float64)
        else:
            # PoNoS: f / (c_p·‖g‖² + 1e-8) · δ^l, then min(·, η_max), max(·, η_min) (d = g:
            # the slope is ‖g‖², as the reference computes it).
            polyak = f / (self.polyak_scale * slope + POLYAK_EPSILON)
            s0 = polyak * tf.pow(tf.constant(self.beta, tf.float64), self._polyak_memory)
        if self.max_step_size is not None:
            s0 = tf.minimum(s0, tf.constant(self.max_step_size, tf.float64))
        if self.reset == "polyak":
            s0 = tf.maximum(s0, tf.constant(POLYAK_MIN_STEP_SIZE, tf.float64))
        return s0


def _state(value: float, name: str) -> tf.Variable:
    return tf.Variable(value, dtype=tf.float64, trainable=False, name=name)


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


def _number_within(name: str, value: Any, low: float, high: float, high_open: bool) -> float:
    value = _number(name, value)
    if not (low <= value < high if high_open else low <= value <= high):
        bound = "<" if high_open else "<="
        raise ValueError(f"{name} must be a number with {low:g} <= {name} {bound} {high:g}, "
                         f"got {value!r}")
    return value

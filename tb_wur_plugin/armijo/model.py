"""`LineSearchModel`: `model.fit` with the stochastic Armijo line search (TensorFlow backend)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tb_wur_plugin.armijo import summaries as _summaries
from tb_wur_plugin.armijo.line_search_log import StepLog
from tb_wur_plugin.armijo.search import StepResult, StochasticArmijo
from tb_wur_plugin.tf_write.variables import tf_variable

# Dynamic loss scaling under a float16 compute dtype, as Keras' LossScaleOptimizer does it:
# the first scale, and the number of steps with finite gradients after which it doubles.
INITIAL_LOSS_SCALE = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000


class LineSearchModel(keras.Model):
    """A Keras model that calls `model` and trains it with `search` in `fit`: one
    `StochasticArmijo` step per batch, inside the compiled train function.

    Each training step makes one gradient pass (forward and backward) and one forward pass
    per trial, all on the same batch and in the same traced function (no host round trip).
    All passes are `model.stateless_call`s from the same non-trainable state, the state
    before the step, and the trials take their weights as tensors (no variable changes
    during the search): every trial sees the gradient pass's dropout masks (the same seed
    generator state), and BatchNormalization normalizes with the batch statistics as in
    the gradient pass. The new weights, the non-trainable state the gradient pass produces
    (moving statistics, advanced seeds) and the search's state are assigned once, after
    the search: exactly what a plain SGD step's gradient pass would leave; the seed state
    thus advances once per step. Computing a trial's loss updates no metric (the metrics,
    e.g. a multi-output model's per-output losses, are restored to what the gradient pass
    left). `model` and its layers are not changed.

    Compile it with `loss=`, `metrics=` (and the other `compile` arguments) but no
    optimizer: `model.optimizer` is then an internal SGD that applies no update; its
    `iterations` counts the searched steps (for callbacks that read it) and its
    `learning_rate` reads the stored step size `search.step_size`.

    `fit` sets `search.n_batches_per_epoch` to its steps per epoch when `search` was created
    without one (each `fit`, when it knows them).

    When a default summary writer records while the train function is traced, each step
    writes the line-search summaries at `optimizer.iterations` (the number of steps before).

    Supported (tested): `jit_compile=True` (the whole step, trials included, compiled by
    XLA; no summary writer may record while it is traced: log with
    `WeightUpdateRatioCallback`); the ``mixed_float16`` policy (the losses and the condition
    in float32 or wider, the gradient pass with dynamic loss scaling: `loss_scale`);
    `tf.distribute.MirroredStrategy` (every replica gathers the global batch and makes the
    same search on it; the first replica's outcome is assigned everywhere). Other
    strategies are refused.

    Args:
      model: the `keras.Model` (or layer) to train.
      search: a `StochasticArmijo`.
      **kwargs: passed on to `keras.Model` (e.g. `name`).

    Attributes:
      loss_scale: a float32 `tf.Variable` when the model computes in float16 (the scale
        of the gradient pass's loss: a step whose scaled gradients are not finite moves
        nothing and halves it; after 2000 steps with finite gradients it doubles), else
        None.
    """

    def __init__(self, model: Any, search: StochasticArmijo, **kwargs: Any):
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                "LineSearchModel needs the TensorFlow backend of Keras, got "
                f"{keras.backend.backend()!r}"
            )
        if not isinstance(model, keras.layers.Layer):
            raise TypeError(f"model must be a keras.Model, got {type(model).__name__}")
        if not isinstance(search, StochasticArmijo):
            raise TypeError(
                f"search must be an armijo.StochasticArmijo, got {type(search).__name__}"
            )
        _check_strategy(tf.distribute.get_strategy())
        super().__init__(**kwargs)
        self.model = model
        self._search = search
        self._steps_from_fit = search.n_batches_per_epoch is None
        # The last steps' results, which WeightUpdateRatioCallback writes (line_search_log).
        self._step_log = StepLog()
        if _computes_in_float16(model):
            self.loss_scale = tf.Variable(
                INITIAL_LOSS_SCALE, dtype=tf.float32, trainable=False, name="armijo_loss_scale")
            self._finite_steps = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="armijo_finite_steps")
        else:
            self.loss_scale = None

    @property
    def search(self) -> StochasticArmijo:
        return self._search

    @property
    def step_log(self) -> StepLog:
        """The results of the last `StepLog.capacity` steps: `step_log.read(first, end)`
        gives the rows [step, step size, backtracks, loss, new loss] of steps first..end-1
        (the steps counted by `optimizer.iterations`)."""
        return self._step_log

    def call(self, inputs: Any, training: Any = None) -> Any:
        if self.model._call_has_training_arg:
            return self.model(inputs, training=training)
        return self.model(inputs)

    def compile(self, optimizer: Any = None, *args: Any, jit_compile: Any = False, **kwargs: Any):
        """`keras.Model.compile` without an optimizer (the search makes the updates).

        `jit_compile` defaults to False; True compiles the whole step with XLA.
        `auto_scale_loss` is not available: the search needs the unscaled loss (under
        float16 the gradient pass scales its own, see `loss_scale`).

        Raises:
          ValueError: an optimizer was given, or auto_scale_loss=True.
        """
        if optimizer is not None:
            raise ValueError(
                "LineSearchModel trains with its armijo.StochasticArmijo search: compile it "
                f"with loss= and metrics= and no optimizer, got optimizer={optimizer!r}"
            )
        if args:
            raise TypeError("LineSearchModel.compile takes keyword arguments only (loss=, ...)")
        if kwargs.pop("auto_scale_loss", False):
            raise ValueError("LineSearchModel.compile does not take auto_scale_loss=True")
        super().compile(
            optimizer=keras.optimizers.SGD(learning_rate=_StoredStepSize(self._search)),
            jit_compile=jit_compile,
            auto_scale_loss=False,
            **kwargs,
        )

    def fit(self, *args: Any, callbacks: Any = None, **kwargs: Any):
        """`keras.Model.fit`; sets `search.n_batches_per_epoch` to the steps per epoch when
        the search was created without it."""
        own = _StepsPerEpoch(self)
        if callbacks is None:
            callbacks = [own]
        elif isinstance(callbacks, keras.callbacks.CallbackList):
            callbacks.append(own)
        else:
            callbacks = [own, *callbacks]
        return super().fit(*args, callbacks=callbacks, **kwargs)

    def train_step(self, data: Any) -> Any:
        strategy = tf.distribute.get_strategy()
        _check_strategy(strategy)
        replicas = strategy.num_replicas_in_sync
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if replicas > 1:
            # Every replica searches on the global batch: the losses are the global batch's.
            context = tf.distribute.get_replica_context()
            x, y, sample_weight = tf.nest.map_structure(
                lambda t: None if t is None else context.all_gather(t, axis=0),
                (x, y, sample_weight))
        model = self.model
        search = self._search
        trainable = list(model.trainable_variables)
        if not trainable:
            raise ValueError("LineSearchModel: the model has no trainable variables")
        if search.reset == "grow" and search.n_batches_per_epoch is None:
            raise ValueError(
                'LineSearchModel: reset="grow" needs n_batches_per_epoch, and fit does not '
                "know its steps per epoch (a dataset of unknown size?): pass "
                "n_batches_per_epoch to StochasticArmijo"
            )
        recording = _summaries.will_record()
        if recording and self.jit_compile:
            raise ValueError(
                "LineSearchModel with jit_compile=True: a default summary writer records while "
                "the train function is traced, and XLA cannot compile summary writes. Log "
                "the line search with WeightUpdateRatioCallback (it writes every step from "
                "the step log), or compile with jit_compile=False"
            )
        search.build(trainable)
        targets = [tf_variable(v, "LineSearchModel") for v in trainable]
        state_variables = [tf_variable(v, "LineSearchModel") for v in model.non_trainable_variables]
        state_before = [tf.identity(v) for v in state_variables]
        call_kwargs = {"training": True} if model._call_has_training_arg else {}

        def forward(weights):
            """The training loss at `weights`, from the state before the step: (loss,
            y_pred, the state this pass leaves)."""
            y_pred, state_after, losses = model.stateless_call(
                weights, state_before, x, return_losses=True, **call_kwargs
            )
            if losses:  # as Keras' JAX trainer: the pass's losses for compute_loss
                self._losses_override.clear()
                self._losses_override = list(losses)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            if losses:
                self._losses_override = []
            if replicas > 1:
                # Keras divides each replica's loss by the replicas (their sum is the global
                # batch's); here each replica's loss is the global batch's already.
                loss = loss * tf.cast(replicas, loss.dtype)
            return loss, y_pred, state_after

        gradient_pass = {}

        def value_and_gradients():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for t in targets:
                    tape.watch(t)
                loss, y_pred, state_after = forward([tf.convert_to_tensor(t) for t in targets])
                scaled = loss if self.loss_scale is None else loss * self.loss_scale
            grads = tape.gradient(scaled, targets)
            if self.loss_scale is not None:
                grads = self._unscaled(grads, targets, gradient_pass)
            # The metrics as the gradient pass leaves them (computing a loss updates some:
            # the per-output losses of a multi-output model), restored after the trials.
            metric_variables = [
                tf_variable(v, "LineSearchModel") for m in self.metrics for v in m.variables]
            gradient_pass.update(
                loss=loss,
                y_pred=y_pred,
                state_after=state_after,
                metric_variables=metric_variables,
                metric_values=[tf.identity(v) for v in metric_variables],
            )
            return loss, grads

        def trial_loss(weights):
            # A stateless pass from the state before the step, as the gradient pass: the
            # same seed state (so the same dropout masks), batch statistics; the state it
            # returns is dropped. (A plain `model(x, training=True)` here would advance each
            # dropout layer's seed variable once per trial: trial k would draw the masks of
            # seed state + k, and the search would compare losses of different functions.)
            return forward(weights)[0]

        iterations = tf_variable(self.optimizer.iterations)
        step = tf.identity(iterations)
        searched = search.search_step(value_and_gradients, trial_loss, trainable)
        # The non-trainable state once, as the gradient pass of a plain SGD step.
        assignments = searched.assignments + list(
            zip(state_variables, gradient_pass["state_after"]))
        assignments += gradient_pass.get("loss_scale_assignments", [])
        assignments.append((iterations, step + 1))

        def record(result: StepResult) -> None:
            if recording:
                _summaries.log_step(result, step)
            self._step_log.record(step, result)

        done = _assign_and_record(assignments, searched.result, record, replicas)
        with tf.control_dependencies([done]):
            # Trials update no metric.
            for v, value in zip(
                gradient_pass["metric_variables"], gradient_pass["metric_values"]
            ):
                v.assign(value, read_value=False)
            loss = tf.identity(gradient_pass["loss"])
        y_pred = gradient_pass["y_pred"]
        self._loss_tracker.update_state(
            loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0]
        )
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _unscaled(self, grads: list[Any], targets: list[tf.Variable], gradient_pass: dict):
        """The gradients of the scaled loss divided by the scale; all zero (the search then
        moves nothing) when one is not finite. Keeps the scale's new values in
        `gradient_pass`."""
        scale = tf.identity(self.loss_scale)
        grads = [
            tf.zeros_like(t) if g is None else tf.convert_to_tensor(g) / tf.cast(scale, t.dtype)
            for g, t in zip(grads, targets)
        ]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        grads = [tf.where(finite, g, tf.zeros_like(g)) for g in grads]
        steps = self._finite_steps + 1
        grow = steps >= LOSS_SCALE_GROWTH_STEPS
        gradient_pass["loss_scale_assignments"] = [
            (self.loss_scale, tf.where(finite, tf.where(grow, scale * 2.0, scale), scale / 2.0)),
            (self._finite_steps, tf.where(
                finite, tf.where(grow, tf.zeros_like(steps), steps), tf.zeros_like(steps))),
        ]
        return grads


def _assign_and_record(assignments, result: StepResult, record, replicas: int) -> tf.Tensor:
    """Assign every (variable, value) pair, then `record(result)`. Under a strategy with
    several replicas, in cross-replica context: the first replica's values everywhere, so
    that every replica holds the same weights and search state, and one record per step."""
    variables = [v for v, _ in assignments]
    values = [value for _, value in assignments]
    if replicas == 1:
        # After the step's data is read and searched (an iterator out of data then changes
        # nothing, not even `iterations`).
        with tf.control_dependencies(list(result)):
            ops = [v.assign(value, read_value=False) for v, value in zip(variables, values)]
        with tf.control_dependencies([op for op in ops if op is not None]):
            record(StepResult(*(tf.identity(t) for t in result)))
            return tf.constant(True)

    def merged(strategy: tf.distribute.Strategy, values: Any, result: Any) -> tf.Tensor:
        def first(value: Any) -> Any:
            return strategy.experimental_local_results(value)[0]

        with tf.control_dependencies([first(t) for t in result]):
            ops = [v.assign(first(value), read_value=False)
                   for v, value in zip(variables, values)]
        with tf.control_dependencies([op for op in ops if op is not None]):
            record(StepResult(*(tf.identity(first(t)) for t in result)))
            return tf.constant(True)

    return tf.distribute.get_replica_context().merge_call(merged, args=(values, tuple(result)))


def _check_strategy(strategy: tf.distribute.Strategy) -> None:
    if strategy.num_replicas_in_sync > 1 and not isinstance(
        strategy, tf.distribute.MirroredStrategy
    ):
        raise ValueError(
            f"LineSearchModel under {type(strategy).__name__} is not supported: every "
            "replica must take the same decision on the global batch, which is implemented "
            "(and tested) for tf.distribute.MirroredStrategy only"
        )


def _computes_in_float16(layer: Any) -> bool:
    """Whether `layer` or one of its sublayers computes in float16 (a mixed_float16 policy)."""
    if getattr(layer, "compute_dtype", None) == "float16":
        return True
    return any(_computes_in_float16(sub) for sub in getattr(layer, "layers", None) or [])


class _StoredStepSize(keras.optimizers.schedules.LearningRateSchedule):
    """The internal optimizer's learning rate: the search's stored step size (float32)."""

    def __init__(self, search: StochasticArmijo):
        self._search = search

    def __call__(self, step: Any) -> Any:
        return tf.cast(self._search.step_size, tf.float32)

    def get_config(self) -> dict:
        return {}


class _StepsPerEpoch(keras.callbacks.Callback):
    """Sets the search's n_batches_per_epoch to fit's steps per epoch, and builds its
    momentum's slots in the model's strategy scope, before the train function first runs
    (it reads the growth factor at run time)."""

    def __init__(self, owner: LineSearchModel):
        super().__init__()
        self._owner = owner

    def on_train_begin(self, logs: Any = None) -> None:
        steps = (self.params or {}).get("steps")
        if self._owner._steps_from_fit and steps:
            self._owner._search.n_batches_per_epoch = int(steps)
        trainable = self._owner.model.trainable_variables
        if trainable:
            with self._owner.distribute_strategy.scope():
                self._owner._search.build(trainable)

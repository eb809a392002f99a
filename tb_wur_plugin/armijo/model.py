"""`LineSearchModel`: `model.fit` with the stochastic Armijo line search (TensorFlow backend)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tb_wur_plugin.armijo import summaries as _summaries
from tb_wur_plugin.armijo.search import StochasticArmijo
from tb_wur_plugin.tf_write.variables import tf_variable
from tb_wur_plugin.armijo.line_search_log import StepLog


class LineSearchModel(keras.Model):
    """A Keras model that calls `model` and trains it with `search` in `fit`: one
    `StochasticArmijo` step per batch, inside the compiled train function.

    Each training step makes one gradient pass (forward and backward) and one forward pass
    per trial, all on the same batch and in the same traced function (no host round trip).
    All passes are `model.stateless_call`s from the same non-trainable state, the state
    before the step: every trial sees the gradient pass's dropout masks (the same seed
    generator state), and BatchNormalization normalizes with the batch statistics as in
    the gradient pass. The non-trainable state the gradient pass produces (moving
    statistics, advanced seeds) is assigned once, after the search: exactly what a plain SGD
    step's gradient pass would leave; the seed state thus advances once per step. Computing
    a trial's loss updates no metric (the metrics, e.g. a multi-output model's per-output
    losses, are restored to what the gradient pass left). `model` and its layers are not
    changed.

    Compile it with `loss=`, `metrics=` (and the other `compile` arguments) but no
    optimizer: `model.optimizer` is then an internal SGD that applies no update; its
    `iterations` counts the searched steps (for callbacks that read it) and its
    `learning_rate` reads the stored step size `search.step_size`.

    `fit` sets `search.n_batches_per_epoch` to its steps per epoch when `search` was created
    without one (each `fit`, when it knows them).

    When a default summary writer records while the train function is traced, each step
    writes the line-search summaries at `optimizer.iterations` (the number of steps before).

    Args:
      model: the `keras.Model` (or layer) to train.
      search: a `StochasticArmijo`.
      **kwargs: passed on to `keras.Model` (e.g. `name`).
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
        super().__init__(**kwargs)
        self.model = model
        self._search = search
        self._steps_from_fit = search.n_batches_per_epoch is None
        # The last steps' results, which WeightUpdateRatioCallback writes (line_search_log).
        self._step_log = StepLog()

    @property
    def search(self) -> StochasticArmijo:
        return self._search

    def call(self, inputs: Any, training: Any = None) -> Any:
        if self.model._call_has_training_arg:
            return self.model(inputs, training=training)
        return self.model(inputs)

    def compile(self, optimizer: Any = None, *args: Any, jit_compile: Any = False, **kwargs: Any):
        """`keras.Model.compile` without an optimizer (the search makes the updates).

        `jit_compile` defaults to False (XLA compilation of the search is untested).
        `auto_scale_loss` is not available: the search needs the unscaled loss.

        Raises:
          ValueError: an optimizer was given.
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
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
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
        targets = [tf_variable(v, "LineSearchModel") for v in trainable]
        state_variables = list(model.non_trainable_variables)
        state_before = [tf.identity(tf_variable(v, "LineSearchModel")) for v in state_variables]
        call_kwargs = {"training": True} if model._call_has_training_arg else {}

        def forward():
            """The training loss at the variables' current values, from the state before the
            step: (loss, y_pred, the state this pass leaves)."""
            y_pred, state_after, losses = model.stateless_call(
                [tf.convert_to_tensor(t) for t in targets],
                state_before,
                x,
                return_losses=True,
                **call_kwargs,
            )
            if losses:  # as Keras' JAX trainer: the pass's losses for compute_loss
                self._losses_override.clear()
                self._losses_override = list(losses)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            if losses:
                self._losses_override = []
            return loss, y_pred, state_after

        gradient_pass = {}

        def value_and_gradients():
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                for t in targets:
                    tape.watch(t)
                loss, y_pred, state_after = forward()
            # The metrics as the gradient pass leaves them (computing a loss updates some:
            # the per-output losses of a multi-output model), restored after the trials.
            metric_variables = [tf_variable(v, "LineSearchModel") for m in self.metrics for v in m.variables]
            gradient_pass.update(
                loss=loss,
                y_pred=y_pred,
                state_after=state_after,
                metric_variables=metric_variables,
                metric_values=[tf.identity(v) for v in metric_variables],
            )
            return loss, tape.gradient(loss, targets)

        def trial_loss():
            # A stateless pass from the state before the step, as the gradient pass: the
            # same seed state (so the same dropout masks), batch statistics; the state it
            # returns is dropped. (A plain `model(x, training=True)` here would advance each
            # dropout layer's seed variable once per trial: trial k would draw the masks of
            # seed state + k, and the search would compare losses of different functions.)
            return forward()[0]

        iterations = tf_variable(self.optimizer.iterations)
        step = tf.identity(iterations)
        result = search.search_step(value_and_gradients, trial_loss, trainable)
        with tf.control_dependencies([result.step_size]):
            # The non-trainable state once, as the gradient pass of a plain SGD step.
            for v, value in zip(state_variables, gradient_pass["state_after"]):
                tf_variable(v, "LineSearchModel").assign(value, read_value=False)
            iterations.assign_add(1, read_value=False)
            # Trials update no metric.
            for v, value in zip(
                gradient_pass["metric_variables"], gradient_pass["metric_values"]
            ):
                v.assign(value, read_value=False)
        _summaries.log_step(result, step)
        self._step_log.record(step, result)
        loss = gradient_pass["loss"]
        y_pred = gradient_pass["y_pred"]
        self._loss_tracker.update_state(
            loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0]
        )
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


class _StoredStepSize(keras.optimizers.schedules.LearningRateSchedule):
    """The internal optimizer's learning rate: the search's stored step size (float32)."""

    def __init__(self, search: StochasticArmijo):
        self._search = search

    def __call__(self, step: Any) -> Any:
        return tf.cast(self._search.step_size, tf.float32)

    def get_config(self) -> dict:
        return {}


class _StepsPerEpoch(keras.callbacks.Callback):
    """Sets the search's n_batches_per_epoch to fit's steps per epoch, before the train
    function first runs (it reads the growth factor at run time)."""

    def __init__(self, owner: LineSearchModel):
        super().__init__()
        self._owner = owner

    def on_train_begin(self, logs: Any = None) -> None:
        steps = (self.params or {}).get("steps")
        if self._owner._steps_from_fit and steps:
            self._owner._search.n_batches_per_epoch = int(steps)

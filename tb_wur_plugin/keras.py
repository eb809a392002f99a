"""`WeightUpdateRatioCallback`: weight-update ratios from `model.fit`, with no change to the model.

The callback works on Keras's TensorFlow, JAX and PyTorch backends. This module imports no
TensorFlow: the TensorFlow backend's writing is in `keras_backends.tensorflow_backend`, the
others' (through the TensorFlow-free `writer.SummaryWriter`) in
`keras_backends.array_backends`, imported at `fit`'s start.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from tb_wur_plugin._optional import require
from tb_wur_plugin.event_write import (
    TrainingJudgement,
    positive_int,
    run_claims,
    watch_arguments,
)
from tb_wur_plugin.judgement.online import Flag
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE

require("keras", "tensorflow", __name__)  # one line naming .[tensorflow] when missing

import keras
import numpy as np


class WeightUpdateRatioCallback(keras.callbacks.Callback):
    """Logs ‖Δw‖₂ / ‖w‖₂ of every trainable variable every `update_freq` optimizer steps.

    Works unchanged on Keras's TensorFlow, JAX and PyTorch backends, histograms included,
    with no change to the model or its training step. A step is the number of updates the
    optimizer applied before it, so the logged steps are 0, N, 2N, ...; other steps cost an
    integer comparison. Tags are the variables' paths (`variable.path`); values follow the
    contract (+inf for a zero weight that moved, 0 when nothing moved, NaN when not finite).
    Each logged step also writes the learning rate (when it reads as a number) and the
    skipped-step marker (1 when the optimizer skipped the update, e.g. a
    `LossScaleOptimizer` step with non-finite gradients). Variables are looked up at every
    logged step; a model that Keras builds during its first step has no weights to compare
    step 0 with (a warning says so), and a model with no trainable weights (all its layers
    frozen) logs no ratio, with a `UserWarning` (once per `fit`) rather than an empty run in
    silence. Under `MultiWorkerMirroredStrategy` only the chief writes. Each `fit` starts
    afresh.

    `steps_per_execution` k > 1 (TensorFlow and JAX; Keras's PyTorch backend refuses it):
    each logged step's ratios are still those of its own update. On TensorFlow the model's
    `train_step` is wrapped (and its train function traced again): at a logged step it
    copies the trainable variables before and after the update into non-trainable
    variables (ceil(k / `update_freq`) pairs of copies of the weights), which the callback
    writes at the next batch begin; other steps cost one comparison in the graph. The
    wrapped step stays for the callback's next `fit` of the model; a call of the train
    function from anything else gives the model its own step back. The variables logged
    are those the model has at `fit`'s start. On JAX the callback runs each execution's k
    steps one call of Keras's jitted step at a time, as Keras itself does, and writes a
    logged step from the state before and after its own call. The written run is the same
    as with k = 1. Not under a `tf.distribute` strategy, nor with a `LineSearchModel`.

    Acting while training: each logged step is judged as it is written, by the judgement of
    `tb-wur report` (with the same `patience`, `low` and `high`) on the steps logged so far
    in this `fit`: each flag that fires (a `tb_wur_plugin.Flag`) is logged once through the
    `logging` logger `tb_wur_plugin` at WARNING, passed to `on_flag` and listed in `flags`.
    Once a flag whose reason is in `stop_on` fires, the callback sets
    `model.stop_training = True`. The ratios of logged step S are read at the beginning of
    the next batch (the callback has no batch-end hook, so that Keras keeps dispatching
    batch ends asynchronously), so the flag fires there and `fit` ends at the end of that
    batch, step S + 1 (S + 2 updates made in all); when step S is the last batch of an
    epoch, its ratios are read at the epoch's end and `fit` ends there (S + 1 updates).
    With `steps_per_execution` k > 1 a batch is an execution of k steps: on TensorFlow, the
    flag fires at the next execution's begin and `fit` ends at that execution's end; on
    JAX it fires at step S, and the execution holding S makes no further step. Under
    `MultiWorkerMirroredStrategy` every worker computes and judges the same ratios (only the
    chief writes them), so every worker fires the same flags and stops at the same step.

    Resuming: steps are read from `optimizer.iterations`, so a `fit` resumed with the
    optimizer's state restored (`keras.models.load_model`, `model.load_weights` of a
    checkpoint holding the optimizer, `tf.train.Checkpoint`) continues its steps: the first
    logged step is the first multiple of `update_freq` at or after the restored count.

    One run directory, one writer: during its `fit` the callback holds `log_dir/train`, and
    a second `WeightUpdateRatioCallback` (or PyTorch `watch` handle) of this process writing
    the same directory at the same time raises a `RuntimeError` (two writers of one run
    would log each step twice). The directory is free again when the `fit` ends, also when
    it ends by an exception.

    With an `armijo.LineSearchModel` (TensorFlow backend) it also writes every step's
    `step_size`, `backtracks`, `loss` and `new_loss` into the same run; enter no summary
    writer around such a `fit`.

    How each backend snapshots, reduces and writes is in `docs/keras.md`.

    Args:
      log_dir: directory of the TensorBoard logs (a `str` or `os.PathLike`; on TensorFlow
        any path `tf.io.gfile` handles, elsewhere a local path or a URL TensorBoard's
        `gfile` handles); like `keras.callbacks.TensorBoard`, the callback writes into
        `log_dir/train`.
      update_freq: log every this many optimizer steps (an int >= 1).
      histograms: also write the histogram of each variable's elementwise ratios (a bool).
      flush_millis: None (default) writes each logged step to the event file at once, so
        that a killed job loses at most the step being written. An int >= 1 lets the writer
        buffer logged steps and flush when a step comes at least this many milliseconds
        after the last flush, at each epoch's end and at the end of training: fewer writes,
        for filesystems where each flush is costly (object stores rewrite the file). On
        JAX and PyTorch a local logdir gets every event at once whatever this says.
      spectral: also log, at the same steps, the spectral update ratio ‖ΔW‖₂ / ‖W‖₂
        (largest singular values) of each variable of two or more dimensions, viewed as
        the matrix (prod(kernel) · in, out); computed on the variables' device at logged
        steps only, warm-started from the previous logged step (`docs/keras.md`). They
        are judged too (`Flag.metric == "spectral"`).
      on_flag: called with each `Flag` as it fires, on the training thread, after it is
        logged; its exceptions propagate out of `fit`. None: the flags are only logged.
      stop_on: reasons (`tb_wur_plugin.judgement.reasons.NAMES`, e.g. `{"nan",
        "not_moving"}`) whose first flag stops the `fit` (above). Default: none.
      patience: judged steps in a row that make a streak flag (an int >= 1), as the
        report's `--patience`.
      low, high: an explicit band, as the report's `--low`/`--high`; both None (default):
        the default judgement.

    Attributes:
      flags: every `Flag` fired so far in the current (or last) `fit`, in order.

    Raises:
      TypeError: an argument has the wrong type (`stop_on` a single string, `on_flag` not
        callable).
      ValueError: `update_freq`, `flush_millis` or `patience` is below 1, `stop_on` names
        an unknown reason, or the band is not valid; at the start of `fit`, a
        `steps_per_execution` other than 1 on the PyTorch backend or with a
        `LineSearchModel`, or a variable path in the plugin's reserved namespace (`_wur/`).
      RuntimeError: at the start of `fit`, another active `WeightUpdateRatioCallback` (in
        this `fit` or another one running) or PyTorch `watch` handle of this process writes
        `log_dir/train`.
      NotImplementedError: at the start of `fit`, a Keras backend other than TensorFlow,
        JAX and PyTorch, (TensorFlow) a `ParameterServerStrategy`, or `steps_per_execution`
        other than 1 under a `tf.distribute` strategy.

    Example:
      >>> callback = WeightUpdateRatioCallback("logs/run1", update_freq=100)
      >>> model.fit(x, y, epochs=10, callbacks=[callback])

      With the line search, one run holds the ratios and every step's step size:

      >>> trainer = armijo.LineSearchModel(model, armijo.StochasticArmijo())
      >>> trainer.compile(loss="sparse_categorical_crossentropy")
      >>> trainer.fit(x, y, callbacks=[WeightUpdateRatioCallback("logs/run1")])
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        update_freq: int = 100,
        histograms: bool = False,
        flush_millis: int | None = None,
        spectral: bool = False,
        on_flag: Callable[[Flag], Any] | None = None,
        stop_on: Iterable[str] = (),
        patience: int = DEFAULT_PATIENCE,
        low: float | None = None,
        high: float | None = None,
    ):
        super().__init__()
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a path, got {type(log_dir).__name__}: {log_dir!r}")
        self.log_dir = os.fspath(log_dir)
        if not isinstance(self.log_dir, str):
            raise TypeError(f"log_dir must be a str path, got bytes: {log_dir!r}")
        if not self.log_dir:
            raise ValueError("log_dir must not be empty")
        self.update_freq, self.histograms, self.spectral = watch_arguments(
            update_freq, histograms, spectral,
            every_name="update_freq", every_unit="(optimizer steps)",
        )
        self.flush_millis = positive_int(
            flush_millis, "flush_millis", "(milliseconds)", none_allowed=True
        )
        # the judgement's settings, checked here; each `fit`'s logger judges with its own
        self._judgement = TrainingJudgement(on_flag, stop_on, patience, low, high)
        self._judging = dict(on_flag=on_flag, stop_on=self._judgement.stop_on,
                             patience=patience, low=low, high=high)
        self._logger = None
        self._logged_model = None
        self._claim = None  # `log_dir/train`'s key in `run_claims` during a fit
        self._fit_frame = None  # the frame of that `fit` (the claim lasts while it runs)
        # steps_per_execution > 1: the frame of the `fit` whose train function the callback
        # installed (other callers get the model's own); on TensorFlow, the capture installed
        # on a model with its train function, kept across fits
        self._executing_fit = None
        self._kept_capture = None
        # JAX: (model, its train function, Keras's one-step function of that model), kept
        # for the callback's next `fit` of the model while its train function is the same
        self._kept_one_step = None
        self._reset()

    def _reset(self) -> None:
        """Forget the state of an earlier `fit`."""
        # (step, watched, snapshot, loss scale) of a logged step not yet recorded
        self._pending = None
        # `optimizer.iterations` is read only near logged steps: `_step_bound` is at least
        # the number of updates applied so far (each batch adds at most one), and
        # `_next_logged` the next step to log.
        self._step_bound, self._next_logged = 0, float("inf")
        self._warned_no_weights = False
        # A `LineSearchModel`'s step log: the first step whose line-search row is not
        # written yet, and the bound on `_step_bound` before which its rows must be read.
        self._line_search_from, self._line_search_due = 0, float("inf")
        self._warned_line_search = False
        # steps_per_execution k > 1: the TensorFlow backend's capture in the train function,
        # or (JAX) whether the callback runs Keras's executions one step at a time.
        self._steps_per_execution = 1
        self._capture = None
        self._stepwise, self._original_function = False, None

    def on_train_begin(self, logs=None):
        if self._logger is not None:  # left open by an interrupted fit
            self._finish_interrupted()
        self._reset()
        steps_per_execution = getattr(self.model, "steps_per_execution", 1) or 1
        if steps_per_execution != 1 and keras.backend.backend() == "torch":
            raise ValueError(
                f"WeightUpdateRatioCallback: steps_per_execution={steps_per_execution} on "
                "Keras's torch backend: its trainer runs one optimizer step per call and "
                "refuses steps_per_execution > 1 (compile with steps_per_execution=1, or use "
                "the tensorflow or jax backend)"
            )
        run_dir = os.path.join(self.log_dir, "train")
        run_claims.check(run_dir, self)  # before a file is opened
        backend = _backend()
        self._read = backend.read_step
        self._logger = backend.Logger(
            self.model, self.log_dir, self.flush_millis, self.histograms, self.spectral,
            self._judging,
        )
        self._judgement = self._logger.judgement
        self._logged_model = self.model
        if self._logger.active:  # a worker other than the chief writes no file: no claim
            self._fit_frame = _fit_frame(self.model)
            self._claim = run_claims.claim(
                run_dir, self, "WeightUpdateRatioCallback",
                "Give each WeightUpdateRatioCallback its own log_dir (one holds log_dir/train "
                "until its fit ends)",
                _fitting,
            )
        self._step_bound = self._read_step()
        self._next_logged = -(-self._step_bound // self.update_freq) * self.update_freq
        if self._logger.step_log is not None:
            self._line_search_from = self._step_bound
            self._line_search_due = self._step_bound + self._logger.step_log.capacity
        if steps_per_execution != 1:
            self._install_executions(backend, steps_per_execution)

    def on_train_batch_begin(self, batch, logs=None):
        if self._steps_per_execution != 1:
            if self._capture is not None:  # TensorFlow (on JAX, `_one_step` sees each step)
                self._collect_captured()
            return
        # The previous batch's update is applied by now, and this one's not yet.
        self._record_pending()
        if self._step_bound < min(self._next_logged, self._line_search_due):
            self._step_bound += 1
            return
        step = self._read_step()
        self._step_bound = step + 1
        if self._logger.step_log is not None:
            self._write_line_search(step)
        if step < self._next_logged or step % self.update_freq:
            return
        watched = self._logger.watched(self.model)
        if not watched:
            self._next_logged = step + self.update_freq
            self._warn_no_weights(step)
            return
        self._pending = (
            step, watched, self._logger.snapshot(watched), _loss_scale(self.model.optimizer)
        )
        rate = _learning_rate(self.model.optimizer)
        if rate is not None:
            self._logger.learning_rate(rate, step)

    def on_epoch_end(self, epoch, logs=None):
        self._record_pending(at_batch_begin=False)
        if self._capture is not None:
            self._collect_captured(at_batch_begin=False)
        if self._logger.step_log is not None:
            self._write_line_search(self._read_step())
        self._logger.flush()

    def on_train_end(self, logs=None):
        self._record_pending(at_batch_begin=False)
        if self._capture is not None:
            self._collect_captured(at_batch_begin=False)
        if self._logger.step_log is not None:
            self._write_line_search(self._read_step())
        self._uninstall_executions()
        self._logger.close()
        self._logger = None
        self._release()

    @property
    def flags(self) -> list[Flag]:
        """Every flag fired so far in the current (or last) `fit`, in order."""
        return self._judgement.flags

    def _release(self) -> None:
        run_claims.release(self._claim, self)
        self._claim, self._fit_frame = None, None

    def _finish_interrupted(self) -> None:
        """Close the writer of a `fit` that ended by an exception, after writing the
        line-search rows of the steps it made (bounded by `_step_bound`, so that steps made
        after it outside `fit` are not taken for its own)."""
        try:
            if self._logger.step_log is not None and self._logged_model is self.model:
                self._write_line_search(min(self._read_step(), self._step_bound))
        finally:
            self._uninstall_executions()
            self._logger.close()
            self._logger = None
            self._release()

    def _install_executions(self, backend: Any, steps_per_execution: int) -> None:
        """Set up the logging of a model compiled with `steps_per_execution` k > 1, in which
        Keras runs k optimizer steps per call of its train function: on TensorFlow, the
        logged steps' updates are captured inside that function (`ExecutionCapture`) and
        collected at batch begins; on JAX, whose train function calls a jitted one-step
        function k times from Python, the callback runs those k calls itself and sees each
        step (`_one_step`). The train function checks that it is called by this `fit`, and
        puts the model's own back otherwise (a `fit` ended by an exception).

        Raises:
          ValueError: the model is a `LineSearchModel`, whose step log needs
            `steps_per_execution=1`.
          NotImplementedError: (TensorFlow) the variables are under a `tf.distribute`
            strategy.
        """
        try:
            if self._logger.step_log is not None:
                raise ValueError(
                    f"WeightUpdateRatioCallback with a LineSearchModel needs "
                    f"steps_per_execution=1, got {steps_per_execution}"
                )
            model = self.model
            self._executing_fit = _fit_frame(model)
            self._steps_per_execution = steps_per_execution
            if keras.backend.backend() == "tensorflow":
                watched = self._logger.watched(model)
                if not watched:
                    warnings.warn(
                        "WeightUpdateRatioCallback: the model has no trainable weights at the "
                        "start of fit, and with steps_per_execution > 1 on TensorFlow the "
                        "variables logged are those it has then: nothing is logged in this "
                        f"fit into {self.log_dir}/train. Call the model on a batch before fit.",
                        UserWarning,
                        stacklevel=3,
                    )
                    return
                kept = self._kept_capture
                if kept is not None and kept[1] is model.train_function and kept[0].serves(
                    model, watched, self.update_freq, steps_per_execution
                ):
                    kept[0].restart()  # the function traced for an earlier `fit`
                    self._capture = kept[0]
                    return
                if kept is not None:
                    kept[0].uninstall()
                    self._kept_capture = None
                capture = backend.ExecutionCapture(
                    model, watched, self.update_freq, steps_per_execution
                )
                capture.install()
                captured = model.train_function

                def train_function(iterator):
                    if sys._getframe(1) is self._executing_fit and self._capture is capture:
                        return captured(iterator)
                    # called by a `fit` without the callback (or `train_on_batch`)
                    capture.uninstall()
                    if self._kept_capture is not None and self._kept_capture[0] is capture:
                        self._kept_capture = None
                    model.make_train_function()
                    return model.train_function(iterator)

                model.train_function = train_function
                self._capture, self._kept_capture = capture, (capture, train_function)
                return
            original = model.train_function
            kept = self._kept_one_step
            if kept is not None and kept[0] is model and kept[1] is original:
                one_step = kept[2]  # jitted for an earlier `fit`
            else:
                one_step = backend.one_step_function(model)
                self._kept_one_step = (model, original, one_step)

            def stepwise(state, iterator):
                if sys._getframe(1) is not self._executing_fit or not self._stepwise:
                    model.train_function = original  # left by a `fit` that raised
                    return original(state, iterator)
                logs, state = self._one_step(one_step, state, iterator)
                for _ in range(steps_per_execution - 1):
                    if model.stop_training:  # a flag in `stop_on` fired: no further step
                        break
                    try:
                        logs, state = self._one_step(one_step, state, iterator)
                    except StopIteration:  # the epoch's data ran out
                        break
                return logs, state

            model.train_function = stepwise
            self._stepwise, self._original_function = True, (stepwise, original)
        except BaseException:
            self._uninstall_executions()
            self._logger.close()
            self._logger = None
            self._release()
            raise

    def _uninstall_executions(self) -> None:
        """Give the model its own train function back (steps_per_execution > 1)."""
        # (TensorFlow: the wrapped step and its function stay for the callback's next `fit`,
        # until something else calls that function)
        self._capture, self._executing_fit = None, None
        if self._stepwise:
            self._stepwise = False
            stepwise, original = self._original_function
            if self._logged_model.train_function is stepwise:  # not made again since
                self._logged_model.train_function = original
            self._original_function = None

    def _collect_captured(self, at_batch_begin: bool = True) -> None:
        """Write the logged steps that the TensorFlow train function captured since the last
        collection, when one may have run: at a batch begin, when `_step_bound` (the
        iterations after the last call, at most) is past `_next_logged`; always at an
        epoch's end."""
        if at_batch_begin and self._step_bound <= self._next_logged:
            self._step_bound += self._steps_per_execution
            return
        for step, watched, before, rate in self._capture.collect():
            if rate is not None:
                self._logger.learning_rate(rate, step)
            self._logger.record(watched, before, step)
            self._next_logged = step + self.update_freq
        if self._judgement.should_stop:
            self.model.stop_training = True
        step = self._read_step()
        # every logged step before `step` has run, and was collected above
        self._next_logged = max(self._next_logged, -(-step // self.update_freq) * self.update_freq)
        self._step_bound = step + self._steps_per_execution if at_batch_begin else step

    def _one_step(self, one_step: Callable, state: Any, iterator: Any) -> tuple[Any, Any]:
        """Run one step of a JAX execution (`one_step(state, iterator)`, Keras's train
        function for `steps_per_execution=1`) and, when it is a logged step, write its
        ratios from the state before and after it."""
        if self._step_bound < self._next_logged:
            self._step_bound += 1
            return one_step(state, iterator)
        from tb_wur_plugin.keras_backends import array_backends

        model = self._logged_model  # not `self.model`, which would sync the donated state
        step = array_backends.state_step(model, state)
        self._step_bound = step + 1
        if step < self._next_logged or step % self.update_freq:
            return one_step(state, iterator)
        watched = self._logger.watched(model)
        if not watched:
            self._next_logged = step + self.update_freq
            self._warn_no_weights(step)
            return one_step(state, iterator)
        before = self._logger.snapshot(watched, array_backends.state_values(model, watched, state))
        rate = array_backends.state_learning_rate(model, state)
        logs, state = one_step(state, iterator)
        if rate is not None:
            self._logger.learning_rate(rate, step)
        self._logger.record(watched, before, step,
                            array_backends.state_values(model, watched, state))
        self._next_logged = step + self.update_freq
        if self._judgement.should_stop:
            model.stop_training = True
        return logs, state

    def _write_line_search(self, end: int) -> None:
        """Write the line-search rows of the steps from `_line_search_from` to `end`."""
        if end <= self._line_search_from:
            return
        missing = self._logger.line_search(self._line_search_from, end)
        if missing and not self._warned_line_search:
            self._warned_line_search = True
            warnings.warn(
                f"WeightUpdateRatioCallback: the line-search results of {missing} of the "
                f"steps {self._line_search_from} to {end - 1} were no longer held (more than "
                f"{self._logger.step_log.capacity} steps since they were read) and are not "
                "written",
                stacklevel=3,
            )
        self._line_search_from = end
        self._line_search_due = end + self._logger.step_log.capacity

    def _record_pending(self, at_batch_begin: bool = True) -> None:
        """Write the ratios of the pending logged step, whose batch has run.

        At the next batch's beginning it has; at an epoch's end it may not have: when the
        data runs out (a dataset of unknown length), Keras begins a batch that makes no
        update. Such a step, which neither advanced the iterations nor (for a
        `LossScaleOptimizer`, which skips a step by halving its scale) changed the loss
        scale, is dropped, to be logged when it runs.
        """
        if self._pending is None:
            return
        step, watched, before, scale = self._pending
        self._pending = None
        optimizer = self.model.optimizer  # on JAX, `self.model` syncs the variables
        if not at_batch_begin and self._read_step() == step and _loss_scale(optimizer) == scale:
            return
        self._logger.record(watched, before, step)
        self._next_logged = step + self.update_freq
        if self._judgement.should_stop:
            self.model.stop_training = True

    def _read_step(self) -> int:
        return self._read(self.model)

    def _warn_no_weights(self, step: int) -> None:
        if self._warned_no_weights:
            return
        self._warned_no_weights = True
        if getattr(self._logged_model, "built", False):  # built: it has all the weights it gets
            warnings.warn(
                f"WeightUpdateRatioCallback: the model has no trainable weights (all its "
                f"layers are frozen, trainable=False, or none has weights), so no ratio is "
                f"logged (from step {step} on) into {self.log_dir}/train.",
                UserWarning,
                stacklevel=3,
            )
            return
        warnings.warn(
            f"WeightUpdateRatioCallback: the model has no trainable weights before step "
            f"{step}, so nothing is logged for it. A model that Keras builds during its first "
            "step gets its weights then: call it on a batch before fit to log step 0.",
            UserWarning,
            stacklevel=3,
        )


def _fit_frame(model: Any) -> Any:
    """The frame of the `fit` of `model` that is calling the callback, or None (the
    callback is called outside `fit`)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            return frame
        frame = frame.f_back
    return None


def _fitting(callback: WeightUpdateRatioCallback) -> bool:
    """Whether the callback's `fit` is still running (its frame is on a thread's stack): a
    `fit` that raised calls no `on_train_end`, yet frees its directory. Without a known
    frame, while the callback's writer is open."""
    frame = callback._fit_frame
    if frame is None:
        return callback._logger is not None
    for top in sys._current_frames().values():
        while top is not None:
            if top is frame:
                return True
            top = top.f_back
    return False


def _backend() -> Any:
    """The module that writes for Keras's backend: `keras_backends.tensorflow_backend` or
    `keras_backends.array_backends` (JAX, PyTorch; no TensorFlow)."""
    if keras.backend.backend() == "tensorflow":
        from tb_wur_plugin.keras_backends import tensorflow_backend

        return tensorflow_backend
    from tb_wur_plugin.keras_backends import array_backends

    return array_backends


def _loss_scale(optimizer: Any) -> float | None:
    """The current scale of a built `LossScaleOptimizer`; None for other optimizers."""
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or not optimizer.built:
        return None
    return _to_float(optimizer.dynamic_scale)


def _learning_rate(optimizer: Any) -> float | None:
    """The learning rate the optimizer applies at its next step, if it is a number."""
    try:
        rate = _to_float(optimizer.learning_rate)
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None
    return rate


def _to_float(value: Any) -> float:
    """A scalar (a number, a Keras variable, a tensor of any backend) as a Python float."""
    if keras.backend.backend() == "tensorflow":
        return float(np.asarray(value))
    return float(keras.ops.convert_to_numpy(value))

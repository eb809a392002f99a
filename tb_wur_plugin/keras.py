"""`WeightUpdateRatioCallback`: weight-update ratios from `model.fit`, with no change to the model."""

from __future__ import annotations

import os
import warnings
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tb_wur_plugin.recording import default_writer_until_exit
from tb_wur_plugin.summary import learning_rate
from tb_wur_plugin.watch import record
from tb_wur_plugin.watched import snapshot, watched_variables, writes_summaries


class WeightUpdateRatioCallback(keras.callbacks.Callback):
    """Logs ‖Δw‖₂ / ‖w‖₂ of every trainable variable every `update_freq` optimizer steps.

    A step is the number of updates the optimizer has applied before it, so the logged steps
    are 0, N, 2N, ... Whether the coming step is logged is decided in Python before it runs,
    reading `optimizer.iterations` only near logged steps: other steps cost an integer
    comparison. A logged step that the optimizer skips (a `LossScaleOptimizer` step with
    non-finite gradients) is written as ratios 0 with the skipped-step marker set; the retry,
    which has the same step number, is not logged. The learning rate is written at each
    logged step when it can be read as a number. Variables are looked up at every logged
    step, so variables created later are logged from the next logged step on; a model that
    Keras builds during its first step has no weights to compare step 0 with (a warning says
    so): call it on a batch before `fit` to log step 0. Under `MirroredStrategy` it logs
    each step once; under `MultiWorkerMirroredStrategy` only the chief (worker 0) logs, and
    the other workers create no file.

    Args:
      log_dir: directory of the TensorBoard logs; like `keras.callbacks.TensorBoard`, the
        callback writes into `log_dir/train`.
      update_freq: log every this many optimizer steps (an int >= 1).
      histograms: also write the histogram of each variable's elementwise ratios.
      flush_millis: None (default) writes each logged step to the event file at once, so
        that a killed job loses at most the step being written. An int >= 1 lets the writer
        buffer logged steps and flush when a step comes at least this many milliseconds
        after the last flush, at each epoch's end and at the end of training: fewer writes,
        for filesystems where each flush is costly (object stores rewrite the file).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        update_freq: int = 100,
        histograms: bool = False,
        flush_millis: int | None = None,
    ):
        super().__init__()
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a path, got {type(log_dir).__name__}: {log_dir!r}")
        if isinstance(update_freq, bool) or not isinstance(update_freq, (int, np.integer)):
            raise TypeError(
                f"update_freq must be an int >= 1 (optimizer steps), got {update_freq!r}"
            )
        if update_freq < 1:
            raise ValueError(f"update_freq must be >= 1 (optimizer steps), got {update_freq}")
        if not isinstance(histograms, bool):
            raise TypeError(f"histograms must be a bool, got {histograms!r}")
        self.log_dir = os.fspath(log_dir)
        self.update_freq = int(update_freq)
        if flush_millis is not None and (
            isinstance(flush_millis, bool) or not isinstance(flush_millis, (int, np.integer))
            or flush_millis < 1
        ):
            raise ValueError(f"flush_millis must be None or an int >= 1, got {flush_millis!r}")
        self.histograms = histograms
        self.flush_millis = None if flush_millis is None else int(flush_millis)
        self._writer = None
        self._pending = None
        self._warned_no_weights = False

    def on_train_begin(self, logs=None):
        steps_per_execution = getattr(self.model, "steps_per_execution", 1)
        if steps_per_execution != 1:
            raise ValueError(
                "WeightUpdateRatioCallback needs model.compile(steps_per_execution=1), got "
                f"{steps_per_execution}: Keras then runs several optimizer steps in one call, "
                "so the change made by a single step cannot be observed. Use "
                "wur_summary.watch around optimizer.apply in a custom train_step instead."
            )
        if not writes_summaries(
            watched_variables(self.model.trainable_variables),
            getattr(self.model, "distribute_strategy", None),
        ):
            # A worker of a multi-worker strategy other than the chief, which logs every
            # step: this one creates no file and reads nothing.
            self._writer = tf.summary.create_noop_writer()
            self._step_bound, self._next_logged = 0, float("inf")
            return
        self._writer = tf.summary.create_file_writer(
            os.path.join(self.log_dir, "train"), flush_millis=self.flush_millis
        )
        self._warned_no_weights = False
        # `optimizer.iterations` is read only near logged steps: `_step_bound` is at least
        # the number of updates applied so far (each batch adds at most one), and
        # `_next_logged` the next step to log.
        self._step_bound = self._read_step()
        self._next_logged = -(-self._step_bound // self.update_freq) * self.update_freq

    def on_train_batch_begin(self, batch, logs=None):
        if self._step_bound < self._next_logged:
            self._step_bound += 1
            return
        step = self._read_step()
        self._step_bound = step + 1
        if step < self._next_logged or step % self.update_freq:
            return
        watched = watched_variables(self.model.trainable_variables)
        if not watched:
            self._next_logged = step + self.update_freq
            self._warn_no_weights(step)
            return
        self._pending = (step, watched, snapshot(watched))
        rate = _learning_rate(self.model.optimizer)
        if rate is not None:
            with self._writing():
                learning_rate(rate, step=step)

    def on_train_batch_end(self, batch, logs=None):
        if self._pending is None:
            return
        step, watched, before = self._pending
        self._pending = None
        with self._writing():
            record(watched, before, step, self.histograms)
        self._next_logged = step + self.update_freq

    def on_epoch_end(self, epoch, logs=None):
        self._writer.flush()

    def on_train_end(self, logs=None):
        self._pending = None
        self._writer.close()
        self._writer = None

    def _writing(self):
        """The writer as the default one; flushed on leaving unless `flush_millis` is set."""
        if self.flush_millis is None:
            return self._writer.as_default()
        return default_writer_until_exit(self._writer)

    def _read_step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def _warn_no_weights(self, step: int) -> None:
        if self._warned_no_weights:
            return
        self._warned_no_weights = True
        warnings.warn(
            f"WeightUpdateRatioCallback: the model has no trainable weights before step "
            f"{step}, so nothing is logged for it. A model that Keras builds during its first "
            "step gets its weights then: call it on a batch before fit to log step 0.",
            stacklevel=3,
        )


def _learning_rate(optimizer: Any) -> float | None:
    """The learning rate the optimizer applies at its next step, if it is a number."""
    try:
        rate = float(np.asarray(optimizer.learning_rate))
    except (TypeError, ValueError, AttributeError):
        return None
    return rate

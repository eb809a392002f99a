"""The TensorFlow backend of `WeightUpdateRatioCallback`: a `tf.summary` writer, `watch`'s
`record` (`record_ratios`, which also brings the written ratios to the host to be judged),
and the line-search rows of a `LineSearchModel`."""

from __future__ import annotations

import os
from typing import Any, Mapping

import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.event_write import TrainingJudgement
from tb_wur_plugin.tf_write import summary_ops
from tb_wur_plugin.tf_write.batched_write import ratio_layers
from tb_wur_plugin.tf_write.recording import default_writer_resource, default_writer_until_exit
from tb_wur_plugin.tf_write.watch import record_ratios
from tb_wur_plugin.tf_write.variables import (
    WatchedVariable,
    snapshot,
    watched_variables,
    writes_summaries,
)


class Logger:
    """Writes the callback's logged steps into `log_dir/train` with a `tf.summary` writer
    (a no-op writer on the workers of a multi-worker strategy other than the chief), and
    judges each one (`judgement`, a `TrainingJudgement` made with `judging`'s settings) on
    the ratios as written: the stored float32 values, the layers' shapes of the series'
    metadata, the skipped-step marker. A worker other than the chief computes the same
    ratios, by the same ops on its copy of the same synchronously updated variables, and
    judges them without writing, so that every worker fires the same flags and stops at the
    same step."""

    def __init__(
        self, model: Any, log_dir: str, flush_millis: int | None, histograms: bool,
        spectral: bool, judging: Mapping[str, Any],
    ):
        self._flush_millis = flush_millis
        self._histograms = histograms
        self._spectral = spectral  # warm vectors kept per variable (`tf_write.spectral`)
        self._shapes_of: tuple[tuple, list] = ((), [])  # (watched's key, their shapes)
        self.judgement = TrainingJudgement(**judging)
        # False: a worker of a multi-worker strategy other than the chief, which logs every
        # step: this one creates no file (it computes and judges the ratios only).
        self.active = writes_summaries(
            watched_variables(model.trainable_variables),
            getattr(model, "distribute_strategy", None),
        )
        if self.active:
            self._writer = tf.summary.create_file_writer(
                os.path.join(log_dir, "train"), flush_millis=flush_millis
            )
        else:
            self._writer = tf.summary.create_noop_writer()
        self.step_log = _step_log(model) if self.active else None

    @staticmethod
    def watched(model: Any) -> list:
        return watched_variables(model.trainable_variables)

    @staticmethod
    def snapshot(watched: list) -> list:
        return snapshot(watched)

    def learning_rate(self, rate: float, step: int) -> None:
        with self._writing():
            summary_ops.learning_rate(rate, step=step)

    def record(self, watched: list, before: list, step: int) -> None:
        """Write the ratios of `watched` since `before` at `step` (nothing on a worker other
        than the chief), then judge them."""
        with self._writing():
            written = record_ratios(watched, before, step, self._histograms, self._spectral)
        tags = [w.tag for w in watched]
        shapes = self._shapes(watched)
        self.judgement.observe(step, tags, shapes, written.ratios, written.skipped)
        if written.matrices:
            self.judgement.observe(
                step, [tags[i] for i in written.matrices],
                [shapes[i] for i in written.matrices], written.spectral, written.skipped,
                metadata.METRIC_SPECTRAL,
            )

    def _shapes(self, watched: list) -> list:
        """The shapes the series' metadata holds (None where not fully known), kept while
        the same variables are watched under the same tags."""
        key = tuple((w.tag, w.variable.ref()) for w in watched)
        if key != self._shapes_of[0]:
            tags = [w.tag for w in watched]
            shapes = [layer.shape for layer in ratio_layers(tags, [w.variable for w in watched])]
            self._shapes_of = (key, shapes)
        return self._shapes_of[1]

    def line_search(self, first: int, end: int) -> int:
        """Write the line-search rows of steps first, ..., end - 1; return how many of them
        the step log no longer held."""
        from tb_wur_plugin.armijo.line_search_log import write_rows

        rows, missing = self.step_log.read(first, end)
        if len(rows):
            with self._writing():
                write_rows(rows, default_writer_resource("WeightUpdateRatioCallback"))
        return missing

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def _writing(self):
        """The writer as the default one; flushed on leaving unless `flush_millis` is set."""
        if self._flush_millis is None:
            return self._writer.as_default()
        return default_writer_until_exit(self._writer)


def read_step(model: Any) -> int:
    return int(model.optimizer.iterations.numpy())


def _step_log(model: Any) -> Any:
    """The `StepLog` of a `LineSearchModel`, else None."""
    from tb_wur_plugin.armijo.model import LineSearchModel

    if isinstance(model, LineSearchModel):
        return getattr(model, "_step_log", None)
    return None


class ExecutionCapture:
    """The updates of the logged steps of a model compiled with `steps_per_execution` k > 1,
    captured inside its traced train function, where Keras runs k steps per call.

    `install` wraps the model's `train_step` (an attribute of the model for the `fit`) and
    has Keras trace its train function again: on the steps whose `optimizer.iterations`
    (read before the update) is a multiple of `every` and above the last one captured, the
    wrapped step copies the watched variables into non-trainable variables of a free slot
    before the step and again after it, with the step and the learning rate. The host reads
    the slots between calls (`collect`), and writes them as the callback writes a step of
    `steps_per_execution=1`: the same ops on the same values, the copies standing for the
    variables. There are ceil(k / every) slots, as many as the logged steps of one call:
    the callback collects after each call that may have run one.
    """

    def __init__(self, model: Any, watched: list, every: int, steps_per_execution: int):
        """Make the slots of `watched`.

        Raises:
          NotImplementedError: `watched` are distributed variables (a `tf.distribute`
            strategy), whose replicas' copies the slots do not hold.
        """
        if any(isinstance(w.variable, tf.distribute.DistributedValues) for w in watched):
            raise NotImplementedError(
                "WeightUpdateRatioCallback with steps_per_execution > 1 does not support "
                "tf.distribute strategies: compile with steps_per_execution=1 under a strategy"
            )
        self._model = model
        self._optimizer = model.optimizer
        self._watched = watched
        self._every = every
        self._steps_per_execution = steps_per_execution
        self._slots = -(-steps_per_execution // every)
        rate = _learning_rate_tensor(model.optimizer)
        with tf.init_scope():
            self._copies = [
                tuple(
                    [_slot(w.variable, f"wur_{role}_{slot}") for w in watched]
                    for role in ("before", "after")
                )
                for slot in range(self._slots)
            ]
            self._steps = tf.Variable(tf.zeros([self._slots], tf.int64), trainable=False,
                                      name="wur_steps")
            self._rates = None if rate is None else tf.Variable(
                tf.zeros([self._slots], rate.dtype), trainable=False, name="wur_rates"
            )
            self._count = tf.Variable(0, dtype=tf.int32, trainable=False, name="wur_count")
            self._last = tf.Variable(-1, dtype=tf.int64, trainable=False, name="wur_last")
        self._original = None

    def install(self) -> None:
        """Wrap the model's `train_step` and have Keras make its train function again."""
        model = self._model
        self._original = model.__dict__.get("train_step", _UNSET)
        model.train_step = self._wrapped(model.train_step)
        model.make_train_function(force=True)

    def serves(self, model: Any, watched: list, every: int, steps_per_execution: int) -> bool:
        """Whether this capture, installed, serves a `fit` of `model` with these settings:
        the same model, optimizer, watched variables (and tags), `every` and
        `steps_per_execution`."""
        return (
            self._original is not None and model is self._model
            and model.optimizer is self._optimizer and every == self._every
            and steps_per_execution == self._steps_per_execution
            and len(watched) == len(self._watched)
            and all(a.tag == b.tag and a.variable is b.variable
                    for a, b in zip(watched, self._watched))
        )

    def restart(self) -> None:
        """Free the slots and forget the last step captured (a `fit` starts afresh; its
        optimizer's steps may have been set back)."""
        self._count.assign(0)
        self._last.assign(-1)

    def uninstall(self) -> None:
        """Give the model its own `train_step` back; its next `fit` makes its train function
        again."""
        if self._original is None:
            return
        model = self._model
        if self._original is _UNSET:
            del model.train_step
        else:
            model.train_step = self._original
        self._original = None
        model.train_function = None

    def collect(self) -> list[tuple[int, list, list, float | None]]:
        """The steps captured since the last `collect`, in order: (step, the watched
        variables with the copies after the update in place of the variables, the copies
        before it, the learning rate or None); the slots are free again after it."""
        count = int(self._count.numpy())
        if not count:
            return []
        steps = self._steps.numpy()
        rates = None if self._rates is None else self._rates.numpy()
        captured = []
        for slot in range(count):
            before, after = self._copies[slot]
            captured.append((
                int(steps[slot]),
                [WatchedVariable(w.tag, copy) for w, copy in zip(self._watched, after)],
                [copy.value() for copy in before],
                None if rates is None else float(rates[slot]),
            ))
        self._count.assign(0)
        return captured

    def _wrapped(self, train_step: Any) -> Any:
        """`train_step` with the capture: on a step that is not logged, two conditionals
        that take no branch."""
        optimizer = self._model.optimizer
        variables = [w.variable for w in self._watched]

        def in_slot(run_in):  # run `run_in(slot)` for the slot `_count` names
            if self._slots == 1:
                return run_in(0)
            for slot in range(self._slots):
                tf.cond(tf.equal(self._count, slot), lambda slot=slot: run_in(slot),
                        lambda: tf.constant(False))
            return tf.constant(True)

        def step_with_capture(data):
            iteration = tf.cast(optimizer.iterations, tf.int64)
            logged = tf.logical_and(
                tf.logical_and(tf.equal(iteration % self._every, 0), iteration > self._last),
                self._count < self._slots,
            )

            def before(slot):
                for copy, variable in zip(self._copies[slot][0], variables):
                    copy.assign(variable.value())
                self._steps.scatter_nd_update([[slot]], tf.reshape(iteration, [1]))
                if self._rates is not None:
                    rate = tf.cast(_learning_rate_tensor(optimizer), self._rates.dtype)
                    self._rates.scatter_nd_update([[slot]], tf.reshape(rate, [1]))
                return tf.constant(True)

            def after(slot):
                for copy, variable in zip(self._copies[slot][1], variables):
                    copy.assign(variable.value())
                return tf.constant(True)

            def count_after():
                in_slot(after)
                self._last.assign(iteration)
                self._count.assign_add(1)
                return tf.constant(True)

            tf.cond(logged, lambda: in_slot(before), lambda: tf.constant(False))
            outputs = train_step(data)
            tf.cond(logged, count_after, lambda: tf.constant(False))
            return outputs

        return step_with_capture


_UNSET = object()


def _slot(variable: tf.Variable, name: str) -> tf.Variable:
    return tf.Variable(tf.zeros(variable.shape, variable.dtype), trainable=False, name=name)


def _learning_rate_tensor(optimizer: Any) -> tf.Tensor | None:
    """The optimizer's learning rate as a float tensor, or None when it is not one."""
    try:
        rate = tf.convert_to_tensor(optimizer.learning_rate)
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None
    if not rate.dtype.is_floating or rate.shape.rank != 0:
        return None
    return rate

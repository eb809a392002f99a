"""The TensorFlow backend of `WeightUpdateRatioCallback`: a `tf.summary` writer, `watch`'s
`record`, and the line-search rows of a `LineSearchModel`."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from tb_wur_plugin.tf_write import summary_ops
from tb_wur_plugin.tf_write.recording import default_writer_resource, default_writer_until_exit
from tb_wur_plugin.tf_write.watch import record
from tb_wur_plugin.tf_write.variables import snapshot, watched_variables, writes_summaries


class Logger:
    """Writes the callback's logged steps into `log_dir/train` with a `tf.summary` writer
    (a no-op writer on the workers of a multi-worker strategy other than the chief)."""

    def __init__(
        self, model: Any, log_dir: str, flush_millis: int | None, histograms: bool,
        spectral: bool = False,
    ):
        self._flush_millis = flush_millis
        self._histograms = histograms
        self._spectral = spectral  # warm vectors kept per variable (`tf_write.spectral`)
        # False: a worker of a multi-worker strategy other than the chief, which logs every
        # step: this one creates no file and reads nothing.
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
        with self._writing():
            record(watched, before, step, self._histograms, spectral=self._spectral)

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

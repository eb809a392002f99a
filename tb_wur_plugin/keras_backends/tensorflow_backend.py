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
from tb_wur_plugin.tf_write.variables import snapshot, watched_variables, writes_summaries


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
        # the shapes the series' metadata holds (None where not fully known)
        shapes = [layer.shape for layer in ratio_layers(tags, [w.variable for w in watched])]
        self.judgement.observe(step, tags, shapes, written.ratios, written.skipped)
        if written.matrices:
            self.judgement.observe(
                step, [tags[i] for i in written.matrices],
                [shapes[i] for i in written.matrices], written.spectral, written.skipped,
                metadata.METRIC_SPECTRAL,
            )

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

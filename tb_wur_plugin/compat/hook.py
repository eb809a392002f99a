"""`WeightUpdateRatioHook`: the ratios of the update the user's own train op makes, every N
steps of a `tf.compat.v1.train.MonitoredTrainingSession`, with no change to the loop.

A hook cannot change what the user's `session.run(train_op)` runs: fetches it adds run in
the same step, unordered with the update (a read of the weights in that run may see them
before or after it), and adding `wur.train_op` would update twice. So on a logged step the
hook makes two runs of its own around the user's: one before it reads the watched variables
(a copy of them in host memory) and `global_step`, one after it feeds that copy back and
computes the ratios of the change against the variables as the user's step left them. The
ratios are those of exactly the update the user's train op made. Other steps cost a Python
comparison: the hook adds no fetch, no feed and no op to them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tb_wur_plugin.compat import graph_summary
from tb_wur_plugin.compat.graph_watch import WeightUpdateRatios
from tb_wur_plugin.compat.snapshot import is_resource_variable
from tb_wur_plugin.tf_write.ratios import histogram_counts, update_ratios
from tb_wur_plugin.tf_write.variables import watched_variables


class WeightUpdateRatioHook(tf.compat.v1.train.SessionRunHook):
    """Log the weight-update ratios every `every_n_steps` global steps.

    Args:
      watched: a `WeightUpdateRatios` (what `watch` yields: its variables and, unless
        `histograms` is given, its histograms setting), a list of variables, or None for
        the graph's trainable variables when the session is created.
      logdir_or_writer: a `tf.compat.v1.summary.FileWriter`, or a logdir whose writer is
        taken from `tf.compat.v1.summary.FileWriterCache` (the one `MonitoredTrainingSession`'s
        own summaries use for that directory).
      every_n_steps: log global steps 0, N, 2N, ... (the step is the `global_step` before
        the update, as read on that step).
      histograms: also log the histograms of the elementwise ratios.

    With a global step (`tf.compat.v1.train.get_global_step()`), a logged step is written
    only if the user's run advanced it by exactly one (a run that did not train writes
    nothing, and the hook logs at the next run). Without one, the hook counts the runs of
    the session from 0 and takes each run for one step.
    """

    def __init__(
        self, watched: Any, logdir_or_writer: Any, every_n_steps: int = 100,
        histograms: bool | None = None,
    ):
        if not isinstance(every_n_steps, int) or isinstance(every_n_steps, bool) or every_n_steps < 1:
            raise ValueError(f"every_n_steps must be a positive integer, got {every_n_steps!r}")
        if histograms is None:
            histograms = bool(getattr(watched, "_histograms", False))
        self._source = watched
        self._logdir_or_writer = logdir_or_writer
        self._every = every_n_steps
        self._histograms = histograms
        self._built = False

    def begin(self) -> None:
        graph = tf.compat.v1.get_default_graph()
        if isinstance(self._source, WeightUpdateRatios):
            variables = [w.variable for w in self._source.watched]
        elif self._source is None:
            variables = tf.compat.v1.trainable_variables()
        else:
            variables = self._source
        self._watched = watched_variables(variables)
        if not self._watched:
            raise ValueError("WeightUpdateRatioHook: no trainable floating-point variable to watch")
        self._global_step = tf.compat.v1.train.get_global_step(graph)
        with graph.name_scope("weight_update_ratio_hook"):
            self._reads = [w.variable.read_value() for w in self._watched]
            self._before = [
                tf.compat.v1.placeholder(w.variable.dtype.base_dtype, w.variable.shape)
                for w in self._watched
            ]
            ratios = update_ratios(self._before, self._reads)
            counts = histogram_counts(self._before, self._reads) if self._histograms else None
            self._summary = graph_summary.ratio_summary(self._watched, ratios, counts)
        # reference variables are updated in place under their reads: copy what is fetched
        self._copy = [not is_resource_variable(w.variable) for w in self._watched]
        if isinstance(self._logdir_or_writer, (str, bytes)) or hasattr(self._logdir_or_writer, "__fspath__"):
            self._writer = tf.compat.v1.summary.FileWriterCache.get(str(self._logdir_or_writer))
        else:
            self._writer = self._logdir_or_writer
        self._built = True

    def after_create_session(self, session, coord) -> None:
        self._expected = int(session.run(self._global_step)) if self._global_step is not None else 0
        self._due = -(-self._expected // self._every) * self._every  # next multiple of N
        self._pending = None

    def before_run(self, run_context):
        self._pending = None
        if self._expected < self._due:
            return None
        fetches = list(self._reads)
        if self._global_step is not None:
            fetches.append(self._global_step)
        values = run_context.session.run(fetches)
        step = int(values.pop()) if self._global_step is not None else self._expected
        if step < self._due:  # runs that did not train: the step is not due yet
            self._expected = step
            return None
        self._pending = (step, [np.array(v) if copy else v for v, copy in zip(values, self._copy)])
        return None

    def after_run(self, run_context, run_values) -> None:
        if self._pending is None:
            self._expected += 1
            return
        step, before = self._pending
        self._pending = None
        fetches = [self._summary]
        if self._global_step is not None:
            fetches.append(self._global_step)
        results = run_context.session.run(fetches, feed_dict=dict(zip(self._before, before)))
        after_step = int(results[1]) if self._global_step is not None else step + 1
        self._expected = after_step
        if after_step != step + 1:  # this run did not make exactly one update
            return
        self._writer.add_summary(results[0], step)
        self._due = (step // self._every + 1) * self._every

    def end(self, session) -> None:
        if self._built:
            self._writer.flush()


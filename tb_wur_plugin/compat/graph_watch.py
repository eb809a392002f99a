"""`watch` of `tb_wur_plugin.compat.v1`: the block that builds the update a second time after a
snapshot, and the `WeightUpdateRatios` it yields (the contract is in `compat.v1`'s docstring)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import tensorflow as tf

from tb_wur_plugin.compat import graph_summary, replay
from tb_wur_plugin.compat.snapshot import snapshot
from tb_wur_plugin.tf_write.ratios import histogram_counts, update_ratios
from tb_wur_plugin.tf_write.variables import WatchedVariable, watched_variables

class WeightUpdateRatios:
    """What `watch` yields; its tensors exist once the `with` block has exited.

    - `train_op`: the block's update, made after a snapshot of the watched variables.
    - `ratios`: {tag: float64 scalar tensor}, ‖Δw‖₂ / ‖w‖₂ of that update per variable.
    - `summary`: a string tensor, the serialized `Summary` of the ratios (and the
      skipped-step marker, and with `histograms=True` the histograms), for
      `tf.compat.v1.summary.FileWriter.add_summary`.
    - `histograms`: {tag: int64[NUM_BUCKETS] tensor} with `histograms=True`, else None.
    - `watched`: the `WatchedVariable`s (tag, variable), in the order of the ratios.

    `ratios`, `summary` and `histograms` depend on `train_op`: fetching any of them runs the
    update. Fetch them with `train_op` and without the optimizer's own train op.
    """

    def __init__(self, histograms: bool):
        self._histograms = histograms
        self._built: dict[str, Any] | None = None

    def _get(self, name: str) -> Any:
        if self._built is None:
            raise RuntimeError(
                f"wur.{name} exists once the `with tb_wur_plugin.compat.v1.watch() as wur:` "
                "block has exited (it is built from the apply_gradients calls made in it)"
            )
        return self._built[name]

    train_op = property(lambda self: self._get("train_op"))
    ratios = property(lambda self: self._get("ratios"))
    summary = property(lambda self: self._get("summary"))
    histograms = property(lambda self: self._get("histograms"))
    watched = property(lambda self: self._get("watched"))

    def __repr__(self) -> str:
        state = "not built" if self._built is None else f"{len(self._built['watched'])} variables"
        return f"<WeightUpdateRatios {state}>"


@contextlib.contextmanager
def watch(var_list: Any = None, histograms: bool = False) -> Iterator[WeightUpdateRatios]:
    """Around a TF1 optimizer's `apply_gradients` in graph mode: yields a
    `WeightUpdateRatios` whose `train_op`, `ratios` and `summary` exist after the block.

    Args:
      var_list: the variables whose ratios are taken (trainable floating-point ones; tags
        their names without ':0'). Default: the trainable variables the block updates (those
        given a gradient in its `apply_gradients` calls), in the order of those calls.
      histograms: also take the histogram of each variable's elementwise ratios.

    Every `apply_gradients` call of a `tf.compat.v1.train.Optimizer` made in the block (in
    this thread, into the default graph) is built again after the snapshot; `wur.train_op`
    groups them when there are several. The optimizers must reuse their state when
    `apply_gradients` is called again, as those of `tf.compat.v1.train` do.

    Raises:
      RuntimeError: executing eagerly or inside a `tf.function` (use `wur_summary.watch`
        there), or under a `tf.distribute` strategy.
      ValueError: on exit, when the block called no `apply_gradients`, or nothing is left to
        watch.
    """
    if tf.executing_eagerly() or tf.inside_function():
        raise RuntimeError(
            "tb_wur_plugin.compat.v1.watch builds TF1 graph ops for Session.run and works only "
            "in graph mode (inside `with tf.Graph().as_default():` or after "
            "tf.compat.v1.disable_eager_execution()). Eagerly and in tf.function, use "
            "`from tb_wur_plugin import wur_summary` and `wur_summary.watch(variables, step=...)`."
        )
    if tf.distribute.has_strategy():
        raise RuntimeError(
            "tb_wur_plugin.compat.v1.watch does not support tf.distribute strategies; "
            "use wur_summary.watch in TF2 code"
        )
    graph = tf.compat.v1.get_default_graph()
    result = WeightUpdateRatios(histograms)
    with replay.captured_apply_gradients(graph) as calls:
        yield result
    if not calls:
        raise ValueError(
            "tb_wur_plugin.compat.v1.watch: no apply_gradients of a tf.compat.v1.train "
            "optimizer was called in the block; put the block around "
            "`optimizer.apply_gradients(...)` (or `optimizer.minimize(...)`)"
        )
    if var_list is None:
        var_list = [v for call in calls for v in call.updated_variables()]
    watched = watched_variables(var_list)
    if not watched:
        raise ValueError(
            "tb_wur_plugin.compat.v1.watch: no trainable floating-point variable to watch "
            f"among {[getattr(v, 'name', v) for v in var_list][:5]}"
        )
    with graph.as_default(), graph.name_scope("weight_update_ratios"):
        result._built = _build(calls, watched, histograms, graph)


def _build(
    calls: list[replay.CapturedCall], watched: list[WatchedVariable], histograms: bool,
    graph: tf.Graph,
) -> dict[str, Any]:
    """The snapshot, the update built again after it, and the ratios read after that."""
    with tf.name_scope("snapshot"):
        before = [snapshot(w.variable) for w in watched]
    with tf.control_dependencies(before), replay.unchanged_collections(graph):
        updates = [call.build_again() for call in calls]
    train_op = updates[0] if len(updates) == 1 else tf.group(*updates, name="train_op")
    with tf.control_dependencies([train_op]), tf.name_scope("after"):
        after = [w.variable.read_value() for w in watched]  # new reads, after the update
    ratios = update_ratios(before, after)
    counts = histogram_counts(before, after) if histograms else None
    summary = graph_summary.ratio_summary(watched, ratios, counts)
    per_tag = tf.unstack(ratios, num=len(watched))
    return {
        "train_op": train_op,
        "ratios": {w.tag: r for w, r in zip(watched, per_tag)},
        "summary": summary,
        "histograms": None if counts is None else {
            w.tag: row for w, row in zip(watched, tf.unstack(counts, num=len(watched)))
        },
        "watched": watched,
    }


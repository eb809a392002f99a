"""The TensorFlow write path: the ops and the `watch` block behind `wur_summary`, the Keras
callback's TensorFlow backend, `armijo` and `compat.v1`.

- `summary_ops`: `scalar`, `histogram`, `learning_rate` (the public ops, one layer per call).
- `watch`: the `watch` block and `record` (what the callback calls at a logged step).
- `variables`: which variables are watched, their tags, the snapshot before the update.
- `capture`: the changes an update made, read without a second copy where possible.
- `ratios`: ‖Δw‖ / ‖w‖ and the elementwise histograms of many variables, in TensorFlow.
- `bucketing`: the protocol's histogram buckets, in TensorFlow.
- `spectral`: spectral update ratios ‖ΔW‖₂ / ‖W‖₂ in TensorFlow, warm-started per variable.
- `batched_write`: one event for all the values of a step, written by a single op.
- `recording`: the default writer, recording state and metadata-once bookkeeping.
- `concrete_calls`: eager calls of a `tf.function` through the concrete function kept for
  the same arguments (the eager `record` and snapshot of a logged step).
- `tf_private`: every private TensorFlow API the package uses.

Every module imports TensorFlow; nothing on the read side imports this package.
"""

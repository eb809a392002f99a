"""Weight-update ratios for older TensorFlow APIs: `tb_wur_plugin.compat.v1` for TF1 graphs
(`tf.compat.v1`, `Session.run`, `MonitoredTrainingSession`).

- `v1`: the public face (`watch`, `WeightUpdateRatios`, `WeightUpdateRatioHook`).
- `graph_watch`: the `watch` block, which builds the update a second time after a snapshot.
- `hook`: `WeightUpdateRatioHook`, for `MonitoredTrainingSession`.
- `replay`: the optimizers' `apply_gradients` calls captured, to be built a second time.
- `snapshot`: a variable's value before an update made later in the same `Session.run`.
- `graph_summary`: a step's ratios as a serialized `Summary` built in the graph.
"""

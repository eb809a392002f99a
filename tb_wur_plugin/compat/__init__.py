"""Weight-update ratios for older TensorFlow APIs: `tb_wur_plugin.compat.v1` for TF1 graphs
(`tf.compat.v1`, `Session.run`, `MonitoredTrainingSession`)."""

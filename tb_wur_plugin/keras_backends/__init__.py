"""The backends of `tb_wur_plugin.keras.WeightUpdateRatioCallback`, one module per family of
Keras backends, each with the same `Logger` and `read_step`:

- `tensorflow_backend`: Keras on TensorFlow, through `tf_write` (inside the compiled step).
- `array_backends`: Keras on JAX and on PyTorch, through `arrays` and the TensorFlow-free
  `writer.SummaryWriter`; imports no TensorFlow module.
"""

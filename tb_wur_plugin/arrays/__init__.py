"""The array math the writers share: norms without overflow, ratios with the protocol's
conventions, and histogram bucketing on the protocol's edges.

- `numpy_math`: numpy (`writer.SummaryWriter`, the reference the others are tested against).
- `torch_math`: PyTorch tensors, on their device (`tb_wur_plugin.torch`, Keras on PyTorch).
- `jax_math`: JAX arrays, jitted (`tb_wur_plugin.jax`, Keras on JAX).
- `stacking`: which small arrays are reduced together (pure Python; TensorFlow, JAX and
  PyTorch).
- `spectral`: spectral update ratios ‖ΔW‖₂ / ‖W‖₂, the part every framework shares (the
  matrix view, the stopping rule, the small problems solved on the host, the warm-start
  vectors `SpectralState`; numpy), and one kernel per library on its device:
  `torch_spectral`, `jax_spectral` (TensorFlow's is `tf_write/spectral.py`).

Each module imports only its own framework; none imports TensorFlow.
"""

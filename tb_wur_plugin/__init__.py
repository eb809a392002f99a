"""tb-wur-plugin: per-layer weight-update ratios ‖Δw‖ / ‖w‖ in TensorBoard."""

__version__ = "0.1.0"

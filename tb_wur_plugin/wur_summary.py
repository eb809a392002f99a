"""The public summary API: `from tb_wur_plugin import wur_summary`.

- `scalar(name, data, step=None, description=None)`: one layer's ratio ‖Δw‖₂ / ‖w‖₂.
- `histogram(name, data, step=None, description=None)`: its elementwise ratios, bucketed.
- `learning_rate(data, step=None, description=None)`: the learning rate, shown beside them.
- `watch(variables, step=None, histograms=False, optimizer=None, spectral=False)`: a context
  manager around the optimizer step that computes and writes the ratios (and histograms) of
  `variables`, only when recording; with `optimizer=` (a Keras optimizer) it takes Δw from
  the optimizer's own update; with `spectral=True` it also writes the spectral update ratio
  ‖ΔW‖₂ / ‖W‖₂ of each variable of two or more dimensions.
"""

from tb_wur_plugin._optional import require

require("tensorflow", "tensorflow", __name__)  # one line naming .[tensorflow] when missing

from tb_wur_plugin.tf_write.summary_ops import histogram, learning_rate, scalar
from tb_wur_plugin.tf_write.watch import watch

__all__ = ["scalar", "histogram", "learning_rate", "watch"]

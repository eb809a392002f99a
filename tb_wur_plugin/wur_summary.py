"""The public summary API: `from tb_wur_plugin import wur_summary`.

- `scalar(name, data, step=None, description=None)`: one layer's ratio ‖Δw‖₂ / ‖w‖₂.
- `histogram(name, data, step=None, description=None)`: its elementwise ratios, bucketed.
- `learning_rate(data, step=None, description=None)`: the learning rate, shown beside them.
- `watch(variables, step=None, histograms=False)`: a context manager around the optimizer
  step that computes and writes all of the above for `variables`, only when recording.
"""

from tb_wur_plugin.ratios import watch
from tb_wur_plugin.summary import histogram, learning_rate, scalar

__all__ = ["scalar", "histogram", "learning_rate", "watch"]

"""The stochastic Armijo line search (Vaswani et al., NeurIPS 2019, "Painless Stochastic
Gradient"), as the reference implementation `sls.Sls` (line_search_fn="armijo") does it.

- `StochasticArmijo`: `minimize(loss_fn, variables, step=None)` makes one SGD step whose
  step size is searched on the current batch (custom loops, eager or in `tf.function`).
- `StepResult`: what a step did (step size, backtracks, losses, gradient norm).
- `LineSearchModel(model, search)`: a Keras model that trains `model` with the search in
  `fit` (TensorFlow backend).

See docs/armijo.md.
"""

from tb_wur_plugin._optional import require

require("tensorflow", "tensorflow", __name__)  # one line naming .[tensorflow] when missing

from tb_wur_plugin.armijo.model import LineSearchModel
from tb_wur_plugin.armijo.search import StepResult, StochasticArmijo

__all__ = ["StochasticArmijo", "StepResult", "LineSearchModel"]

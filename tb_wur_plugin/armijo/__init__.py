"""The stochastic Armijo line search (Vaswani et al., NeurIPS 2019, "Painless Stochastic
Gradient"), as the reference implementation `sls.Sls` (line_search_fn="armijo") does it, with
the non-monotone Polyak-initialised search of PoNoS (Galli et al., NeurIPS 2023) and the
momentum of SaLSA (Kenneweg et al., 2024) as options.

- `StochasticArmijo`: `minimize(loss_fn, variables, step=None)` makes one SGD step whose
  step size is searched on the current batch (custom loops, eager or in `tf.function`).
- `RECOMMENDED`: the keyword arguments of the variant the README recommends (PoNoS-style),
  `StochasticArmijo(**RECOMMENDED, n_batches_per_epoch=N)`.
- `StepResult`: what a step did (step size, backtracks, losses, gradient norm).
- `LineSearchModel(model, search)`: a Keras model that trains `model` with the search in
  `fit` (TensorFlow backend).

See docs/armijo.md.
"""

from tb_wur_plugin._optional import require

require("tensorflow", "tensorflow", __name__)  # one line naming .[tensorflow] when missing

from tb_wur_plugin.armijo.model import LineSearchModel
from tb_wur_plugin.armijo.search import StepResult, StochasticArmijo

# The variant the README recommends, on the evidence of benchmarks/RESULTS.md ("Line search
# variants"): PoNoS's non-monotone condition (xi = 1) and Polyak first trial with its memory,
# PoNoS's cutting factor and cap, a smaller Armijo constant and a larger Polyak scale than
# PoNoS's (0.5, 0.1), chosen on development seeds for fewer backtracks.
RECOMMENDED = {
    "reset": "polyak",
    "nonmonotone": 1.0,
    "c": 0.1,
    "beta": 0.5,
    "polyak_scale": 0.3,
    "max_step_size": 10.0,
}

__all__ = ["StochasticArmijo", "StepResult", "LineSearchModel", "RECOMMENDED"]

"""Weight-update ratios in TF1 graph mode (`tf.compat.v1`, `Session.run`).

```python
from tb_wur_plugin.compat import v1 as wur_v1

with wur_v1.watch() as wur:                    # around the optimizer's apply_gradients
    train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)

_, summary = sess.run([wur.train_op, wur.summary])   # a summary step: update + its ratios
file_writer.add_summary(summary, step)
sess.run(train_op)                                   # any other step: the plain update
```

The block builds the optimizer's update as usual (`train_op`, left exactly as the optimizer
built it) and, on exit, the same update a second time (`wur.train_op`), made after a
snapshot of the watched variables, with the ratios read after it. A step that runs
`train_op` runs no op of `watch`; a step that runs `wur.train_op` makes the same update
with the same optimizer state (slots, Adam's beta powers, `global_step`) and pays for the
snapshot and the ratios. Run one of the two per step, never both.
"""

from tb_wur_plugin._optional import require

require("tensorflow", "tensorflow", __name__)  # one line naming .[tensorflow] when missing

from tb_wur_plugin.compat.graph_watch import WeightUpdateRatios, watch
from tb_wur_plugin.compat.hook import WeightUpdateRatioHook

__all__ = ["watch", "WeightUpdateRatios", "WeightUpdateRatioHook"]

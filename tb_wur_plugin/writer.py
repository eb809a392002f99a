"""A summary writer for the wur plugin that needs no TensorFlow: it builds the plugin's
summaries from plain numbers and numpy arrays and appends them to an event file, for
training in PyTorch, JAX or anything else.

What it writes reads exactly as what `wur_summary.watch` writes: a step's ratios and its
skipped-step marker as one packed float32 tensor per chunk of layers, its histograms as one
packed tensor of varint counts per chunk (`metadata`'s packed kinds; each tag's metadata in
the first event of it in the file only), the learning rate as a float32 scalar.

    with SummaryWriter("logs/run1") as writer:
        writer.add_ratios({"fc1/weight": 1.2e-3, "fc1/bias": 3e-4}, step=100)
        writer.add_histograms({"fc1/weight": elementwise_ratios}, step=100)
        writer.add_learning_rate(1e-3, step=100)

- `SummaryWriter`: the writer (`add_ratios`, `add_histograms`, `add_learning_rate`,
  `flush`, `close`; a context manager).
- `Counts`: histogram counts already bucketed, to pass to `add_histograms` in place of raw
  ratios.
- `to_stored_scalar`: a value as the float32 the protocol stores.
- `TrainingJudgement`: the judgement while training that every `SummaryWriter` applies to
  what it writes (`writer.judgement`), to make for a process that writes nothing (e.g. the
  processes other than 0 of a multi-process JAX run: `log_update_ratios(None, ...,
  judgement=TrainingJudgement(stop_on={"nan"}))`), so that it fires the same flags.

The implementation is the TensorFlow-free write path, `tb_wur_plugin.event_write`.
"""

from tb_wur_plugin.event_write.summary_writer import Counts, SummaryWriter, to_stored_scalar
from tb_wur_plugin.event_write.training_judgement import TrainingJudgement

__all__ = ["SummaryWriter", "Counts", "to_stored_scalar", "TrainingJudgement"]

"""The TensorFlow-free write path: what PyTorch `watch`, JAX `log_update_ratios`, the Keras
callback on JAX and PyTorch, and `tb_wur_plugin.writer` write through. Imports no
TensorFlow module.

- `summary_writer`: `SummaryWriter` (public as `tb_wur_plugin.writer.SummaryWriter`),
  `Counts`, `to_stored_scalar`.
- `logged_step`: `LoggedStep` (a logged step: layers, ratios, spectral ratios, histogram
  counts, learning rate, skipped) and `LoggedStepWriter`, the one entry through which every
  logged step of those faces is written.
- `training_judgement`: `TrainingJudgement`, the judgement acting while training (each
  logged step judged as written: flags logged, `on_flag`, `should_stop`), `check_stop_on`,
  `judgement_settings` (its arguments checked, for a face to pass on), `changed_settings`.
- `watch_arguments`: `watch_arguments` (`every`, `histograms`, `spectral`, checked alike
  for every face), `positive_int`, `flag`.
- `writer_targets`: a path, a `SummaryWriter` or a `torch.utils.tensorboard` writer as the
  place to write (`check_target`, `run_dir_of`, `open_target`).
- `run_claims`: one active writer (PyTorch `watch` handle, Keras callback) per run
  directory and process.
- `event_file`: the bytes of event files assembled by hand (TFRecord checksums,
  `Summary.value` framing); TensorFlow's batched writes use them too.
"""

from tb_wur_plugin.event_write import event_file, run_claims
from tb_wur_plugin.event_write.logged_step import Layer, LoggedLayer, LoggedStep, LoggedStepWriter
from tb_wur_plugin.event_write.summary_writer import Counts, SummaryWriter, to_stored_scalar
from tb_wur_plugin.event_write.training_judgement import (
    TrainingJudgement,
    changed_settings,
    check_stop_on,
    judgement_settings,
)
from tb_wur_plugin.event_write.watch_arguments import (
    WatchArguments,
    flag,
    positive_int,
    watch_arguments,
)
from tb_wur_plugin.event_write.writer_targets import check_target, open_target, run_dir_of

__all__ = [
    "SummaryWriter", "Counts", "to_stored_scalar",
    "TrainingJudgement", "check_stop_on", "judgement_settings", "changed_settings",
    "Layer", "LoggedLayer", "LoggedStep", "LoggedStepWriter",
    "WatchArguments", "watch_arguments", "positive_int", "flag",
    "check_target", "run_dir_of", "open_target",
    "event_file", "run_claims",
]

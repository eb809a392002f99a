"""The bytes of TensorBoard event files that the writers assemble themselves (`event_file`:
TFRecord checksums and `Summary.value` framing), and who writes a run's event files
(`run_claims`: one active PyTorch `watch` handle or Keras callback per run directory and
process). Imports no TensorFlow module."""

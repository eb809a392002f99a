"""The bytes of TensorBoard event files that the writers assemble themselves (`event_file`:
TFRecord checksums and `Summary.value` framing). Imports no TensorFlow module."""

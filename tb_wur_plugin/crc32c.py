"""The masked CRC-32C of TFRecord framing (what event files use), without TensorFlow.

The checksum itself is `google_crc32c`'s (Google's C library). TensorBoard's own
implementation without TensorFlow
(`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`) is a Python loop over
the bytes, too slow for an event of a few hundred ratios written at every logged step.
"""

from __future__ import annotations

import google_crc32c

_MASK = 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of `data`."""
    return google_crc32c.value(data)


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C that TFRecord framing stores after a record's length and data."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & _MASK

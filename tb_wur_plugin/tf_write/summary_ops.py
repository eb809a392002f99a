"""The public summary ops of the wur plugin, in the style of `tf.summary`: one function per
kind of series.

Each op writes to the default summary writer at `step` (default:
`tf.summary.experimental.get_step()`), honours `tf.summary.record_if`, works eagerly and
inside `tf.function`, and computes nothing when summaries are not being recorded. Eagerly it
returns a Python bool (True when written); inside a `tf.function`, a boolean tensor. A tag's
metadata goes into its writer's event file once, with the tag's first value
(`recording.MetadataOnce`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.metadata import check_layer_tag
from tb_wur_plugin.tf_write.batched_write import to_stored_scalar, write_histograms, write_scalars
from tb_wur_plugin.tf_write.bucketing import bucket_counts
from tb_wur_plugin.tf_write.recording import write


def scalar(
    name: str, data: Any, step: Any = None, description: str | None = None
) -> bool | tf.Tensor:
    """Write one layer's weight-update ratio ‖Δw‖₂ / ‖w‖₂ under tag `name`.

    The tag is `name` exactly (name scopes are not prepended), so that it equals the
    variable path of the layer. The ratio is stored as float32; a positive ratio below
    float32's range as its smallest positive value, not as 0.

    Args:
      name: the layer's tag, normally its variable path (e.g. "dense/kernel").
      data: the ratio, a float scalar (Python number or tensor).
      step: the step to write it at; default `tf.summary.experimental.get_step()`.
      description: a description shown with the series, or None.

    Returns:
      True if written, False if not (no default writer, or not recording); inside a
      `tf.function`, a boolean tensor.

    Raises:
      TypeError: `name` is not a str, or `data` is not a float scalar.
      ValueError: `name` is empty or in the plugin's reserved namespace, or `data` is not a
        scalar.
      RuntimeError: the default writer is closed.

    Example:
      >>> with tf.summary.create_file_writer("logs/run1").as_default():
      ...     wur_summary.scalar("dense/kernel", 1.3e-3, step=100)
      True
    """
    check_layer_tag(name, "name", article="")
    value = _float_tensor(data, "wur_summary.scalar", scalar_only=True)
    return write(
        name,
        lambda: to_stored_scalar(value),
        step,
        _scalar_writer(name, metadata.create_summary_metadata(metadata.KIND_RATIO, description)),
    )


def histogram(
    name: str, data: Any, step: Any = None, description: str | None = None
) -> bool | tf.Tensor:
    """Write the distribution of one layer's elementwise ratios |Δw_i| / |w_i|.

    `data` is bucketed on the protocol's fixed log10 edges, the same for every layer and
    step (`bucketing.bucket_counts`), and the counts are written under
    `metadata.histogram_tag(name)`.

    Args:
      name: the layer's tag, as for `scalar`.
      data: the raw elementwise ratios, a float tensor of any shape (at most 2^30 values).
      step, description: as for `scalar`.

    Returns:
      As `scalar`.

    Raises:
      TypeError: `name` is not a str, or `data` is not floating-point.
      ValueError: `name` is empty or reserved, or `data` holds more than 2^30 values.
      RuntimeError: the default writer is closed.

    Example:
      >>> ratios = tf.abs(delta / weights)
      >>> with tf.summary.create_file_writer("logs/run1").as_default():
      ...     wur_summary.histogram("dense/kernel", ratios, step=100)
      True
    """
    check_layer_tag(name, "name", article="")
    values = _float_tensor(data, "wur_summary.histogram", scalar_only=False)
    tag = metadata.histogram_tag(name)
    summary_metadata = metadata.create_summary_metadata(metadata.KIND_HISTOGRAM, description)

    def write_fn(counts, step, writer, include_metadata):
        return write_histograms(
            [tag], counts[tf.newaxis], step, [summary_metadata], writer, include_metadata
        )

    return write(tag, lambda: bucket_counts(values), step, write_fn)


def learning_rate(data: Any, step: Any = None, description: str | None = None) -> bool | tf.Tensor:
    """Write the optimizer's learning rate, shown beside the ratios.

    Args:
      data: the learning rate, a float scalar.
      step, description: as for `scalar`.

    Returns:
      As `scalar`.

    Raises:
      TypeError, ValueError: `data` is not a float scalar.
      RuntimeError: the default writer is closed.
    """
    value = _float_tensor(data, "wur_summary.learning_rate", scalar_only=True)
    return write(
        metadata.LEARNING_RATE_TAG,
        lambda: to_stored_scalar(value),
        step,
        _scalar_writer(
            metadata.LEARNING_RATE_TAG,
            metadata.create_summary_metadata(metadata.KIND_LEARNING_RATE, description),
        ),
    )


def _scalar_writer(tag: str, summary_metadata: Any):
    """The `recording.write` writer of one float32 scalar under `tag` (`write_scalars`)."""

    def write_fn(value, step, writer, include_metadata):
        return write_scalars(
            [tag], tf.reshape(value, [1]), step, [summary_metadata], writer, include_metadata
        )

    return write_fn


def _float_tensor(data: Any, op: str, *, scalar_only: bool) -> tf.Tensor:
    """`data` as a floating-point tensor, or a TypeError/ValueError naming the problem."""
    if isinstance(data, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{op}: data must be a float, got {type(data).__name__}: {data!r}")
    if isinstance(data, (int, float, np.integer)):
        tensor = tf.constant(float(data), dtype=tf.float64)
    else:
        try:
            tensor = tf.convert_to_tensor(data)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{op}: data must be a float tensor: {e}") from None
        if not tensor.dtype.is_floating:
            raise TypeError(f"{op}: data must be floating-point, got dtype {tensor.dtype.name}")
    if scalar_only:
        rank = tensor.shape.rank
        if rank is not None and rank != 0:
            raise ValueError(f"{op}: data must be a scalar, got shape {tensor.shape}")
        if rank is None:
            tensor = tf.reshape(tensor, [])
    return tensor

"""Weight-update ratios, the math: for one variable with values w before and w' after a
step, Δw = w' − w and

    ratio = ‖Δw‖₂ / ‖w‖₂        (+inf if ‖w‖ = 0 < ‖Δw‖, 0 if both are 0, NaN if not finite)

computed from sums of squares (see `update_ratios`). The elementwise ratios |Δw_i| / |w_i|
follow the same conventions (0 where Δw_i = 0, +inf where w_i = 0 < |Δw_i|).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata
from tb_wur_plugin.arrays.stacking import stacks_by_shape
from tb_wur_plugin.tf_write.bucketing import bucket_counts, bucket_counts_by_row


def update_ratios(
    before: Sequence[tf.Tensor],
    after: Sequence[tf.Tensor | tf.Variable],
    changes: Sequence[tf.Tensor | None] | None = None,
) -> tf.Tensor:
    """The weight-update ratio of each pair of tensors.

    Each ratio is exp((log Σ(Δw)² − log Σw²) / 2), from sums of squares that neither
    overflow nor underflow: Δw is taken in the values' precision (at least float32), the
    sums in float64, and a sum that may have overflowed or underflowed is taken again
    scaled (log Σx² = 2 log m + log Σ(x/m)², m = max|x|). Tensors of up to
    STACKED_MAX_ELEMENTS elements that share a shape and dtype are stacked and reduced
    together, at most STACK_ELEMENTS elements to a stack (see `partition`); larger ones one
    after the other, so that one Δw is held at a time (an `after` that is a variable is read
    only then).

    Args:
      before: the values before the update.
      after: the values after it, tensors or variables (read here), one per `before`.
      changes: optional, one per `before`: Δw itself (or −Δw) where given, and then
        `after[i]` is not read; None where Δw is to be taken as after − before.

    Returns:
      float64[n]: ‖after_i − before_i‖₂ / ‖before_i‖₂, with the conventions above.
    """
    if not before:
        return tf.zeros([0], tf.float64)
    changes = list(changes or [None] * len(before))
    stacks, large = partition(before)
    weights, updates = [], []  # log sums per stack, then per large variable
    for stack in stacks:
        old, delta = _stacked_pair(before, after, changes, stack)
        weights.append(_stacked_log_sums(old))
        updates.append(_stacked_log_sums(delta))
    previous: list[tf.Tensor] = []
    for i in large:
        if changes[i] is None:  # one Δw at a time, each read after the previous one's sum

            def delta(i=i):
                old = tf.cast(before[i], _work_dtype(before[i]))
                return tf.cast(_read(after[i]), old.dtype) - old

            with tf.control_dependencies(previous):
                updates.append(_checked_log_sum_of_squares(delta))
            previous = [updates[-1]]
        else:  # the optimizer's Δw: summed as soon as it is computed
            updates.append(_checked_log_sum_of_squares(lambda i=i: changes[i]))
        weights.append(_checked_log_sum_of_squares(lambda i=i: before[i]))
    inverse = np.argsort([i for stack in stacks for i in stack] + large)
    weights = tf.gather(tf.concat(weights, 0), inverse)
    updates = tf.gather(tf.concat(updates, 0), inverse)
    # log 0 = -inf: nothing moved gives 0, zero weights that moved +inf
    ratio = tf.where(
        tf.math.equal(updates, -np.inf), tf.zeros_like(updates), tf.exp((updates - weights) / 2)
    )
    finite = ~tf.math.is_nan(weights + updates) & (weights < np.inf) & (updates < np.inf)
    return tf.where(finite, ratio, tf.fill(tf.shape(ratio), tf.constant(float("nan"), tf.float64)))


STACKED_MAX_ELEMENTS = 1 << 16
STACK_ELEMENTS = 1 << 15
CHUNK_ELEMENTS = 1 << 20

# Below this a float32 sum of squares may have lost precision to underflow.
_SMALLEST_SAFE_SUM = 1e-30


def _size(tensor: tf.Tensor) -> float:
    size = tensor.shape.num_elements()
    return float("inf") if size is None else size


def _work_dtype(tensor: tf.Tensor) -> tf.DType:
    return tf.float64 if tensor.dtype == tf.float64 else tf.float32


def _read(value: tf.Tensor | tf.Variable) -> tf.Tensor:
    return value.value() if isinstance(value, tf.Variable) else value


def partition(tensors: Sequence[tf.Tensor]) -> tuple[list[list[int]], list[int]]:
    """The indices of the tensors of up to STACKED_MAX_ELEMENTS elements, grouped by shape
    and dtype into stacks of at most STACK_ELEMENTS elements (one tensor where it alone
    holds more), in their order: the stacks `update_ratios` reduces together; and the
    indices of the larger tensors.

    A stack's reduction waits for all its members: small stacks of the last layers' changes
    are summed while the first layers' updates still run, and a stack's temporaries (its
    float32 values and float64 squares, 20 bytes an element: 640 KB) fit a core's
    second-level cache of 1 MB.
    """
    return stacks_by_shape([(tuple(t.shape.as_list()), t.dtype) for t in tensors],
                           [_size(t) for t in tensors], STACKED_MAX_ELEMENTS, STACK_ELEMENTS)


def _log_sum_of_squares(x: tf.Tensor, axes: list[int] | None, scaled: bool) -> tf.Tensor:
    """log Σx² over `axes` (None: all of x, see `_sum_of_squares`), in float64 (-inf if
    x = 0, NaN or +inf if x is not finite); if `scaled`, as 2 log m + log Σ(x/m)² with
    m = max|x|."""
    if scaled:
        top = tf.reduce_max(tf.abs(x), axes, keepdims=True)
        x = x / tf.where(top > 0, top, tf.ones_like(top))
    if axes is None:
        total = _sum_of_squares(x)
    else:
        total = tf.cast(tf.reduce_sum(tf.square(x), axes), tf.float64)
    if not scaled:
        return tf.math.log(total)
    top = tf.cast(tf.reshape(top, tf.shape(total)), tf.float64)
    return 2 * tf.math.log(top) + tf.math.log(total)


ROW_ELEMENTS = 512


def _sum_of_squares(x: tf.Tensor) -> tf.Tensor:
    """Σx² of all of x, in float64: the norms of rows of ROW_ELEMENTS elements in x's
    precision, by one fused op (no temporary of x's size), then their squares summed in
    float64; the elements beyond the last whole row in float64."""
    flat = tf.reshape(x, [-1])
    whole = tf.size(flat) // ROW_ELEMENTS * ROW_ELEMENTS
    rows = tf.reshape(flat[:whole], [-1, ROW_ELEMENTS])  # a prefix: no copy
    norms = tf.cast(tf.math.reduce_euclidean_norm(rows, -1), tf.float64)
    rest = tf.cast(flat[whole:], tf.float64)
    return tf.reduce_sum(tf.square(norms)) + tf.reduce_sum(tf.square(rest))


def _stacked_pair(before, after, changes, indices: list[int]) -> tuple[tf.Tensor, tf.Tensor]:
    """The weights before and their changes Δw (± where captured) of the variables at
    `indices`, each stacked, in the work dtype."""
    old = _cast_to_work_dtype(tf.stack([before[i] for i in indices]))
    if all(changes[i] is None for i in indices):
        return old, tf.cast(tf.stack([_read(after[i]) for i in indices]), old.dtype) - old
    return old, tf.cast(tf.stack([
        _read(after[i]) - before[i] if changes[i] is None else changes[i] for i in indices
    ]), old.dtype)


def _stacked_log_sums(stacked: tf.Tensor) -> tf.Tensor:
    """float64[rows]: log Σx² of each row of `stacked` (one variable each), summed in float64
    unless the variables are float64 (then checked as `_checked_log_sum_of_squares`)."""
    if stacked.dtype == tf.float64:
        return _checked_log_sum_of_squares(lambda: stacked, _rows(stacked))
    return _log_sum_of_squares(tf.cast(stacked, tf.float64), _rows(stacked), scaled=False)


def _checked_log_sum_of_squares(
    make_x: Callable[[], tf.Tensor], axes: list[int] | None = None
) -> tf.Tensor:
    """float64[rows]: log Σx² over `axes` (None: all, one row) of x = make_x(), in x's
    precision (at least float32); if one plain sum may have overflowed or underflowed, all
    taken again scaled from a new make_x(). Where make_x computes x anew (Δw from a read
    after the update), the conditional holds no input as large as x; where it returns a
    tensor that exists anyway (a snapshot, a captured Δw), that tensor is held until the
    conditional runs."""
    x = make_x()
    plain = _log_sum_of_squares(tf.cast(x, _work_dtype(x)), axes, scaled=False)
    suspect = tf.reduce_any(~tf.math.is_finite(plain) | (plain <= np.log(_SMALLEST_SAFE_SUM)))

    def scaled():
        again = make_x()
        return _log_sum_of_squares(tf.cast(again, _work_dtype(again)), axes, scaled=True)

    return tf.reshape(tf.cond(suspect, scaled, lambda: plain), [-1])


def _rows(stacked: tf.Tensor) -> list[int]:
    """The axes of one stacked variable's elements."""
    return list(range(1, stacked.shape.rank))


def histogram_counts(
    before: Sequence[tf.Tensor],
    after: Sequence[tf.Tensor | tf.Variable],
    changes: Sequence[tf.Tensor | None] | None = None,
) -> tf.Tensor:
    """The histogram counts of each pair's elementwise ratios.

    Small tensors are stacked by shape and dtype, one bucketing per stack; large ones are
    bucketed one after the other, CHUNK_ELEMENTS elements at a time, so that the
    temporaries stay that small.

    Args:
      before, after, changes: as for `update_ratios`.

    Returns:
      int64[n, NUM_BUCKETS]: `bucketing.bucket_counts` of each pair's `elementwise_ratios`.
    """
    changes = list(changes or [None] * len(before))
    stacks, large = partition(before)
    counts, previous = [], []
    for indices in stacks:
        old, delta = _stacked_pair(before, after, changes, indices)
        counts.append(bucket_counts_by_row(_ratios_of_changes(old, delta)))
    for i in large:
        with tf.control_dependencies(previous):
            one = _chunked_bucket_counts(before[i], after[i], changes[i])
        counts.append(one[tf.newaxis])
        previous = [one]
    inverse = np.argsort([i for indices in stacks for i in indices] + large)
    return tf.gather(tf.concat(counts, 0), inverse)


def _chunked_bucket_counts(
    before: tf.Tensor, after: tf.Tensor | tf.Variable, change: tf.Tensor | None
) -> tf.Tensor:
    """`bucket_counts` of the elementwise ratios of one large variable, a chunk of the
    flattened elements after the other."""
    old = tf.reshape(before, [-1])
    moved = tf.reshape(_read(after) if change is None else change, [-1])
    size = tf.size(old)

    def add_chunk(start, counts):
        end = tf.minimum(start + CHUNK_ELEMENTS, size)
        if change is None:
            chunk = elementwise_ratios(old[start:end], moved[start:end])
        else:
            chunk = _ratios_of_changes(
                _cast_to_work_dtype(old[start:end]), _cast_to_work_dtype(moved[start:end])
            )
        return end, counts + bucket_counts(chunk)

    _, counts = tf.while_loop(
        lambda start, _: start < size,
        add_chunk,
        (tf.constant(0), tf.zeros([metadata.NUM_BUCKETS], tf.int64)),
    )
    return counts


def elementwise_ratios(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """|after − before| / |before| elementwise, in the values' precision (at least float32):
    0 where nothing moved, +inf where before = 0 < |after − before|."""
    old = _cast_to_work_dtype(before)
    return _ratios_of_changes(old, _cast_to_work_dtype(after) - old)


def _ratios_of_changes(old: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """|delta| / |old| elementwise, 0 where delta = 0 (`xdivy`, then `abs`)."""
    return tf.abs(tf.math.xdivy(delta, old))


def _cast_to_work_dtype(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, _work_dtype(x))

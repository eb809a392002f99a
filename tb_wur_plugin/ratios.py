"""Weight-update ratios and `watch`, which logs them around an optimizer step.

For one variable with values w before and w' after a step, Δw = w' − w and

    ratio = ‖Δw‖₂ / ‖w‖₂        (+inf if ‖w‖ = 0 < ‖Δw‖, 0 if both are 0, NaN if not finite)

computed from sums of squares (see `update_ratios`). The elementwise ratios |Δw_i| / |w_i|
follow the same conventions (0 where Δw_i = 0, +inf where w_i = 0 < |Δw_i|).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from tb_wur_plugin import metadata, summary


class WatchedVariable(NamedTuple):
    tag: str
    variable: tf.Variable


def update_ratios(
    before: Sequence[tf.Tensor],
    after: Sequence[tf.Tensor | tf.Variable],
    changes: Sequence[tf.Tensor | None] | None = None,
) -> tf.Tensor:
    """float64[n]: ‖after_i − before_i‖₂ / ‖before_i‖₂ for each pair, with the conventions above;
    where `changes[i]` is given, it is Δw itself (or −Δw) and `after[i]` is not read.

    The ratio is exp((log Σ(Δw)² − log Σw²) / 2), from sums of squares that neither
    overflow nor underflow. Variables of up to STACKED_MAX_ELEMENTS elements that share a
    shape and dtype are stacked and reduced together, one reduction per shape, in float64
    (exact squares of 32-bit or narrower values, far from float64's limits). Larger ones
    are reduced one after the other, so that one update Δw is held at a time (an `after`
    that is a variable is read only then), each as `_sum_of_squares` in its own precision
    (at least float32): relative error at most 7e-8 measured, 65,537 to 5e7 elements,
    constant and random values. Where such a sum may have overflowed or underflowed it is
    taken again scaled: log Σx² = 2 log m + log Σ(x/m)² with m = max|x|. No conditional
    spans all variables: each such sum has its own.
    """
    if not before:
        return tf.zeros([0], tf.float64)
    changes = list(changes or [None] * len(before))
    stacks, large = _partition(before)
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
        updates == -np.inf, tf.zeros_like(updates), tf.exp((updates - weights) / 2)
    )
    finite = ~tf.math.is_nan(weights + updates) & (weights < np.inf) & (updates < np.inf)
    return tf.where(finite, ratio, tf.fill(tf.shape(ratio), tf.constant(float("nan"), tf.float64)))


STACKED_MAX_ELEMENTS = 1 << 16
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


def _partition(tensors: Sequence[tf.Tensor]) -> tuple[list[list[int]], list[int]]:
    """Indices of the tensors of up to STACKED_MAX_ELEMENTS elements, grouped by shape and
    dtype, and indices of the larger ones."""
    stacks: dict[tuple, list[int]] = {}
    large = []
    for index, tensor in enumerate(tensors):
        if _size(tensor) <= STACKED_MAX_ELEMENTS:
            stacks.setdefault((tuple(tensor.shape.as_list()), tensor.dtype), []).append(index)
        else:
            large.append(index)
    return list(stacks.values()), large


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
    """int64[n, NUM_BUCKETS]: `bucket_counts` of each pair's `elementwise_ratios` (from
    `changes[i]`, ±Δw, where given); small variables stacked by shape and dtype, one
    bucketing per stack; large ones one after the other, CHUNK_ELEMENTS elements at a time,
    so that the temporaries stay that small."""
    changes = list(changes or [None] * len(before))
    stacks, large = _partition(before)
    counts, previous = [], []
    for indices in stacks:
        old, delta = _stacked_pair(before, after, changes, indices)
        counts.append(summary.bucket_counts_by_row(_ratios_of_changes(old, delta)))
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
        return end, counts + summary.bucket_counts(chunk)

    _, counts = tf.while_loop(
        lambda start, _: start < size,
        add_chunk,
        (tf.constant(0), tf.zeros([metadata.NUM_BUCKETS], tf.int64)),
    )
    return counts


def elementwise_ratios(before: tf.Tensor, after: tf.Tensor) -> tf.Tensor:
    """|after − before| / |before| elementwise, 0 where nothing moved (at least float32)."""
    old = _cast_to_work_dtype(before)
    return _ratios_of_changes(old, _cast_to_work_dtype(after) - old)


def _ratios_of_changes(old: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """|delta| / |old| elementwise, 0 where delta = 0 (`xdivy`, then `abs`)."""
    return tf.abs(tf.math.xdivy(delta, old))


def _cast_to_work_dtype(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, _work_dtype(x))


def watched_variables(variables: Any) -> list[WatchedVariable]:
    """The trainable floating-point variables among `variables`, each with a unique tag.

    The tag is the Keras variable path, else the TensorFlow name without ':0'. A path
    taken by an earlier variable gets the first suffix '_1', '_2', ... that is no variable's
    path. Integer and non-trainable variables are skipped; anything that is not a variable
    raises TypeError, a path in the plugin's reserved namespace ValueError.
    """
    if isinstance(variables, (tf.Variable, str, bytes)) or hasattr(variables, "path"):
        variables = [variables]
    try:
        candidates = list(variables)
    except TypeError:
        raise TypeError(
            f"variables must be a variable or an iterable of variables, got "
            f"{type(variables).__name__}"
        ) from None
    kept: list[tuple[str, tf.Variable]] = []
    seen: set[int] = set()
    for candidate in candidates:
        variable = _tf_variable(candidate)
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        if not getattr(candidate, "trainable", True) or not variable.dtype.is_floating:
            continue
        kept.append((_variable_path(candidate), variable))
    paths = {path for path, _ in kept}
    taken: set[str] = set()
    watched = []
    for path, variable in kept:
        if metadata.is_reserved_tag(path):
            raise ValueError(
                f"variable path {path!r} starts with {metadata.RESERVED_TAG_PREFIX!r}, which "
                "is reserved for the plugin's own series; rename the layer or variable"
            )
        tag, suffix = path, 0
        while tag in taken or (suffix and tag in paths):  # keep other variables' paths free
            suffix += 1
            tag = f"{path}_{suffix}"
        taken.add(tag)
        watched.append(WatchedVariable(tag, variable))
    return watched


def writes_summaries(watched: Sequence[WatchedVariable] = (), strategy: Any = None) -> bool:
    """Whether this process logs the ratios of `watched`: False on the workers of a
    multi-worker strategy other than the chief (`MultiWorkerMirroredStrategy` worker 0),
    whose synchronous updates are the chief's, so that each step is logged once.

    Asks `extended.should_save_summary` of `strategy`, of the strategy of each distributed
    variable in `watched` and of the current strategy. Under a `ParameterServerStrategy`,
    where workers update the variables asynchronously so that no update can be observed
    alone, it raises NotImplementedError.
    """
    strategies = [tf.distribute.get_strategy(), strategy] + [
        w.variable.distribute_strategy
        for w in watched
        if isinstance(w.variable, tf.distribute.DistributedValues)
    ]
    writes = True
    for candidate in {id(s): s for s in strategies if s is not None}.values():
        if isinstance(candidate, _ASYNCHRONOUS_STRATEGIES):
            raise NotImplementedError(
                f"weight-update ratios cannot be logged under {type(candidate).__name__}: its "
                "workers update the variables asynchronously, so the change made by one "
                "update cannot be observed. Use MirroredStrategy or "
                "MultiWorkerMirroredStrategy (synchronous updates)."
            )
        try:
            writes = writes and bool(candidate.extended.should_save_summary)
        except (AttributeError, NotImplementedError):
            pass
    return writes


_ASYNCHRONOUS_STRATEGIES = (
    tf.distribute.experimental.ParameterServerStrategy,
    tf.compat.v1.distribute.experimental.ParameterServerStrategy,
)


def snapshot(watched: Sequence[WatchedVariable]) -> list[tf.Tensor]:
    """The current values of the watched variables (copied only when later overwritten)."""
    return [w.variable.value() for w in watched]


_ASSIGNS = {"assign": None, "assign_add": 1, "assign_sub": -1}  # method: sign of Δw
_SPARSE_UPDATES = (
    "scatter_add", "scatter_sub", "scatter_update", "scatter_max", "scatter_min",
    "scatter_mul", "scatter_div", "scatter_nd_add", "scatter_nd_sub", "scatter_nd_update",
    "scatter_nd_max", "scatter_nd_min", "batch_scatter_update",
)


@contextlib.contextmanager
def captured_changes(variables: Sequence[tf.Variable]) -> Iterator[list[tf.Tensor | None]]:
    """Record the changes made to `variables` in the block by their `assign`, `assign_add`
    and `assign_sub` methods, through which Keras optimizers make every update (weight
    decay and constraints included).

    On exit the yielded list holds, per variable, ±Δw as those calls computed it (for
    `assign`, the new value minus the value read just before), their sum if there were
    several; None where Δw cannot be known so: no such call, a sparse update (`scatter_*`,
    `tf.IndexedSlices`), or a value computed in another graph than the block's (in a
    conditional's branch, as `LossScaleOptimizer` applies its updates, or in another
    `tf.function`). Updates made by other means (raw ops on the variable's handle) are
    not seen: use it only around updates made through those methods.
    """
    parts: list[list[tuple[int, tf.Tensor]] | None] = [[] for _ in variables]
    saved = []

    def assign_recorder(index, variable, original, sign):
        def assign(value, *args, **kwargs):
            if parts[index] is not None:
                if isinstance(value, tf.IndexedSlices):
                    parts[index] = None
                else:
                    value = tf.convert_to_tensor(value, dtype=variable.dtype)
                    if sign is None:  # read before the assignment, in program order
                        parts[index].append((1, value - variable.value()))
                    else:
                        parts[index].append((sign, value))
            return original(value, *args, **kwargs)
        return assign

    def sparse_recorder(index, original):
        def update(*args, **kwargs):
            parts[index] = None
            return original(*args, **kwargs)
        return update

    try:
        for index, variable in enumerate(variables):
            for method in (*_ASSIGNS, *_SPARSE_UPDATES):
                original = getattr(variable, method, None)
                if original is None:
                    continue
                saved.append((variable, method, variable.__dict__.get(method, _MISSING)))
                if method in _ASSIGNS:
                    wrapper = assign_recorder(index, variable, original, _ASSIGNS[method])
                else:
                    wrapper = sparse_recorder(index, original)
                setattr(variable, method, wrapper)
        changes: list[tf.Tensor | None] = [None] * len(variables)
        yield changes
    finally:
        for variable, method, previous in reversed(saved):
            if previous is _MISSING:
                delattr(variable, method)
            else:
                setattr(variable, method, previous)
    for index, made in enumerate(parts):
        if not made or not all(_in_this_graph(change) for _, change in made):
            continue
        changes[index] = made[0][1] if len(made) == 1 else tf.add_n(
            [change if sign > 0 else -change for sign, change in made]
        )


_MISSING = object()


def _in_this_graph(tensor: tf.Tensor) -> bool:
    if tf.executing_eagerly():
        return not tf.is_symbolic_tensor(tensor)
    return getattr(tensor, "graph", None) is tf.compat.v1.get_default_graph()


def _captures_changes(optimizer: Any, watched: Sequence[WatchedVariable]) -> bool:
    """Whether `watch` takes Δw from `optimizer`'s updates (`captured_changes`): a Keras
    optimizer, outside `tf.distribute` (whose updates go to each replica's copy)."""
    if optimizer is None:
        return False
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"wur_summary.watch: optimizer must be a keras.optimizers.Optimizer, whose updates "
            f"go through the variables' assign methods; got {type(optimizer).__name__}. "
            "Leave optimizer out to compare the weights before and after instead."
        )
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"wur_summary.watch: optimizer= needs Keras's TensorFlow backend, not "
            f"{keras.backend.backend()!r}"
        )
    return not tf.distribute.has_strategy() and not any(
        isinstance(w.variable, tf.distribute.DistributedValues) for w in watched
    )


def record(
    watched: Sequence[WatchedVariable],
    before: Sequence[tf.Tensor],
    step: Any,
    histograms: bool = False,
    changes: Sequence[tf.Tensor | None] | None = None,
):
    """Write the ratio (and histogram) of each watched variable's change since `before`,
    and the skipped-step marker (1 if no watched variable changed). Where `changes[i]` is
    given (see `captured_changes`), it is the change, and the ratio reads no variable.

    Writes to the default writer regardless of `record_if`: the caller decided to record
    when it took the snapshot. Eagerly, one traced function computes all ratios at once.
    """
    writer = summary.default_writer_resource("wur_summary.watch")
    if writer is None:  # no writer, or one that writes nothing
        return False if tf.executing_eagerly() else tf.constant(False)
    tags = tuple(w.tag for w in watched)
    variables = [w.variable for w in watched]
    changes = list(changes or [None] * len(watched))
    write = _write_ratios_traced if tf.executing_eagerly() else _write_ratios
    written = write(tags, variables, list(before), _read_step(step), histograms, writer, changes)
    return bool(written) if tf.executing_eagerly() else written


@contextlib.contextmanager
def watch(
    variables: Any, step: Any = None, histograms: bool = False, optimizer: Any = None
) -> Iterator[None]:
    """Log the weight-update ratio of each of `variables` for the update made in the block.

    Snapshots the variables on entry and writes, on exit, one ratio per variable (and with
    `histograms=True` the histogram of its elementwise ratios) at `step`, read on entry.
    When summaries are not being recorded (no default writer, or `record_if` false) it
    reads, computes and writes nothing. Inside a `tf.function` traced without a default
    writer, or under a constant `record_if(False)`, it adds no op at all; with a writer and a
    tensor or callable `record_if` condition it adds one conditional on entry and one on
    exit, which run the snapshot and the ratios only when the condition holds.

    With `optimizer` (a Keras optimizer, whose update the block makes), Δw is taken from
    the optimizer's own update (`captured_changes`) on steps whose recording is known when
    traced: the ratio needs no second read of the weights and no subtraction. It is the
    update the optimizer computed, which differs from the change of the stored weights by
    float rounding of w + Δw (relative 2⁻²⁴ |w_i| / |Δw_i| per element in float32).
    Variables whose update it cannot see so (see `captured_changes`) are compared before
    and after as without it.

    Under a synchronous `tf.distribute` strategy it may wrap `optimizer.apply_gradients` in
    the replica function (only replica 0 logs, as for `tf.summary`) or wrap `strategy.run`
    in cross-replica context; either way each update is logged once, by the chief alone
    (`writes_summaries`): on the other workers of a multi-worker strategy it does nothing.
    """
    watched = watched_variables(variables)
    capturing = _captures_changes(optimizer, watched)
    recording = summary.static_recording()
    if recording is None and tf.executing_eagerly():
        recording = bool(tf.summary.should_record_summaries())
    if recording is False or not watched:
        yield
        return
    if not writes_summaries(watched):  # a non-chief worker: the chief logs this update
        yield
        return
    summary.check_default_writer_open("wur_summary.watch")
    if step is None:
        step = tf.summary.experimental.get_step()
    if step is None:
        raise ValueError(
            "wur_summary.watch: no step set; pass step= or call "
            "tf.summary.experimental.set_step()"
        )
    if recording:  # known now: eagerly, or constant conditions in a graph
        step_value = _read_step(step)
        before = snapshot(watched)
        with (
            captured_changes([w.variable for w in watched]) if capturing
            else contextlib.nullcontext([None] * len(watched))
        ) as changes:
            yield
        record(watched, before, step_value, histograms, changes)
        return

    # The snapshot leaves the conditional as one stacked tensor per shape of small
    # variables, and as is for large ones: few outputs, so that it costs little when it
    # does not record.
    stacks, large = _partition([w.variable for w in watched])

    def take_snapshot():
        values = snapshot(watched)
        return _read_step(step), (
            [tf.stack([values[i] for i in stack]) for stack in stacks],
            [tf.identity(values[i]) for i in large],
        )

    def no_snapshot():
        def empty(i, rank):
            return tf.zeros([0] * (rank or 1), watched[i].variable.dtype)

        return tf.constant(0, tf.int64), (
            [empty(stack[0], 1 + watched[stack[0]].variable.shape.rank) for stack in stacks],
            [empty(i, watched[i].variable.shape.rank) for i in large],
        )

    def record_snapshot(snapshots):
        stacked, large_values = snapshots
        before = [None] * len(watched)
        for stack, values in zip(stacks, stacked):
            for i, value in zip(stack, tf.unstack(values, num=len(stack))):  # no copy
                before[i] = value
        for i, value in zip(large, large_values):
            before[i] = value
        return record(watched, before, step_value, histograms)

    # Each branch that records is one call of a function kept out of line: when the
    # condition is false, the step skips one op instead of hundreds.
    take_snapshot = tf.function(take_snapshot, experimental_attributes=_NOT_INLINED)
    record_snapshot = tf.function(record_snapshot, experimental_attributes=_NOT_INLINED)
    should_record = tf.summary.should_record_summaries()
    step_value, stacked = tf.cond(should_record, take_snapshot, no_snapshot)
    yield
    tf.cond(should_record, lambda: record_snapshot(stacked), lambda: tf.constant(False))


_NOT_INLINED = {"_noinline": True}


def _write_ratios(
    tags: tuple[str, ...],
    variables: list[tf.Variable],
    before: list[tf.Tensor],
    step: tf.Tensor,
    histograms: bool,
    writer: tf.Tensor,
    changes: list[tf.Tensor | None],
) -> tf.Tensor:
    for old, variable in zip(before, variables):
        old.set_shape(variable.shape)  # lost when the snapshot was taken in a conditional
    ratios = update_ratios(before, variables, changes)  # large variables read one at a time
    skipped = tf.cast(tf.reduce_all(ratios == 0), tf.float32)[tf.newaxis]
    abouts = [f"of {tag}: shape {v.shape.as_list()}, {v.dtype.name}" for tag, v in zip(tags, variables)]
    written = [
        summary.write_scalars(
            [*tags, metadata.SKIPPED_STEP_TAG],
            tf.concat([summary.to_stored_scalar(ratios), skipped], 0),
            step,
            [
                *(
                    metadata.create_summary_metadata(
                        metadata.KIND_RATIO, f"Weight-update ratio {about}", index
                    )
                    for index, about in enumerate(abouts)
                ),
                metadata.create_summary_metadata(
                    metadata.KIND_SKIPPED_STEP,
                    "1 where no watched variable changed (the optimizer skipped the step)",
                ),
            ],
            writer,
        )
    ]
    if histograms:
        written.append(
            summary.write_tensors(
                [metadata.histogram_tag(tag) for tag in tags],
                histogram_counts(before, variables, changes),
                step,
                [
                    metadata.create_summary_metadata(
                        metadata.KIND_HISTOGRAM, f"Elementwise update ratios {about}"
                    )
                    for about in abouts
                ],
                writer,
            )
        )
    return tf.reduce_all(tf.stack(written))


# The writer is an argument, not captured: one trace serves every writer (a new writer per
# `model.fit` call does not retrace).
_write_ratios_traced = tf.function(_write_ratios, reduce_retracing=True)


def _read_step(step: Any) -> tf.Tensor:
    return tf.cast(tf.identity(step), tf.int64)


def _tf_variable(candidate: Any) -> tf.Variable:
    if isinstance(candidate, tf.Variable):
        return candidate
    inner = getattr(candidate, "value", None)  # a Keras 3 Variable wraps a tf.Variable
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError(
        f"wur_summary.watch takes tf.Variable or keras.Variable objects, got "
        f"{type(candidate).__name__}: {candidate!r:.80}"
    )


def _variable_path(candidate: Any) -> str:
    path = getattr(candidate, "path", None)
    if isinstance(path, str) and path:
        return path
    name = candidate.name
    return name[:-2] if name.endswith(":0") else name

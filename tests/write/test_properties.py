"""Property-based tests (hypothesis) of the ratio math and the histogram bucketing, over
shapes, dtypes and extreme values: 0, subnormals, huge values, inf and NaN."""

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tb_wur_plugin.tf_write import bucketing, ratios
from tb_wur_plugin import metadata

DTYPES = [np.float16, np.float32, np.float64]


def _values(dtype, finite_only=False):
    """Any value of `dtype`, with its extremes drawn often."""
    info = np.finfo(dtype)
    extremes = [0.0, -0.0, float(info.smallest_subnormal), float(info.tiny), float(info.max),
                -float(info.max), 1.0, 1e-3]
    if not finite_only:
        extremes += [np.inf, -np.inf, np.nan]
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    return st.one_of(
        st.sampled_from(extremes),
        st.floats(width=width, allow_nan=not finite_only, allow_infinity=not finite_only),
    )


@st.composite
def pairs(draw, dtype=None):
    """(before, after) arrays of one shape and dtype; `after` is `before` moved, at some
    scale, in part or entirely, or drawn independently."""
    dtype = dtype or draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
    before = draw(hnp.arrays(dtype, shape, elements=_values(dtype)))
    how = draw(st.sampled_from(["scaled", "independent", "same"]))
    if how == "independent":
        after = draw(hnp.arrays(dtype, shape, elements=_values(dtype)))
    elif how == "same":
        after = before.copy()
    else:
        scale = draw(st.sampled_from([1e-30, 1e-7, 1e-3, 1.0, 1e20]))
        noise = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1, 1)))
        with np.errstate(all="ignore"):
            after = (before.astype(np.float64) * (1 + scale * noise)).astype(dtype)
    return before, after


def reference_ratio(before: np.ndarray, after: np.ndarray) -> float:
    """‖Δw‖ / ‖w‖ by the contract, with Δw taken in the variable's precision (at least
    float32) and the sums in extended precision (np.longdouble), which no float64 square
    overflows or underflows. TensorFlow's CPU kernels flush float32 and float64 subnormals
    to zero (inputs and results), as here."""
    work = np.float64 if before.dtype == np.float64 else np.float32
    old = _flushed(before.astype(work), before.dtype)
    with np.errstate(all="ignore"):
        delta = _flushed(_flushed(after.astype(work), after.dtype) - old, work)
    if not (np.all(np.isfinite(old)) and np.all(np.isfinite(delta))):
        return float("nan")
    weight = np.sum(old.astype(np.longdouble) ** 2)
    update = np.sum(delta.astype(np.longdouble) ** 2)
    if update == 0:
        return 0.0
    if weight == 0:
        return float("inf")
    return float(np.sqrt(update / weight))


def _flushed(x: np.ndarray, dtype) -> np.ndarray:
    """`x` with the subnormals of `dtype` (float32, float64) set to zero."""
    if dtype not in (np.float32, np.float64):
        return x
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x) < np.finfo(dtype).tiny, np.zeros_like(x), x)


def _assert_ratio_close(got: float, want: float) -> None:
    if np.isnan(want):
        assert np.isnan(got), (got, want)
    elif np.isinf(want) or want == 0:
        assert got == want, (got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pairs())
def test_update_ratio_equals_the_float64_definition(pair):
    before, after = pair
    (got,) = ratios.update_ratios([tf.constant(before)], [tf.constant(after)]).numpy()
    _assert_ratio_close(got, reference_ratio(before, after))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(pairs(), min_size=1, max_size=6))
def test_update_ratios_of_many_variables_are_each_variables_ratio(pair_list):
    got = ratios.update_ratios(
        [tf.constant(b) for b, _ in pair_list], [tf.constant(a) for _, a in pair_list]
    ).numpy()
    assert got.shape == (len(pair_list),)
    for value, (before, after) in zip(got, pair_list):
        _assert_ratio_close(value, reference_ratio(before, after))


def _buckets_by_comparison(values: np.ndarray) -> np.ndarray:
    """The protocol's buckets, by comparing each value with the edges in its precision."""
    values = values.astype(np.float32) if values.dtype == np.float16 else values
    edges = metadata.HISTOGRAM_EDGES.astype(values.dtype)
    flat = values.ravel()
    with np.errstate(invalid="ignore"):
        bucket = np.searchsorted(edges, flat, side="right") + metadata.UNDERFLOW_BUCKET
        bucket = np.where(flat > 0, bucket, np.where(flat == 0, metadata.ZERO_BUCKET,
                                                     metadata.NAN_BUCKET))
    bucket = np.where(flat == np.inf, metadata.INF_BUCKET, bucket)
    return np.bincount(bucket, minlength=metadata.NUM_BUCKETS)


@st.composite
def ratio_arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    edges = [float(e) for e in metadata.HISTOGRAM_EDGES.astype(dtype) if np.isfinite(e)]
    near_edges = st.sampled_from(edges).flatmap(
        lambda e: st.sampled_from([e, float(np.nextafter(dtype(e), dtype(0))),
                                   float(np.nextafter(dtype(e), dtype(np.inf)))])
    )
    in_range = st.floats(1e-12, 1e3).map(lambda v: float(dtype(v)))
    elements = st.one_of(_values(dtype), near_edges, in_range)
    return draw(hnp.arrays(dtype, shape, elements=elements))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ratio_arrays())
def test_bucket_counts_put_every_value_where_comparisons_with_the_edges_do(values):
    got = bucketing.bucket_counts(tf.constant(values)).numpy()
    np.testing.assert_array_equal(got, _buckets_by_comparison(values))
    assert got.sum() == values.size


@settings(max_examples=100, deadline=None, derandomize=True)
@given(pairs(dtype=np.float32))
def test_elementwise_histogram_counts_every_element_once(pair):
    before, after = pair
    if before.ndim == 0:
        before, after = before[None], after[None]
    counts = ratios.histogram_counts([tf.constant(before)], [tf.constant(after)]).numpy()
    assert counts.shape == (1, metadata.NUM_BUCKETS) and counts.sum() == before.size
    old = _flushed(before, np.float32)  # as TensorFlow's CPU kernels see them
    with np.errstate(all="ignore"):
        delta = _flushed(np.abs(_flushed(after, np.float32) - old), np.float32)
        expected = np.where(delta == 0, 0, delta / np.abs(old))
    np.testing.assert_array_equal(counts[0], _buckets_by_comparison(expected.astype(np.float32)))

import glob

import numpy as np
import pytest
import tensorflow as tf

from helpers import read_events, reference_buckets
from tensorboard.backend.event_processing import event_file_loader

from tb_wur_plugin.tf_write import batched_write, bucketing, recording, summary_ops
from tb_wur_plugin import metadata, wur_summary


def test_scalar_writes_float32_at_explicit_and_default_step(logdir, writer):
    with writer.as_default():
        assert wur_summary.scalar("net/dense/kernel", 1.25e-3, step=7) is True
        tf.summary.experimental.set_step(8)
        try:
            assert wur_summary.scalar("net/dense/kernel", np.float32(2.5e-3)) is True
        finally:
            tf.summary.experimental.set_step(None)
    writer.flush()
    points = read_events(logdir)["net/dense/kernel"]
    assert [(step, float(value)) for step, value, _ in points] == [
        (7, float(np.float32(1.25e-3))),
        (8, float(np.float32(2.5e-3))),
    ]
    assert points[0][1].dtype == np.float32  # the only scalar type the fast loader reads
    assert points[0][2]["kind"] == metadata.KIND_RATIO


def test_scalar_tag_is_the_name_exactly_even_in_a_name_scope(logdir, writer):
    with writer.as_default(), tf.name_scope("train"):
        wur_summary.scalar("model/dense/kernel", 0.5, step=0)
    writer.flush()
    assert list(read_events(logdir)) == ["model/dense/kernel"]


def test_nothing_is_written_without_writer_or_when_not_recording(logdir, writer):
    assert wur_summary.scalar("a", 1.0, step=0) is False
    assert wur_summary.histogram("a", [1.0], step=0) is False
    with writer.as_default(), tf.summary.record_if(False):
        assert wur_summary.scalar("a", 1.0, step=0) is False
        assert wur_summary.histogram("a", [1.0], step=0) is False
        assert wur_summary.learning_rate(0.1, step=0) is False
    writer.flush()
    assert read_events(logdir) == {}


def test_histogram_is_not_computed_when_not_recording(writer, monkeypatch):
    calls = []
    monkeypatch.setattr(summary_ops, "bucket_counts", lambda x: calls.append(x))
    with writer.as_default(), tf.summary.record_if(False):
        wur_summary.histogram("a", tf.ones([1000]), step=0)
    assert calls == []


def test_no_step_with_a_writer_is_an_error(writer):
    with writer.as_default(), pytest.raises(ValueError, match="No step set"):
        wur_summary.scalar("a", 1.0)


def test_ops_work_in_tf_function_with_dynamic_record_if(logdir, writer):
    @tf.function
    def log(step, value):
        with tf.summary.record_if(step % 2 == 0):
            ok = wur_summary.scalar("layer", value, step=step)
            wur_summary.histogram("layer", tf.fill([10], value), step=step)
            wur_summary.learning_rate(0.1, step=step)
        return ok

    with writer.as_default():
        results = [bool(log(tf.constant(s, tf.int64), tf.constant(0.01 * s))) for s in range(4)]
    writer.flush()
    assert results == [True, False, True, False]
    events = read_events(logdir)
    assert [step for step, _, _ in events["layer"]] == [0, 2]
    hist = events[metadata.histogram_tag("layer")]
    assert [step for step, _, _ in hist] == [0, 2]
    assert hist[1][1][metadata.FIRST_BIN + 33] == 10  # 0.02 lies in [10^-1.75, 10^-1.5)
    assert [float(v) for _, v, _ in events[metadata.LEARNING_RATE_TAG]] == [float(np.float32(0.1))] * 2


def _mixed_ratios(rng, n):
    values = 10.0 ** rng.uniform(-12, 3, size=n)
    # keep away from bucket edges, where float32 and float64 legitimately disagree
    position = (np.log10(values) - metadata.LOG10_MIN) * metadata.BINS_PER_DECADE
    values = values[np.abs(position - np.round(position)) > 1e-4]
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-30, 5e2]
    return np.concatenate([values, specials])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_histogram_counts_match_reference_and_add_up(logdir, writer, dtype):
    rng = np.random.default_rng(0)
    data = _mixed_ratios(rng, 5000).astype(dtype)
    with writer.as_default():
        assert wur_summary.histogram("layer", data.reshape(-1, 1), step=3)
    writer.flush()
    ((step, counts, content),) = read_events(logdir)[metadata.histogram_tag("layer")]
    assert step == 3 and counts.dtype == np.int64 and counts.shape == (metadata.NUM_BUCKETS,)
    assert counts.sum() == data.size
    np.testing.assert_array_equal(counts, reference_buckets(data))
    assert counts[metadata.ZERO_BUCKET] >= 2
    assert counts[metadata.INF_BUCKET] == 1
    assert counts[metadata.NAN_BUCKET] == 3  # NaN, -inf, -1
    assert content["kind"] == metadata.KIND_HISTOGRAM


def test_histogram_edges_are_identical_across_layers_and_steps(logdir, writer):
    with writer.as_default():
        for step in range(3):
            for layer in ("a/kernel", "b/bias"):
                wur_summary.histogram(layer, tf.random.uniform([50 + step]), step=step)
    writer.flush()
    events = read_events(logdir)
    contents = {str(c) for points in events.values() for _, _, c in points}
    shapes = {v.shape for points in events.values() for _, v, _ in points}
    assert len(contents) == 1 and shapes == {(metadata.NUM_BUCKETS,)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_at_and_next_to_every_edge_land_where_comparisons_put_them(dtype):
    edges = metadata.HISTOGRAM_EDGES.astype(dtype)
    values = np.concatenate([
        edges, np.nextafter(edges, dtype(0)), np.nextafter(edges, dtype(np.inf)),
        edges * dtype(1 + 1e-6), edges * dtype(1 - 1e-6),
    ]).astype(dtype)
    position = np.searchsorted(edges, values, side="right")  # compared in the data's dtype
    want = np.bincount(position + metadata.UNDERFLOW_BUCKET, minlength=metadata.NUM_BUCKETS)
    got = bucketing.bucket_counts_by_row(tf.constant(values[np.newaxis])).numpy()[0]
    np.testing.assert_array_equal(got, want)


def test_bucketing_is_one_compiled_pass_that_counts():
    graph = tf.function(bucketing.bucket_counts).get_concrete_function(
        tf.TensorSpec([None], tf.float32)
    ).graph
    types = {op.type for op in graph.get_operations()}
    assert not types & {"DenseBincount", "Bincount", "OneHot"}
    calls = [op for op in graph.get_operations() if "PartitionedCall" in op.type]
    assert [op.get_attr("_XlaMustCompile") for op in calls] == [True]
    inner = bucketing._counted_bucket_ids.get_concrete_function(
        tf.TensorSpec([None], tf.int32), *[tf.TensorSpec([], tf.int32)] * 3
    ).graph
    inner_types = {op.type for op in inner.get_operations()}
    assert "UnsortedSegmentSum" in inner_types
    assert "OneHot" not in inner_types  # O(N), not O(N · buckets)


def test_bucketing_more_values_than_its_limit_is_a_clear_error():
    with pytest.raises(ValueError, match="at most 1073741824"):
        tf.function(bucketing.bucket_counts).get_concrete_function(
            tf.TensorSpec([bucketing.MAX_VALUES + 1], tf.float32)
        )


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 4097])
def test_bucketing_padding_is_not_counted(size):
    """The values are padded to a power of two for XLA; the padding lands in no row."""
    values = np.full([3, size], 0.5, np.float32)
    values[1] = 0.0
    counts = bucketing.bucket_counts_by_row(tf.constant(values)).numpy()
    assert bucketing.bucket_counts(tf.constant(values[0])).numpy().sum() == size
    assert counts.sum(axis=1).tolist() == [size] * 3
    assert counts[1, metadata.ZERO_BUCKET] == size
    half = metadata.FIRST_BIN + int(np.searchsorted(metadata.HISTOGRAM_EDGES, 0.5, "right")) - 1
    assert counts[0, half] == counts[2, half] == size


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda: wur_summary.scalar("a", "fast"), TypeError, "must be a float"),
        (lambda: wur_summary.scalar("a", True), TypeError, "must be a float"),
        (lambda: wur_summary.scalar("a", tf.constant(3)), TypeError, "floating-point"),
        (lambda: wur_summary.scalar("a", [0.1, 0.2]), ValueError, "must be a scalar"),
        (lambda: wur_summary.scalar(3, 0.1), TypeError, "name must be a str"),
        (lambda: wur_summary.scalar("", 0.1), ValueError, "must not be empty"),
        (lambda: wur_summary.scalar("_wur/x", 0.1), ValueError, "reserved"),
        (lambda: wur_summary.histogram("a", ["x"]), TypeError, "floating-point"),
        (lambda: wur_summary.histogram(None, [0.1]), TypeError, "name must be a str"),
        (lambda: wur_summary.learning_rate(np.ones(3)), ValueError, "must be a scalar"),
        (lambda: wur_summary.histogram("a", object()), TypeError, "float tensor"),
    ],
)
def test_bad_input_raises_clear_errors(writer, call, error, message):
    with writer.as_default(), pytest.raises(error, match=message):
        call()


def test_closed_writer_is_a_clear_error(writer):
    with writer.as_default():
        writer.close()
        with pytest.raises(RuntimeError, match="summary writer is closed"):
            wur_summary.scalar("a", 0.1, step=0)
        with pytest.raises(RuntimeError, match="summary writer is closed"):
            with wur_summary.watch([tf.Variable(1.0)], step=0):
                pass


def test_positive_ratios_below_float32_range_are_not_stored_as_zero(logdir, writer):
    with writer.as_default():
        wur_summary.scalar("a", 1e-50, step=0)
        wur_summary.scalar("a", 0.0, step=1)
        wur_summary.scalar("a", np.inf, step=2)
    writer.flush()
    values = [float(v) for _, v, _ in read_events(logdir)["a"]]
    assert values == [float(np.finfo(np.float32).smallest_subnormal), 0.0, np.inf]


def _the_only_event(logdir):
    """The one event with summaries in `logdir`'s one event file, as TensorBoard reads it."""
    (path,) = glob.glob(logdir + "/events*")
    events = [e for e in event_file_loader.EventFileLoader(path).Load() if e.summary.value]
    assert len(events) == 1
    return events[0]


def test_write_scalars_writes_one_event_that_reads_as_scalar_summaries(logdir, writer):
    tags = ["a/kernel", "b/bias", "ü/unicode tag " + "x" * 200]
    metas = [metadata.create_summary_metadata(metadata.KIND_RATIO, f"about {t}", i)
             for i, t in enumerate(tags)]
    values = tf.constant([1.5e-3, np.inf, np.nan], tf.float32)
    with writer.as_default(), tf.summary.record_if(True):
        batched_write.write_scalars(
            tags, values, 4, metas, recording.default_writer_resource("test")
        )
    writer.flush()
    event = _the_only_event(logdir)
    assert event.step == 4
    for value, tag, meta, want in zip(event.summary.value, tags, metas, values.numpy()):
        assert value.tag == tag and value.metadata == meta
        assert value.tensor.dtype == tf.float32.as_datatype_enum
        got = tf.make_ndarray(value.tensor)
        assert got.shape == () and (got == want or (np.isnan(got) and np.isnan(want)))


def test_write_tensors_writes_one_event_that_reads_as_the_rows(logdir, writer):
    tags = ["_wur/histogram/a", "_wur/histogram/ü " + "x" * 300]
    metas = [metadata.create_summary_metadata(metadata.KIND_HISTOGRAM, t) for t in tags]
    rows = tf.constant(np.arange(2 * metadata.NUM_BUCKETS).reshape(2, -1) * 10**12, tf.int64)
    with writer.as_default(), tf.summary.record_if(True):
        batched_write.write_tensors(tags, rows, 7, metas, recording.default_writer_resource("test"))
    writer.flush()
    event = _the_only_event(logdir)
    assert event.step == 7
    for value, tag, meta, want in zip(event.summary.value, tags, metas, rows.numpy()):
        assert value.tag == tag and value.metadata == meta
        np.testing.assert_array_equal(tf.make_ndarray(value.tensor), want)
    with pytest.raises(ValueError, match="shape"):
        batched_write.write_tensors(
            tags, rows[:1], 7, metas, recording.default_writer_resource("test")
        )


def test_values_across_the_float32_range_are_bucketed_as_comparisons_with_the_edges_do():
    """The first, last and a middle value of each run of 2^20 float32 bit patterns (all
    signs and exponents), and the float32 edges with their neighbours: each value's bucket
    by itself."""
    starts = np.arange(1 << 12, dtype=np.uint32) << np.uint32(20)
    bits = np.concatenate([starts, starts + (1 << 20) - 1, starts + 12345])
    edges = metadata.HISTOGRAM_EDGES.astype(np.float32)
    values = np.concatenate([
        bits.astype(np.uint32).view(np.float32), edges,
        np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf)),
    ])
    got = bucketing.bucket_counts_by_row(tf.constant(values[:, np.newaxis])).numpy()
    assert (got.sum(axis=1) == 1).all()
    with np.errstate(invalid="ignore"):
        want = np.where(
            np.isnan(values) | (values < 0), metadata.NAN_BUCKET,
            np.where(values == 0, metadata.ZERO_BUCKET,
                     np.where(values == np.inf, metadata.INF_BUCKET,
                              np.searchsorted(edges, values, side="right")
                              + metadata.UNDERFLOW_BUCKET)))
    np.testing.assert_array_equal(got.argmax(axis=1), want)


def test_bucket_counts_by_row_equals_bucket_counts_of_each_row():
    rng = np.random.default_rng(5)
    rows = np.abs(rng.normal(size=(4, 30)) * 10.0 ** rng.integers(-12, 4, size=(4, 30)))
    rows[0, :3] = [0.0, np.inf, np.nan]
    by_row = bucketing.bucket_counts_by_row(tf.constant(rows, tf.float32)).numpy()
    assert by_row.shape == (4, metadata.NUM_BUCKETS)
    for row, counts in zip(rows, by_row):
        np.testing.assert_array_equal(counts, reference_buckets(row))


def test_static_recording_knows_constant_conditions_without_adding_ops(writer):
    assert recording.static_recording() is False  # no default writer
    with writer.as_default():
        assert recording.static_recording() is True
        with tf.summary.record_if(False):
            assert recording.static_recording() is False
        with tf.summary.record_if(tf.constant(True)):
            assert recording.static_recording() is True
        with tf.summary.record_if(lambda: True):
            assert recording.static_recording() is None  # decided when the graph runs
        graph = tf.Graph()
        with graph.as_default():
            recording.static_recording()
        assert graph.get_operations() == []

"""Issue 24 on the TensorFlow write paths: `wur_summary.watch` (and the Keras callback, which
writes through its `record`) and TF1's `compat.v1` write the packed series of protocol
version 3 (`metadata`), exactly as the TensorFlow-free `SummaryWriter` does: for the same
tags, shapes, descriptions and values, every `Summary.Value` they write is byte for byte the
one `SummaryWriter` writes, and decodes with `metadata`'s own decoders to the same tag,
metadata and float32 values. Checked at event level (`EventFileLoader`), not through the
plugin."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from helpers import event_files, read_packed, reference_buckets, reference_ratio
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.compat import v1 as wur_v1
from tb_wur_plugin.tf_write import batched_write, watch
from tb_wur_plugin.writer import Counts, SummaryWriter


def _summary_events(logdir):
    """[(path, [(step, wall_time, [Summary.Value])])] of each event file of `logdir`."""
    out = []
    for path in event_files(logdir):
        out.append((path, [
            (e.step, e.wall_time, list(e.summary.value))
            for e in event_file_loader.EventFileLoader(path).Load() if e.summary.value
        ]))
    return out


def _rewrite_with_the_tf_free_writer(events, logdir, about):
    """Write the values of `events` (one file's, as `_summary_events` gives them) again with
    `SummaryWriter`: each event of packed ratios by `add_ratios` (its layers' ratios, marker,
    shapes and descriptions, from `about`: tag -> (shape, description)), each of packed
    histograms by `add_histograms` (`Counts`). Returns the path of its file."""
    contents = {}
    with SummaryWriter(logdir) as writer:
        for step, wall_time, values in events:
            kinds = set()
            ratios, skipped, counts = {}, set(), {}
            for value in values:
                if value.HasField("metadata"):
                    contents[value.tag] = metadata.parse_plugin_content(
                        value.metadata.plugin_data.content)
                content = contents[value.tag]
                kinds.add(content["kind"])
                layers = metadata.packed_layers(content)
                stored = tensor_util.make_ndarray(value.tensor)
                if content["kind"] == metadata.KIND_PACKED_RATIOS:
                    got, marker = metadata.decode_packed_ratios(stored, len(layers))
                    ratios.update((layer.tag, ratio) for layer, ratio in zip(layers, got[0]))
                    skipped.add(bool(marker[0]))
                else:
                    rows = metadata.decode_packed_histograms(stored, len(layers))
                    counts.update((layer.tag, Counts(row)) for layer, row in zip(layers, rows))
            assert len(kinds) == 1, kinds  # ratios and histograms are separate events
            if ratios:
                (marker,) = skipped
                writer.add_ratios(
                    ratios, step, skipped=marker, wall_time=wall_time,
                    shapes={t: about[t][0] for t in ratios if about[t][0] is not None},
                    descriptions={t: about[t][1] for t in ratios},
                )
            else:
                writer.add_histograms(counts, step, wall_time=wall_time)
        return writer.path


def _assert_written_as_the_tf_free_writer_writes(logdir, about, tmp_path):
    """Each file of `logdir`, written again by `SummaryWriter`, holds the same events: the
    same steps, and values equal byte for byte."""
    files = _summary_events(logdir)
    assert files
    for number, (_, events) in enumerate(files):
        again = _rewrite_with_the_tf_free_writer(events, str(tmp_path / f"again{number}"), about)
        (_, expected), = _summary_events(os.path.dirname(again))
        assert [(s, len(v)) for s, _, v in events] == [(s, len(v)) for s, _, v in expected]
        for (step, _, got), (_, _, want) in zip(events, expected):
            for value, reference in zip(got, want):
                assert value.tag == reference.tag, step
                assert value.metadata == reference.metadata, (step, value.tag)
                assert value.tensor == reference.tensor, (step, value.tag)
                assert value.SerializeToString() == reference.SerializeToString(), (step, value.tag)


def _about(variables, tags):
    """tag -> (shape, description) as watch describes the variables."""
    return {
        tag: (tuple(v.shape.as_list()),
              metadata.ratio_description(tag, v.shape.as_list(), v.dtype.name))
        for tag, v in zip(tags, variables)
    }


def _variables(count, rng):
    shapes = [(3, 2), (2,), (), (2, 2, 2), (4, 3), (3,)]
    dtypes = [np.float32, np.float32, np.float64, np.float16, np.float32, np.float64]
    return [
        tf.Variable(rng.normal(size=shapes[i % 6]).astype(dtypes[i % 6]), name=f"layer_{i}/w")
        for i in range(count)
    ]


def _train(variables, logdir, steps, use_function, histograms=True, skip=()):
    """`steps` updates under watch (none at the steps in `skip`); the numpy references:
    {step: [ratio per variable]}, {step: [elementwise ratios per variable]}."""

    def update(step, scale):
        with wur_summary.watch(variables, step=step, histograms=histograms):
            for i, v in enumerate(variables):
                v.assign_add(tf.cast(scale * (1 + i % 5) * tf.sin(tf.cast(v, tf.float32) + 1),
                                     v.dtype))

    update_fn = tf.function(update) if use_function else update
    ratios, elementwise = {}, {}
    with tf.summary.create_file_writer(logdir).as_default():
        for step in range(steps):
            before = [v.numpy() for v in variables]
            scale = 0.0 if step in skip else 1e-3 * (step + 1)
            update_fn(tf.constant(step, tf.int64), tf.constant(scale))
            after = [v.numpy() for v in variables]
            ratios[step] = [reference_ratio(b, a) for b, a in zip(before, after)]
            elementwise[step] = [
                np.abs(a.astype(np.float64) - b) / np.abs(b.astype(np.float64))
                for b, a in zip(before, after)
            ]
    return ratios, elementwise


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
def test_watch_writes_what_the_tf_free_writer_writes(tmp_path, use_function):
    variables = _variables(6, np.random.default_rng(0))
    tags = [v.name[:-2] for v in variables]
    logdir = str(tmp_path / "tf")
    ratios, elementwise = _train(variables, logdir, 4, use_function, skip={2})
    run = read_packed(logdir)  # metadata once per file, chunks in order
    assert run.skipped == [(0, 0.0), (1, 0.0), (2, 1.0), (3, 0.0)]
    assert sorted(run.layers) == sorted(tags)
    for i, (tag, v) in enumerate(zip(tags, variables)):
        index, layer = run.layers[tag]
        assert index == i
        assert layer == metadata.PackedLayer(
            tag, tuple(v.shape.as_list()),
            metadata.ratio_description(tag, v.shape.as_list(), v.dtype.name))
        got = run.ratios[tag]
        assert [s for s, _ in got] == [0, 1, 2, 3]
        assert all(r.dtype == np.float32 for _, r in got)
        np.testing.assert_allclose([float(r) for _, r in got], [ratios[s][i] for s in range(4)],
                                   rtol=2e-3 if v.dtype == tf.float16 else 5e-7)
        assert float(got[2][1]) == 0.0
        for step, counts in run.histograms[tag]:
            assert counts.sum() == max(1, int(np.prod(v.shape)))
            if v.dtype != tf.float16:  # no edge case of float16's rounding
                assert np.abs(counts - reference_buckets(elementwise[step][i])).sum() <= 2
    # each logged step: one event of ratios, one of histograms, each one packed value
    assert [len(tags_of) for _, tags_of in run.events] == [1] * 8
    assert [step for step, _ in run.events] == [0, 0, 1, 1, 2, 2, 3, 3]
    _assert_written_as_the_tf_free_writer_writes(logdir, _about(variables, tags), tmp_path)


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
def test_more_than_256_layers_are_written_in_chunks(tmp_path, use_function):
    count = 2 * metadata.MAX_PACKED_LAYERS + 7
    variables = _variables(count, np.random.default_rng(1))
    tags = [v.name[:-2] for v in variables]
    logdir = str(tmp_path / "tf")
    ratios, _ = _train(variables, logdir, 3, use_function, skip={1})
    run = read_packed(logdir)
    ratio_tags = [t for t, c in run.contents.items() if c["kind"] == metadata.KIND_PACKED_RATIOS]
    histogram_tags = [t for t in run.contents if t not in ratio_tags]
    for packed in (ratio_tags, histogram_tags):
        assert [run.contents[t]["offset"] for t in packed] == [0, 256, 512]
        assert [len(run.contents[t]["layers"]) for t in packed] == [256, 256, 7]
        assert len(set(packed)) == 3
    assert all(t.startswith("_wur/ratios/") for t in ratio_tags)
    assert all(t.startswith("_wur/histograms/") for t in histogram_tags)
    # one event per step for the ratios (all chunks), one for the histograms
    assert run.events == [(s, packed) for s in range(3) for packed in (ratio_tags, histogram_tags)]
    assert run.skipped == [(0, 0.0), (1, 1.0), (2, 0.0)]  # in every chunk (read_packed checks)
    assert [run.layers[t][0] for t in tags] == list(range(count))
    for i, tag in enumerate(tags):
        np.testing.assert_allclose(
            [float(r) for _, r in run.ratios[tag]], [ratios[s][i] for s in range(3)],
            rtol=2e-3 if variables[i].dtype == tf.float16 else 5e-7)
    _assert_written_as_the_tf_free_writer_writes(logdir, _about(variables, tags), tmp_path)


def test_metadata_is_in_each_tags_first_event_of_each_file(tmp_path):
    """A new writer (a restarted training, a second `fit`): a new file, the metadata again
    in its first event; eagerly one trace serves every writer, and a `tf.function` (traced
    once per writer: it captures it) writes the metadata at its first run only."""
    variables = _variables(3, np.random.default_rng(2))

    def update(step):
        with wur_summary.watch(variables, step=step, histograms=True):
            for v in variables:
                v.assign_add(tf.cast(0.01, v.dtype) * tf.ones_like(v))

    traces = watch._write_ratios_traced.experimental_get_tracing_count()
    for run in ("a", "b"):
        with tf.summary.create_file_writer(str(tmp_path / run)).as_default():
            for step in range(3):
                update(step)
        traced = tf.function(update)
        with tf.summary.create_file_writer(str(tmp_path / run)).as_default():
            for step in range(3, 6):
                traced(tf.constant(step, tf.int64))
        assert traced.experimental_get_tracing_count() == 1
    assert watch._write_ratios_traced.experimental_get_tracing_count() - traces <= 1
    for run in ("a", "b"):
        files = _summary_events(str(tmp_path / run))
        assert len(files) == 2
        for _, events in files:
            assert [[v.HasField("metadata") for v in values] for _, _, values in events] == (
                [[True], [True]] + [[False], [False]] * 2)
        packed = read_packed(str(tmp_path / run))  # checks the same, per tag
        assert [s for s, _ in packed.skipped] == list(range(6))


def test_a_watch_under_a_false_record_if_writes_nothing_and_no_metadata(tmp_path):
    variables = _variables(2, np.random.default_rng(3))
    logdir = str(tmp_path / "run")
    with tf.summary.create_file_writer(logdir).as_default():
        for step in range(4):
            with tf.summary.record_if(step % 2 == 1), wur_summary.watch(variables, step=step):
                variables[0].assign_add(tf.ones_like(variables[0]))
    run = read_packed(logdir)
    assert [s for s, _ in run.skipped] == [1, 3]


def test_the_metadata_flags_are_one_for_all_chunks_or_one_per_chunk():
    assert batched_write._choose(True, [b"x", b"y"], [b"-", b"-"]).numpy().tolist() == [b"x", b"y"]
    assert batched_write._choose([False, True], [b"x", b"y"], [b"-", b"-"]).numpy().tolist() == [
        b"-", b"y"]
    flags = [tf.constant(True), False]
    assert batched_write._choose(flags, [b"x", b"y"], [b"-", b"-"]).numpy().tolist() == [b"x", b"-"]
    assert batched_write._choose(tf.constant([False, True]), [1, 2], [3, 4], tf.int32).numpy(
        ).tolist() == [3, 2]
    with pytest.raises(ValueError, match="2 flags for 1"):
        batched_write._choose([True, False], [b"x"], [b"y"])


def test_tf_chunked_varints_are_the_tf_free_ones():
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 2**34, size=(600, metadata.NUM_BUCKETS)) >> rng.integers(
        0, 34, size=(600, metadata.NUM_BUCKETS))
    chunks = batched_write.histogram_chunks(tuple(f"l{i}" for i in range(600)))
    data, lengths = batched_write.encode_count_chunks(tf.constant(counts), chunks)
    assert len(chunks) == 3
    for chunk, got, length in zip(chunks, data.numpy(), lengths.numpy()):
        want = metadata.encode_packed_histograms(counts[chunk.offset:chunk.end])
        assert got == want and length == len(want)


# --- TF1: compat.v1 --------------------------------------------------------------------------


def _tf1_run(logdir, count, histograms, steps=3, skip=()):
    """`count` variables updated by SGD in a TF1 graph under `compat.v1.watch`, each step's
    `wur.summary` added to a `FileWriter`; the tags, the variables' about, and the raw
    serialized summaries."""
    graph = tf.Graph()
    rng = np.random.default_rng(5)
    shapes = [(3, 2), (2,), (4,)]
    with graph.as_default():
        variables = [
            tf.compat.v1.get_variable(
                f"layer_{i}/w", initializer=rng.normal(size=shapes[i % 3]).astype(np.float32),
                use_resource=True)
            for i in range(count)
        ]
        scale = tf.compat.v1.placeholder(tf.float32, [])
        loss = tf.add_n([tf.reduce_sum(tf.sin(v)) * scale for v in variables])
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        grads = optimizer.compute_gradients(loss, variables)
        with wur_v1.watch(histograms=histograms) as wur:
            optimizer.apply_gradients(grads)
        writer = tf.compat.v1.summary.FileWriter(logdir, graph=None)
        summaries = []
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in range(steps):
                _, summary = session.run(
                    [wur.train_op, wur.summary], {scale: 0.0 if step in skip else 1.0})
                writer.add_summary(summary, step)
                summaries.append(summary)
        writer.close()
        tags = [w.tag for w in wur.watched]
        about = {
            w.tag: (tuple(w.variable.shape.as_list()), metadata.ratio_description(
                w.tag, w.variable.shape.as_list(), w.variable.dtype.base_dtype.name))
            for w in wur.watched
        }
    return tags, about, summaries


@pytest.mark.parametrize("histograms", [False, True])
def test_compat_v1_writes_what_the_tf_free_writer_writes(tmp_path, histograms):
    logdir = str(tmp_path / "tf1")
    tags, about, summaries = _tf1_run(logdir, 5, histograms, skip={1})
    for serialized in summaries:  # every value carries its metadata, as TF1 ops' do
        summary = summary_pb2.Summary.FromString(serialized)
        assert len(summary.value) == (2 if histograms else 1)
        assert all(v.HasField("metadata") for v in summary.value)
    run = read_packed(logdir)  # the FileWriter kept it in each tag's first event only
    assert run.skipped == [(0, 0.0), (1, 1.0), (2, 0.0)]
    assert [run.layers[t][0] for t in tags] == list(range(5))
    assert sorted(run.histograms) == (sorted(tags) if histograms else [])
    # the ratios and the histograms of a step are one event of the FileWriter
    _assert_tf1_matches_the_tf_free_writer(logdir, about, tmp_path)


def test_compat_v1_writes_more_than_256_layers_in_chunks(tmp_path):
    logdir = str(tmp_path / "tf1")
    count = metadata.MAX_PACKED_LAYERS + 3
    tags, about, _ = _tf1_run(logdir, count, True, steps=2)
    run = read_packed(logdir)
    for kind in (metadata.KIND_PACKED_RATIOS, metadata.KIND_PACKED_HISTOGRAMS):
        chunks = [c for c in run.contents.values() if c["kind"] == kind]
        assert [(c["offset"], len(c["layers"])) for c in chunks] == [(0, 256), (256, 3)]
    assert [run.layers[t][0] for t in tags] == list(range(count))
    assert all(len(run.ratios[t]) == 2 for t in tags)
    _assert_tf1_matches_the_tf_free_writer(logdir, about, tmp_path)


def _assert_tf1_matches_the_tf_free_writer(logdir, about, tmp_path):
    """As `_assert_written_as_the_tf_free_writer_writes`, for a FileWriter's events, each of
    which holds a step's ratios and histograms together: split into the two events
    `SummaryWriter` writes."""
    ((path, events),) = _summary_events(logdir)
    split = []
    for step, wall_time, values in events:
        ratios = [v for v in values if v.tag.startswith("_wur/ratios/")]
        others = [v for v in values if not v.tag.startswith("_wur/ratios/")]
        assert all(v.tag.startswith("_wur/histograms/") for v in others)
        assert values == ratios + others
        split.append((step, wall_time, ratios))
        if others:
            split.append((step, wall_time, others))
    again = _rewrite_with_the_tf_free_writer(split, str(tmp_path / "again"), about)
    ((_, expected),) = _summary_events(os.path.dirname(again))
    assert [(s, len(v)) for s, _, v in split] == [(s, len(v)) for s, _, v in expected]
    for (step, _, got), (_, _, want) in zip(split, expected):
        for value, reference in zip(got, want):
            assert value.tag == reference.tag
            assert value.metadata == reference.metadata, (step, value.tag)
            assert value.tensor == reference.tensor, (step, value.tag)
            assert value.SerializeToString() == reference.SerializeToString(), (step, value.tag)
    del path

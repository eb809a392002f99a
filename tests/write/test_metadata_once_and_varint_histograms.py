"""Issue #18: each tag's metadata once per event file, histograms as varints (protocol
version 2), and files of the old layout (metadata at every step, int64 histograms) read
back as before, alone and mixed with new files in one run, in both TensorBoard loaders."""

from __future__ import annotations

import csv
import glob
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

from tb_server import TensorBoardServer
from tb_wur_plugin.tf_write import batched_write, watch
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.arrays import numpy_math
from tb_wur_plugin.writer import SummaryWriter

from helpers import event_files, read_packed
from old_layout import OldLayoutWriter

LAYERS = ("dense/kernel", "dense/bias", "head/kernel")
STEPS = 12
WALL = 1.7e9


def _events(path):
    """[(step, [(tag, has_metadata, value)])] of the summary events of one event file."""
    out = []
    for event in event_file_loader.EventFileLoader(path).Load():
        if event.HasField("summary"):
            out.append((event.step, [
                (v.tag, v.HasField("metadata"), tensor_util.make_ndarray(v.tensor))
                for v in event.summary.value
            ]))
    return out


def _files(logdir):
    return event_files(str(logdir))


def _assert_metadata_once(path):
    """Every tag of the file carries metadata at its first value, and never again."""
    seen = set()
    for _, values in _events(path):
        for tag, has_metadata, _ in values:
            assert has_metadata == (tag not in seen), (path, tag)
            seen.add(tag)
    return seen


# --- the varint histogram encoding -------------------------------------------------------

def test_varints_at_every_group_boundary():
    """Counts at and next to each 7-bit group boundary up to 2^63 - 1, alone and beside
    small ones: each encodes to its protobuf varint length and decodes back."""
    values = sorted({v for k in range(1, 10) for v in (2 ** (7 * k) - 1, 2 ** (7 * k))
                     if v < 2**63} | {0, 1, 2**63 - 1})
    for value in values:
        counts = np.zeros(metadata.NUM_BUCKETS, np.int64)
        counts[[0, 7, -1]] = [value, 1, value]
        encoded = metadata.encode_histogram(counts)
        length = max(1, -(-value.bit_length() // 7))
        assert len(encoded) == metadata.NUM_BUCKETS - 3 + 1 + 2 * length, value
        np.testing.assert_array_equal(
            metadata.decode_histogram(np.frombuffer(encoded, np.uint8)), counts)


def test_encode_decode_histogram_round_trip_and_tensorflow_encodes_the_same():
    rng = np.random.default_rng(0)
    cases = np.stack([
        np.zeros(metadata.NUM_BUCKETS, np.int64),
        rng.integers(0, 2**34, metadata.NUM_BUCKETS),
        rng.integers(0, 200, metadata.NUM_BUCKETS),
        np.where(rng.random(metadata.NUM_BUCKETS) < 0.8, 0, rng.integers(1, 10**6, metadata.NUM_BUCKETS)),
    ])
    rows, lengths = batched_write.encode_counts(tf.constant(cases))
    for counts, row, length in zip(cases, rows.numpy(), lengths.numpy()):
        encoded = metadata.encode_histogram(counts)
        assert row == encoded and length == len(encoded)
        np.testing.assert_array_equal(
            metadata.decode_histogram(np.frombuffer(encoded, np.uint8)), counts)
        np.testing.assert_array_equal(metadata.decode_histogram(counts.astype(np.int64)), counts)
    assert len(metadata.encode_histogram(np.zeros(metadata.NUM_BUCKETS, int))) == metadata.NUM_BUCKETS
    for bad in (np.zeros(52, np.int64), np.zeros(52, np.uint8), np.full(53, 0x80, np.uint8),
                np.zeros(53, np.float64)):
        with pytest.raises(ValueError):
            metadata.decode_histogram(bad)


def test_histogram_content_version_2_names_its_encoding():
    content = metadata.parse_plugin_content(metadata.create_summary_metadata(
        metadata.KIND_HISTOGRAM, histogram_version=2).plugin_data.content)
    assert content["version"] == 2 and content["encoding"] == "varint"
    ratio = metadata.parse_plugin_content(
        metadata.create_summary_metadata(metadata.KIND_RATIO).plugin_data.content)
    assert ratio["version"] == 1  # unchanged: older readers still read the ratios


# --- metadata once per writer --------------------------------------------------------------

def test_a_traced_watch_reused_across_two_writers_writes_metadata_once_into_each(tmp_path):
    variables = [tf.Variable(tf.ones([4, 3])), tf.Variable(tf.ones([3]))]
    optimizer = tf.keras.optimizers.SGD(0.1)

    def train(step):
        with wur_summary.watch(variables, step=step, histograms=True):
            optimizer.apply_gradients(zip([tf.ones([4, 3]), tf.ones([3])], variables))

    traces = watch._write_ratios_traced.experimental_get_tracing_count()
    for run in ("a", "b"):  # eagerly: watch's own traced function, the writer an argument
        with tf.summary.create_file_writer(str(tmp_path / "eager" / run)).as_default():
            for step in range(3):
                train(step)
    # at most the one trace of this shape (none when an earlier test traced it)
    assert watch._write_ratios_traced.experimental_get_tracing_count() - traces <= 1
    for run in ("a", "b"):  # a tf.function traced once per writer (it captures the writer)
        step_fn = tf.function(train)
        with tf.summary.create_file_writer(str(tmp_path / "graph" / run)).as_default():
            for step in range(3):
                step_fn(tf.constant(step, tf.int64))
        assert step_fn.experimental_get_tracing_count() == 1
    for path in glob.glob(str(tmp_path / "*" / "*")):
        (file,) = _files(path)
        tags = _assert_metadata_once(file)
        assert len(_events(file)) == 6
        assert sorted(t.split("/")[1] for t in tags) == ["histograms", "ratios"]  # packed
        run = read_packed(path)
        assert sorted(run.ratios) == sorted(run.histograms) == ["Variable", "Variable_1"]


def test_public_ops_and_line_search_write_metadata_once(tmp_path):
    from tb_wur_plugin.armijo.summaries import log_step
    from tb_wur_plugin.armijo.search import StepResult

    result = StepResult(*(tf.constant(v, tf.float64) for v in (0.5, 2.0, 1.0, 0.9, 3.0)))

    def log(step):
        wur_summary.scalar("l/kernel", 1e-3, step=step)
        wur_summary.histogram("l/kernel", tf.fill([10], 1e-3), step=step)
        wur_summary.learning_rate(0.1, step=step)
        log_step(result, step=step)

    graph_log = tf.function(log)
    for name, fn in (("eager", log), ("graph", graph_log)):
        with tf.summary.create_file_writer(str(tmp_path / name)).as_default():
            for step in range(3):
                fn(tf.constant(step, tf.int64))
        (file,) = _files(tmp_path / name)
        tags = _assert_metadata_once(file)
        assert tags == {"l/kernel", metadata.histogram_tag("l/kernel"), metadata.LEARNING_RATE_TAG,
                        *metadata.LINE_SEARCH_TAGS}
        assert len(_events(file)) == 12
    # record_if false writes nothing and does not count as the first write
    with tf.summary.create_file_writer(str(tmp_path / "cond")).as_default():
        with tf.summary.record_if(False):
            assert not wur_summary.scalar("l/kernel", 1.0, step=0)
        assert wur_summary.scalar("l/kernel", 1.0, step=1)
    (file,) = _files(tmp_path / "cond")
    assert [(s, [t[:2] for t in v]) for s, v in _events(file)] == [(1, [("l/kernel", True)])]


def test_the_tf_free_writer_writes_metadata_once_per_file(tmp_path):
    for restart in range(2):  # a restarted training: a new file, metadata again
        with SummaryWriter(tmp_path) as writer:
            for step in range(3):
                writer.add_ratios({"a/w": 1e-3, "b/w": 0.0}, step)
                writer.add_histograms({"a/w": np.full(5, 1e-3, np.float32)}, step)
                writer.add_learning_rate(0.1, step)
    files = _files(tmp_path)
    assert len(files) == 2
    for file in files:
        layers = [metadata.PackedLayer("a/w", description=metadata.ratio_description("a/w")),
                  metadata.PackedLayer("b/w", description=metadata.ratio_description("b/w"))]
        assert _assert_metadata_once(file) == {
            metadata.packed_tag(metadata.KIND_PACKED_RATIOS, layers, 0),
            metadata.packed_tag(metadata.KIND_PACKED_HISTOGRAMS, [metadata.PackedLayer("a/w")], 0),
            metadata.LEARNING_RATE_TAG}


def test_the_keras_callback_writes_metadata_once(tmp_path):
    import keras

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((16, 3), np.float32), np.ones((16, 2), np.float32)
    for _ in range(2):  # two fits: two files
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[
            WeightUpdateRatioCallback(str(tmp_path), update_freq=1, histograms=True)])
    files = _files(tmp_path / "train")
    assert len(files) == 2
    for file in files:
        tags = _assert_metadata_once(file)
        assert sorted(t.split("/")[1] for t in tags) == [
            "histograms", "learning_rate", "ratios"]  # packed, and the learning rate
    run = read_packed(str(tmp_path / "train"))
    assert model.layers[0].kernel.path in run.histograms
    assert sorted(s for s, _ in run.skipped) == list(range(8))  # steps go on across fits


# --- bytes on disk ------------------------------------------------------------------------

def _tags(layers):
    return [f"dense_{i}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers)]


def test_bytes_per_ratio_point_and_per_histogram_meet_the_targets(tmp_path):
    """30 layers x 40 steps (tags "dense_12/kernel"): at most 40 bytes a ratio point, 250 a
    histogram of 53 buckets, with TensorFlow (watch) and without (SummaryWriter)."""
    layers, steps = 30, 40
    rng = np.random.default_rng(0)
    shapes = [[64, 64] if i % 2 == 0 else [64] for i in range(layers)]
    sizes = {}
    for histograms in (False, True):
        variables = [tf.Variable(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        for v, tag in zip(variables, _tags(layers)):
            v._wur_tag = tag
        logdir = str(tmp_path / f"tf_{histograms}")
        step_fn = tf.function(lambda step: _sgd_step(variables, step, histograms))
        with tf.summary.create_file_writer(logdir).as_default():
            for step in range(steps):
                step_fn(tf.constant(step, tf.int64))
        sizes["tf", histograms] = os.path.getsize(_files(logdir)[0])
        logdir = str(tmp_path / f"free_{histograms}")
        with SummaryWriter(logdir) as writer:
            for step in range(steps):
                writer.add_ratios({t: 1e-3 * (1 + rng.random()) for t in _tags(layers)}, step)
                if histograms:
                    writer.add_histograms({t: np.abs(rng.standard_normal(s)).astype(np.float32)
                                           * 1e-3 for t, s in zip(_tags(layers), shapes)}, step)
        sizes["free", histograms] = os.path.getsize(_files(logdir)[0])
    points = layers * steps  # the skipped-step marker counts as overhead
    for way in ("tf", "free"):
        per_point = sizes[way, False] / points
        per_histogram = (sizes[way, True] - sizes[way, False]) / points
        assert per_point <= 40, (way, per_point)
        assert per_histogram <= 250, (way, per_histogram)


def _sgd_step(variables, step, histograms):
    with wur_summary.watch(_Tagged(variables), step=step, histograms=histograms):
        for v in variables:
            v.assign_sub(1e-3 * tf.sin(v + tf.cast(step, tf.float32)))


class _Tagged(list):
    """Variables whose tags are `_wur_tag` (watch tags a tf.Variable by its name)."""


@pytest.fixture(autouse=True)
def _variable_tags(monkeypatch):
    from tb_wur_plugin.tf_write.variables import WatchedVariable, watched_variables

    def tagged(variables):
        if isinstance(variables, _Tagged):
            return [WatchedVariable(v._wur_tag, v) for v in variables]
        return watched_variables(variables)

    monkeypatch.setattr(watch, "watched_variables", tagged)


# --- read back by both loaders ---------------------------------------------------------

def _ratio(layer, step):
    return 10.0 ** (-4 + layer + 0.1 * step) if (layer, step) != (1, 3) else 0.0


def _raw(layer, step):
    rng = np.random.default_rng(layer * 1000 + step)
    values = np.abs(rng.standard_normal(200 + 50 * layer)).astype(np.float32) * 10.0 ** (-3 - layer)
    values[:step] = 0
    return values


def _write_free(logdir, steps, old, histogram_version):
    previous = metadata.HISTOGRAM_WRITE_VERSION
    metadata.HISTOGRAM_WRITE_VERSION = histogram_version
    try:
        with (OldLayoutWriter if old else SummaryWriter)(logdir) as writer:
            for step in steps:
                writer.add_ratios({t: _ratio(i, step) for i, t in enumerate(LAYERS)}, step,
                                  wall_time=WALL + step)
                writer.add_histograms({t: _raw(i, step) for i, t in enumerate(LAYERS)}, step,
                                      wall_time=WALL + step)
                writer.add_learning_rate(0.1 / (1 + step), step, wall_time=WALL + step)
    finally:
        metadata.HISTOGRAM_WRITE_VERSION = previous


def _write_tf_old(logdir):
    """What the TF summary ops wrote before: tf.summary.write, metadata every step, int64."""
    from tb_wur_plugin.tf_write import bucketing

    with tf.summary.create_file_writer(logdir).as_default():
        for step in range(STEPS):
            for i, tag in enumerate(LAYERS):
                tf.summary.write(tag, tf.constant(_ratio(i, step), tf.float32), step=step,
                                 metadata=metadata.create_summary_metadata(metadata.KIND_RATIO))
                tf.summary.write(
                    metadata.histogram_tag(tag), bucketing.bucket_counts(_raw(i, step)), step=step,
                    metadata=metadata.create_summary_metadata(metadata.KIND_HISTOGRAM,
                                                              histogram_version=1))
            tf.summary.write(metadata.LEARNING_RATE_TAG, tf.constant(0.1 / (1 + step), tf.float32),
                             step=step, metadata=metadata.create_summary_metadata(
                                 metadata.KIND_LEARNING_RATE))


def _write_tf_new(logdir):
    @tf.function
    def log(step, i):
        for j, tag in enumerate(LAYERS):
            wur_summary.scalar(tag, tf.gather(ratios, i)[j], step=step)
            wur_summary.histogram(tag, tf.gather(raws[j], i), step=step)
        wur_summary.learning_rate(tf.gather(rates, i), step=step)

    ratios = tf.constant([[_ratio(i, s) for i in range(len(LAYERS))] for s in range(STEPS)],
                         tf.float32)
    raws = [tf.constant(np.stack([_raw(i, s) for s in range(STEPS)])) for i in range(len(LAYERS))]
    rates = tf.constant([0.1 / (1 + s) for s in range(STEPS)], tf.float32)
    with tf.summary.create_file_writer(logdir).as_default():
        for step in range(STEPS):
            log(tf.constant(step, tf.int64), tf.constant(step))


@pytest.fixture(scope="module")
def logdirs(tmp_path_factory):
    """Runs of the same data: 'old' / 'new' (TF-free writer, old and new layout), 'mixed'
    (steps 0-5 in an old file, 6-11 in a new one: a restart after an upgrade), 'restarted'
    (two new files); 'tf_old' / 'tf_new' (TensorFlow summary ops)."""
    root = tmp_path_factory.mktemp("compact")
    _write_free(str(root / "old"), range(STEPS), True, 1)
    _write_free(str(root / "new"), range(STEPS), False, 2)
    _write_free(str(root / "mixed"), range(6), True, 1)
    _write_free(str(root / "mixed"), range(6, STEPS), False, 2)
    _write_free(str(root / "restarted"), range(6), False, 2)
    _write_free(str(root / "restarted"), range(6, STEPS), False, 2)
    _write_tf_old(str(root / "tf_old"))
    previous = metadata.HISTOGRAM_WRITE_VERSION
    metadata.HISTOGRAM_WRITE_VERSION = 2
    try:
        _write_tf_new(str(root / "tf_new"))
    finally:
        metadata.HISTOGRAM_WRITE_VERSION = previous
    return str(root)


def test_the_files_are_of_the_layouts_intended(logdirs):
    for run in ("new", "restarted", "tf_new"):
        for file in _files(os.path.join(logdirs, run)):
            _assert_metadata_once(file)
            hist = [v for _, vs in _events(file) for t, _, v in vs if t.startswith("_wur/hist")]
            assert hist and all(v.dtype == np.uint8 for v in hist)
    old, new = sorted(_files(os.path.join(logdirs, "mixed")), key=lambda f: _events(f)[0][0])
    assert all(m for _, vs in _events(old) for _, m, _ in vs)  # metadata at every step
    _assert_metadata_once(new)


def _read_all(server, run):
    """Every route's answer for `run`, wall times and run names left out where a run of
    the TF summary ops has its own."""
    got = {}
    runs = server.get_json("/data/plugin/wur/runs")["runs"]
    (entry,) = [r for r in runs if r["run"] == run]
    got["runs"] = {k: v for k, v in entry.items() if k != "run"}
    status, _, body = server.get(f"/data/plugin/wur/heatmap?run={run}&columns=100",
                                 {"Accept-Encoding": "gzip"})
    assert status == 200
    header, arrays = heatmap_wire.unpack(body)
    header = json.loads(json.dumps(header).replace(json.dumps(run), '"RUN"'))
    got["heatmap"] = (header, {k: v.tolist() for k, v in arrays.items()})
    for tag in (*LAYERS, metadata.LEARNING_RATE_TAG):
        series = server.get_json(f"/data/plugin/wur/series?run={run}&tag={tag}")
        got["series", tag] = {k: v for k, v in series.items() if k not in ("run",)}
    for tag in LAYERS:
        hist = server.get_json(f"/data/plugin/wur/histograms?run={run}&tag={tag}")
        got["histograms", tag] = {k: v for k, v in hist.items() if k != "run"}
    got["flags"] = server.get_json(f"/data/plugin/wur/flags?run={run}")
    got["flags"] = json.loads(json.dumps(got["flags"]).replace(json.dumps(run), '"RUN"'))
    status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=csv")
    assert status == 200
    got["csv"] = list(csv.reader(io.StringIO(body.decode())))
    status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=json")
    assert status == 200
    got["json"] = json.loads(body)
    return got


def _without_wall_times(value):
    if isinstance(value, dict):
        return {k: _without_wall_times(v) for k, v in value.items() if k != "wall_times"}
    if isinstance(value, tuple):
        return tuple(_without_wall_times(v) for v in value)
    return value


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_old_new_and_mixed_files_read_back_identically(logdirs, load_fast):
    with TensorBoardServer(logdirs, load_fast, ("--samples_per_plugin=wur=0",)) as server:
        server.wait_for(lambda d: len(d["runs"]) == 6 and all(
            r["layers"] and r["layers"][0]["logged_steps"] == STEPS for r in d["runs"]),
            "/data/plugin/wur/runs")
        old = _read_all(server, "old")
        assert old["runs"]["layers"][0]["logged_steps"] == STEPS
        assert [l["tag"] for l in old["runs"]["layers"]] == list(LAYERS)
        for i, tag in enumerate(LAYERS):
            np.testing.assert_array_equal(
                old["histograms", tag]["counts"],
                [numpy_math.bucket_counts(_raw(i, s)) for s in range(STEPS)])
        assert old["series", LAYERS[0]]["description"] == "Weight-update ratio of dense/kernel"
        for run in ("new", "mixed", "restarted"):
            assert _read_all(server, run) == old, run
        tf_old = _without_wall_times(_read_all(server, "tf_old"))
        tf_new = _without_wall_times(_read_all(server, "tf_new"))
        for got in (tf_old, tf_new):
            got.pop("csv"), got.pop("json"), got.pop("heatmap")  # wall times inside
        assert tf_new == tf_old
        assert tf_old["histograms", LAYERS[0]]["counts"] == old["histograms", LAYERS[0]]["counts"]
        assert "Traceback" not in server.output()

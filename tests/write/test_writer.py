"""tb_wur_plugin.writer.SummaryWriter: what it writes reads exactly as what `watch` writes
(every route of the plugin answers the same, in both loaders of the real `tensorboard`),
its numpy bucketing is the TensorFlow path's, and the TF-free modules load no TensorFlow
and work where TensorFlow cannot be imported."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader

from framework_servers import both_loaders, export
from helpers import event_files, load_events, read_events, read_packed, reference_buckets
from tb_wur_plugin.tf_write import bucketing
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.arrays import numpy_math
from tb_wur_plugin.arrays.numpy_math import ratios_from_norms
from tb_wur_plugin.metadata import histogram_description, ratio_description
from tb_wur_plugin.writer import SummaryWriter, to_stored_scalar

STEPS = 4
SHAPES = {"net/dense/kernel": (3, 4), "net/dense/bias": (4,), "net/head/kernel": (4, 2)}
SKIPPED = 2  # the step at which nothing moves
NO_TF_SCRIPT = textwrap.dedent(
    """
    import importlib.machinery, os, sys

    class NoTensorFlow(importlib.machinery.PathFinder):
        # the path finder, blind to TensorFlow: as if it were not installed (`import
        # tensorflow` raises ModuleNotFoundError, importlib.util.find_spec returns None)

        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                return None
            return super().find_spec(name, path, target)

    sys.meta_path[:] = [
        NoTensorFlow if f is importlib.machinery.PathFinder else f for f in sys.meta_path
    ]
    assert NoTensorFlow in sys.meta_path
    import numpy as np
    import tb_wur_plugin, tb_wur_plugin.writer, tb_wur_plugin.torch, tb_wur_plugin.jax
    loaded = [m for m in sys.modules if m.split(".")[0] == "tensorflow"]
    assert not loaded, loaded
    try:
        import tensorflow
    except ImportError:
        pass
    else:
        raise AssertionError("the blocker does not block")

    import jax.numpy as jnp, torch
    from tb_wur_plugin.writer import SummaryWriter
    logdir = sys.argv[1]
    with SummaryWriter(os.path.join(logdir, "no_tf_writer")) as writer:
        writer.add_ratios({"a/w": 1e-3, "a/b": 2e-3}, 0)
        writer.add_histograms({"a/w": np.float32([1e-3, 0.0, np.inf])}, 0)
        writer.add_learning_rate(0.5, 0)

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tb_wur_plugin.torch.watch(optimizer, model, os.path.join(logdir, "no_tf_torch"),
                                   every=1, histograms=True):
        for _ in range(2):
            model(torch.ones(4, 3)).sum().backward()
            optimizer.step()

    params = {"w": jnp.ones((2, 2)), "b": [jnp.ones(2)]}
    updates = {"w": jnp.full((2, 2), 1e-3), "b": [jnp.full(2, 2e-3)]}
    with SummaryWriter(os.path.join(logdir, "no_tf_jax")) as writer:
        assert tb_wur_plugin.jax.log_update_ratios(writer, params, updates, 0, histograms=True)
    loaded = [m for m in sys.modules if m.split(".")[0] == "tensorflow"]
    assert not loaded, loaded
    print("no tensorflow")
    """
)


def _train_with_watch(logdir: str):
    """watch (TensorFlow) over STEPS steps with histograms and a learning rate; returns the
    weights before and after each step (float32)."""
    rng = np.random.default_rng(0)
    variables = {
        tag: tf.Variable(
            np.zeros(shape, np.float32) if tag.endswith("bias") else rng.normal(size=shape)
            .astype(np.float32), name=tag)
        for tag, shape in SHAPES.items()
    }
    history = []
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for step in range(STEPS):
            before = {tag: v.numpy() for tag, v in variables.items()}
            with wur_summary.watch(list(variables.values()), step=step, histograms=True):
                if step != SKIPPED:
                    for v in variables.values():
                        v.assign_add(rng.normal(size=v.shape).astype(np.float32) * 1e-3)
            wur_summary.learning_rate(0.01 * (step + 1), step=step)
            history.append((before, {tag: v.numpy() for tag, v in variables.items()}))
    writer.close()
    return history


def _write_the_same(logdir: str, tf_logdir: str, history) -> None:
    """The same values through SummaryWriter: the ratios watch stored, the elementwise
    ratios of the same weights (float32, bucketed in numpy), the same learning rates."""
    stored = read_events(tf_logdir)
    with SummaryWriter(logdir) as writer:
        for step, (before, after) in enumerate(history):
            ratios = {tag: float(dict((s, v) for s, v, _ in stored[tag])[step]) for tag in SHAPES}
            writer.add_ratios(
                ratios, step,
                descriptions={t: ratio_description(t, SHAPES[t], "float32") for t in SHAPES},
                shapes=SHAPES,
            )
            elementwise = {}
            for tag in SHAPES:
                change = after[tag] - before[tag]
                with np.errstate(divide="ignore", invalid="ignore"):
                    elementwise[tag] = np.abs(np.where(change == 0, 0, change / before[tag]))
            writer.add_histograms(
                elementwise, step,
                descriptions={t: histogram_description(t, SHAPES[t], "float32") for t in SHAPES},
            )
            writer.add_learning_rate(0.01 * (step + 1), step)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("writer_runs"))
    history = _train_with_watch(os.path.join(logdir, "watch"))
    _write_the_same(os.path.join(logdir, "writer"), os.path.join(logdir, "watch"), history)
    no_tf = subprocess.run(
        [sys.executable, "-c", NO_TF_SCRIPT, logdir], capture_output=True, text=True,
        timeout=300,
    )
    last = {"watch": STEPS - 1, "writer": STEPS - 1}
    if no_tf.returncode == 0:
        last.update(no_tf_writer=0, no_tf_torch=1, no_tf_jax=0)
    with both_loaders(logdir, last) as servers:
        yield logdir, history, servers, no_tf


def _without_wall_times(value):
    """`value` (JSON) with every wall time taken out, and the run names made equal."""
    if isinstance(value, dict):
        return {
            k: _without_wall_times(v) for k, v in value.items()
            if k not in ("wall_times", "wall_time")
        } | ({"run": "RUN"} if "run" in value else {})
    if isinstance(value, list):
        return [_without_wall_times(v) for v in value]
    return value


def _route(server, path: str, run: str):
    status, headers, body = server.get(path.format(run=run))
    assert status == 200, (path, run, body[:300])
    return body


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_every_route_answers_the_same_for_watch_and_the_writer(served, loader):
    _, _, servers, _ = served
    server = servers[loader]
    runs = {r["run"]: r for r in server.get_json("/data/plugin/wur/runs")["runs"]}
    assert _without_wall_times(runs["watch"]) == _without_wall_times(runs["writer"])
    assert runs["writer"]["skipped_at"] == [SKIPPED] and runs["writer"]["has_learning_rate"]
    assert [layer["tag"] for layer in runs["writer"]["layers"]] == list(SHAPES)

    json_routes = [
        "/data/plugin/wur/export?run={run}&format=json",
        "/data/plugin/wur/flags?run={run}",
        *(f"/data/plugin/wur/histograms?run={{run}}&tag={tag}" for tag in SHAPES),
        *(f"/data/plugin/wur/series?run={{run}}&tag={tag}"
          for tag in [*SHAPES, metadata.SKIPPED_STEP_TAG, metadata.LEARNING_RATE_TAG]),
    ]
    for path in json_routes:
        answers = [json.loads(_route(server, path, run)) for run in ("watch", "writer")]
        if "export" in path:  # {tag: [[wall_time, step, ratio], ...]}
            answers = [{t: [p[1:] for p in points] for t, points in a.items()} for a in answers]
        assert _without_wall_times(answers[0]) == _without_wall_times(answers[1]), path

    csvs = [
        [row[:2] + row[3:] for row in csv.reader(io.StringIO(_route(
            server, "/data/plugin/wur/export?run={run}&format=csv", run).decode()))]
        for run in ("watch", "writer")
    ]
    assert csvs[0] == csvs[1] and len(csvs[0]) == 1 + STEPS * len(SHAPES)

    from tb_wur_plugin.web import heatmap_wire

    heatmaps = [heatmap_wire.unpack(_route(server, "/data/plugin/wur/heatmap?run={run}", run))
                for run in ("watch", "writer")]
    assert _without_wall_times(heatmaps[0][0]) == _without_wall_times(heatmaps[1][0])
    assert heatmaps[0][1].keys() == heatmaps[1][1].keys()
    for name in heatmaps[0][1]:
        np.testing.assert_array_equal(heatmaps[0][1][name], heatmaps[1][1][name])


def test_the_events_are_watch_s_but_for_wall_times(served):
    logdir, _, _, _ = served
    watch, writer = read_events(os.path.join(logdir, "watch")), read_events(
        os.path.join(logdir, "writer"))
    assert watch.keys() == writer.keys()
    for tag in watch:
        assert [s for s, _, _ in watch[tag]] == [s for s, _, _ in writer[tag]], tag
        for (_, a, content_a), (_, b, content_b) in zip(watch[tag], writer[tag]):
            assert a.dtype == b.dtype and a.shape == b.shape and content_a == content_b, tag
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_without_tensorflow_the_modules_import_and_write(served, loader):
    _, _, servers, no_tf = served
    assert no_tf.returncode == 0, no_tf.stderr[-3000:]
    assert "no tensorflow" in no_tf.stdout
    server = servers[loader]
    assert export(server, "no_tf_writer") == {"a/w": {0: float(np.float32(1e-3))},
                                              "a/b": {0: float(np.float32(2e-3))}}
    torch_ratios = export(server, "no_tf_torch")
    assert list(torch_ratios) == ["weight", "bias"] and all(
        sorted(steps) == [0, 1] and all(r > 0 for r in steps.values())
        for steps in torch_ratios.values())
    np.testing.assert_allclose(
        [export(server, "no_tf_jax")[t][0] for t in ("b/0", "w")], [2e-3, 1e-3], rtol=1e-6)
    hist = server.get_json("/data/plugin/wur/histograms?run=no_tf_writer&tag=a/w")["counts"][0]
    assert hist == reference_buckets(np.float32([1e-3, 0.0, np.inf])).tolist()


# --- without servers ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_numpy_bucketing_is_the_tensorflow_bucketing(dtype):
    finfo = np.finfo(dtype)
    with np.errstate(over="ignore"):  # float16: edges above its range are +inf
        edges = metadata.HISTOGRAM_EDGES.astype(dtype)
        values = np.concatenate([
            edges, np.nextafter(edges, dtype(0)), np.nextafter(edges, dtype(np.inf)),
            [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, finfo.smallest_subnormal, finfo.max],
            np.random.default_rng(0).lognormal(-7, 6, 20_000),
        ]).astype(dtype)
    want = bucketing.bucket_counts(tf.constant(values)).numpy()
    got = numpy_math.bucket_counts(values)
    assert got.dtype == np.int64 and got.shape == (metadata.NUM_BUCKETS,)
    np.testing.assert_array_equal(got, want)
    assert numpy_math.bucket_counts(np.zeros((0, 3), dtype)).sum() == 0


def test_numpy_bucketing_counts_in_chunks(monkeypatch):
    monkeypatch.setattr(numpy_math, "CHUNK_ELEMENTS", 7)
    values = np.random.default_rng(1).lognormal(-5, 4, (13, 5)).astype(np.float32)
    np.testing.assert_array_equal(numpy_math.bucket_counts(values), reference_buckets(values))


def test_stored_scalars_are_float32_and_never_round_to_zero():
    assert to_stored_scalar(1e-50) == np.finfo(np.float32).smallest_subnormal
    assert to_stored_scalar(0.0) == 0 and to_stored_scalar(1e300) == np.inf
    assert to_stored_scalar(1e-3) == np.float32(1e-3)
    assert math.isnan(to_stored_scalar(math.nan))


def test_ratios_from_norms_follow_the_conventions():
    got = ratios_from_norms([1.0, 0.0, 1.0, 0.0, np.nan, 1.0, np.inf],
                            [2.0, 0.0, 0.0, 3.0, 1.0, np.inf, 1.0])
    np.testing.assert_array_equal(got, [0.5, 0.0, np.inf, 0.0, np.nan, np.nan, np.nan])


def test_each_event_is_on_disk_when_added(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    writer.add_ratios({"w": 0.5}, 7)
    events = list(event_file_loader.EventFileLoader(writer.path).Load())  # still open
    assert [e.step for e in events if e.summary.value] == [7]
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.add_ratios({"w": 0.5}, 8)


def test_an_explicit_skipped_marker_wins(tmp_path):
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_ratios({"w": 0.5}, 0, skipped=True)
        writer.add_ratios({"w": 0.0}, 1, skipped=False)
        writer.add_ratios({"w": 0.0}, 2)
    marker = read_events(str(tmp_path))[metadata.SKIPPED_STEP_TAG]
    assert [(s, float(v)) for s, v, _ in marker] == [(0, 1.0), (1, 0.0), (2, 1.0)]


@pytest.mark.parametrize("packed", [True, False])
def test_spectral_ratios_are_a_packed_series_of_their_own(tmp_path, packed):
    with SummaryWriter(str(tmp_path), packed=packed) as writer:
        writer.add_ratios({"w": 0.5, "b": 0.25}, 0, shapes={"w": (3, 2), "b": (2,)})
        writer.add_ratios({"w": 0.125}, 0, shapes={"w": (3, 2)}, metric="spectral")
        writer.add_ratios({"w": 0.0}, 1, shapes={"w": (3, 2)}, metric="spectral")
    run = read_packed(str(tmp_path))
    assert run.spectral == {"w": [(0, np.float32(0.125)), (1, np.float32(0.0))]}
    (content,) = [c for c in run.contents.values()
                  if c["kind"] == metadata.KIND_PACKED_SPECTRAL]
    assert content["layers"] == [{
        "tag": "w", "shape": [3, 2],
        "description": metadata.spectral_description("w", None)}]
    tags = [t for t, c in run.contents.items() if c["kind"] == metadata.KIND_PACKED_SPECTRAL]
    assert all(t.startswith("_wur/spectral/") for t in tags)
    # the Frobenius ratios are untouched by the spectral ones
    assert [float(v) for _, v, _ in read_events(str(tmp_path))["w"]] == [0.5]


def test_writers_in_one_directory_get_their_own_files(tmp_path):
    first, second = SummaryWriter(tmp_path), SummaryWriter(str(tmp_path))
    assert first.path != second.path
    first.close()
    second.close()



def test_files_opened_later_sort_later(tmp_path, monkeypatch):
    """TensorBoard's loaders read a run's files in name order: 12 writers opened in the same
    second (the file numbers cross from 9 to 10) are read in the order they were opened."""
    from tb_wur_plugin.event_write import summary_writer

    monkeypatch.setattr(summary_writer.time, "time", lambda: 1.7e9)
    paths = []
    for step in range(12):
        with SummaryWriter(tmp_path) as writer:
            writer.add_ratios({"w": 0.5}, step)
        paths.append(writer.path)
    assert sorted(paths) == paths
    steps = [e.step for path in sorted(paths) for e in event_file_loader.EventFileLoader(path).Load()
             if e.summary.value]
    assert steps == list(range(12))

def test_a_url_logdir_goes_through_gfile():
    logdir = "ram://wur_writer_test/run"
    with SummaryWriter(logdir) as writer:
        writer.add_ratios({"w": 0.25}, 3)
    assert [(s, float(v)) for s, v, _ in read_events(logdir)["w"]] == [(3, 0.25)]


class Scalar:
    def item(self):
        return 0.5

    def __array__(self, dtype=None, copy=None):
        raise TypeError("on an accelerator")


@pytest.mark.parametrize(
    "call,error,message",
    [
        (lambda w: w.add_ratios({"_wur/x": 1.0}, 0), ValueError, "reserved"),
        (lambda w: w.add_ratios({"": 1.0}, 0), ValueError, "empty"),
        (lambda w: w.add_ratios({3: 1.0}, 0), TypeError, "str"),
        (lambda w: w.add_ratios({}, 0), ValueError, "empty"),
        (lambda w: w.add_ratios([("w", 1.0)], 0), TypeError, "mapping"),
        (lambda w: w.add_ratios({"w": "1"}, 0), TypeError, "real number"),
        (lambda w: w.add_ratios({"w": True}, 0), TypeError, "real number"),
        (lambda w: w.add_ratios({"w": None}, 0), TypeError, "real number"),
        (lambda w: w.add_ratios({"w": 1j}, 0), TypeError, "real number"),
        (lambda w: w.add_ratios({"w": [1.0, 2.0]}, 0), ValueError, "scalar"),
        (lambda w: w.add_ratios({"w": 1.0}, 1.5), TypeError, "step"),
        (lambda w: w.add_ratios({"w": 1.0}, True), TypeError, "step"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, skipped=1), TypeError, "skipped"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, metric="nuclear"), ValueError, "metric"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, shapes={"w": (2, -1)}), ValueError,
         "shape of 'w'.*non-negative"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, shapes={"w": (2, 1.5)}), TypeError,
         "shape of 'w'.*ints"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, shapes={"w": (2, True)}), TypeError,
         "shape of 'w'.*ints"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, shapes={"w": "ab"}), TypeError, "shape of 'w'"),
        (lambda w: w.add_ratios({"w": 1.0}, 0, shapes=[("w", (2,))]), TypeError, "mapping"),
        (lambda w: w.add_histograms({"w": np.arange(3)}, 0), TypeError, "floating"),
        (lambda w: w.add_histograms({"w": 1.0}, 0), TypeError, "floating"),
        (lambda w: w.add_histograms({"_wur/w": [1.0]}, 0), ValueError, "reserved"),
        (lambda w: w.add_learning_rate("0.1", 0), TypeError, "real number"),
        (lambda w: w.add_learning_rate(np.ones(2), 0), ValueError, "scalar"),
    ],
)
def test_bad_input_raises_clear_errors(tmp_path, call, error, message):
    with SummaryWriter(str(tmp_path)) as writer:
        with pytest.raises(error, match=message):
            call(writer)


def test_the_last_calls_layers_are_checked_again_where_they_changed(tmp_path):
    """A writer takes the last call's checked shapes and descriptions again for the same
    layers (a face writes the same ones at every step), and checks and writes anew what
    changed: a shape list changed in place, a description; a bad shape or tag after good
    ones of the same value is still an error."""
    shape = [3, 2]
    with SummaryWriter(str(tmp_path)) as writer:
        for step in range(2):
            writer.add_ratios({"w": 0.5, "b": 0.25}, step, shapes={"w": shape, "b": (2,)})
        shape[0] = 4  # the same list, changed in place
        writer.add_ratios({"w": 0.5, "b": 0.25}, 2, shapes={"w": shape, "b": (2,)})
        for step in (3, 4):  # with spectral ratios between (the last call of each kind kept)
            writer.add_ratios({"w": 0.5, "b": 0.25}, step, shapes={"w": (4, 2), "b": (2,)},
                              descriptions={"b": "the bias"})
            writer.add_ratios({"w": 0.125}, step, shapes={"w": (4, 2)}, metric="spectral")
        writer.add_ratios({"w": 0.5, "b": 0.25}, 5, shapes={"w": (4, 2), "b": (2,)})
        bad_shapes = [((2.0,), TypeError), ((True,), TypeError), ((-2,), ValueError)]
        for step, (bad, error) in enumerate(bad_shapes, start=6):  # after the same, good
            with pytest.raises(error, match="shape of 'b'"):
                writer.add_ratios({"w": 0.5, "b": 0.25}, step, shapes={"w": (4, 2), "b": bad})
            writer.add_ratios({"w": 0.5, "b": 0.25}, step, shapes={"w": (4, 2), "b": (2,)})
        with pytest.raises(ValueError, match="reserved"):
            writer.add_ratios({"w": 0.5, "_wur/b": 0.25}, 9, shapes={"w": (4, 2), "b": (2,)})
    contents = read_packed(str(tmp_path)).contents
    layers_at = {
        event.step: [(layer.tag, layer.shape, layer.description)
                     for layer in metadata.packed_layers(contents[value.tag])]
        for path in event_files(str(tmp_path)) for event in load_events(path)
        for value in event.summary.value
        if contents.get(value.tag, {}).get("kind") == metadata.KIND_PACKED_RATIOS}

    def layers(w_shape, b_description=None):
        return [("w", w_shape, ratio_description("w")),
                ("b", (2,), b_description or ratio_description("b"))]

    assert layers_at == {0: layers((3, 2)), 1: layers((3, 2)), 2: layers((4, 2)),
                         3: layers((4, 2), "the bias"), 4: layers((4, 2), "the bias"),
                         **{step: layers((4, 2)) for step in (5, 6, 7, 8)}}


def test_numbers_of_many_kinds_are_accepted(tmp_path):
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_ratios(
            {"a": 1, "b": np.float16(0.5), "c": np.array(0.25), "d": Scalar()}, np.int64(4))
    assert [float(v) for _, v, _ in
            (read_events(str(tmp_path))[t][0] for t in "abcd")] == [1.0, 0.5, 0.25, 0.5]


@pytest.mark.parametrize("size", [0, 1, 4, 5, 100, 2047, 2048, 2049, 20_000, 100_003])
def test_the_record_checksum_is_tensorboard_s(size):
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from tb_wur_plugin.event_write import event_file

    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    assert event_file.masked_crc32c(data) == masked_crc32c(data)


def test_negative_and_large_steps(tmp_path):
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_ratios({"w": 0.5}, -3)
        writer.add_ratios({"w": 0.5}, 2**40)
    assert [s for s, _, _ in read_events(str(tmp_path))["w"]] == [-3, 2**40]


def test_where_tensorflow_is_installed_a_local_write_loads_none(tmp_path):
    script = textwrap.dedent(
        """
        import sys
        from tb_wur_plugin.writer import SummaryWriter
        with SummaryWriter(sys.argv[1]) as writer:
            writer.add_ratios({"w": 0.5}, 0)
            writer.add_histograms({"w": [0.5]}, 0)
        print([m for m in sys.modules if m.split(".")[0] == "tensorflow"])
        """
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"

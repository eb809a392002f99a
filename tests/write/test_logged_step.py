"""The TensorFlow-free write path's shared pieces (`tb_wur_plugin.event_write`): the one entry
that writes a logged step (`LoggedStepWriter`), the skipped-step rule (`metadata.step_was_skipped`)
and the one checker of the watch arguments, which every face uses alike."""

from __future__ import annotations

import numpy as np
import pytest

from tb_wur_plugin import metadata
from tb_wur_plugin.event_write import (
    Counts,
    LoggedLayer,
    LoggedStep,
    LoggedStepWriter,
    SummaryWriter,
    summary_writer,
    watch_arguments,
)

LAYERS = [
    LoggedLayer("dense/kernel", (4, 3), "float32"),
    LoggedLayer("dense/bias", (3,), "float32"),
    LoggedLayer("out/kernel", (3, 2), "bfloat16"),
]


def _file_bytes(directory, write, monkeypatch) -> bytes:
    """The event file `write(writer)` makes in `directory`, at a frozen clock."""
    monkeypatch.setattr(summary_writer.time, "time", lambda: 1.7e9)
    with SummaryWriter(directory) as writer:
        write(writer)
    with open(writer.path, "rb") as f:
        return f.read()


def _as_watch_writes(writer, step, ratios, spectral, counts, rate, skipped):
    """What `LoggedStepWriter.write` is to write, spelled out with the writer's calls."""
    about = {layer.tag: layer for layer in LAYERS}

    def described(describe, tags):
        return {tag: describe(tag, about[tag].shape, about[tag].dtype) for tag in tags}

    writer.add_ratios(
        dict(zip(about, ratios)), step, skipped=skipped,
        descriptions=described(metadata.ratio_description, about),
        shapes={tag: layer.shape for tag, layer in about.items()},
    )
    writer.add_ratios(
        spectral, step, skipped=skipped,
        descriptions=described(metadata.spectral_description, spectral),
        shapes={tag: about[tag].shape for tag in spectral}, metric=metadata.METRIC_SPECTRAL,
    )
    writer.add_histograms(
        {tag: Counts(c) for tag, c in zip(about, counts)}, step,
        descriptions=described(metadata.histogram_description, about),
    )
    writer.add_learning_rate(rate, step)


@pytest.mark.parametrize(
    "ratios, skipped, marker",
    [
        ([1e-3, 2e-4, 5e-3], None, False),
        ([0.0, 0.0, 0.0], None, True),  # the rule: nothing moved, the step was skipped
        ([0.0, 0.0, 0.0], False, False),  # the face knows better
        ([1e-3, 0.0, 0.0], True, True),
    ],
)
def test_a_logged_step_is_written_with_descriptions_and_one_marker(
    tmp_path, monkeypatch, ratios, skipped, marker
):
    counts = np.zeros((3, metadata.NUM_BUCKETS), np.int64)
    counts[:, metadata.FIRST_BIN + 3] = [12, 3, 6]
    spectral = {2: 0.25, 0: 0.5}  # written in this order, as the face gives it
    logged = LoggedStep(7, LAYERS, np.array(ratios), spectral=spectral, histograms=counts,
                        learning_rate=1e-3, skipped=skipped)
    assert logged.was_skipped is marker

    written = _file_bytes(tmp_path / "entry", lambda w: LoggedStepWriter(w).write(logged),
                          monkeypatch)
    expected = _file_bytes(
        tmp_path / "calls",
        lambda w: _as_watch_writes(w, 7, ratios, {"out/kernel": 0.25, "dense/kernel": 0.5},
                                   counts, 1e-3, marker),
        monkeypatch,
    )
    assert written == expected


def test_a_logged_step_without_the_optional_series(tmp_path, monkeypatch):
    logged = LoggedStep(3, LAYERS, [1e-3, 2e-3, 3e-3], spectral={})  # no matrix had one

    def by_hand(writer):
        writer.add_ratios(
            {layer.tag: r for layer, r in zip(LAYERS, [1e-3, 2e-3, 3e-3])}, 3, skipped=False,
            descriptions={
                layer.tag: metadata.ratio_description(layer.tag, layer.shape, layer.dtype)
                for layer in LAYERS
            },
            shapes={layer.tag: layer.shape for layer in LAYERS},
        )

    assert _file_bytes(tmp_path / "entry", lambda w: LoggedStepWriter(w).write(logged),
                       monkeypatch) == _file_bytes(tmp_path / "calls", by_hand, monkeypatch)


def test_steps_whose_layers_change_are_described_as_they_are_then(tmp_path, monkeypatch):
    """One LoggedStepWriter, the layers changing between its steps (a layer added, one's
    dtype changed, back to the first set): each step as written by hand with that step's
    layers, spectral and histogram descriptions included."""
    added = [*LAYERS, LoggedLayer("head/kernel", (2, 5), "float32")]
    recast = [LAYERS[0], LAYERS[1], LoggedLayer("out/kernel", (3, 2), "float32")]
    steps = [(0, LAYERS), (1, LAYERS), (2, added), (3, recast), (4, LAYERS)]

    def logged(step, layers):
        counts = np.zeros((len(layers), metadata.NUM_BUCKETS), np.int64)
        counts[:, metadata.FIRST_BIN] = 1
        return LoggedStep(step, layers, [1e-3 * (i + 1) for i in range(len(layers))],
                          spectral={0: 0.5}, histograms=counts)

    def through_one_writer(writer):
        steps_writer = LoggedStepWriter(writer)
        for step, layers in steps:
            steps_writer.write(logged(step, layers))

    def by_hand(writer):
        for step, layers in steps:
            step_data = logged(step, layers)
            writer.add_ratios(
                {layer.tag: r for layer, r in zip(layers, step_data.ratios)}, step,
                skipped=False,
                descriptions={layer.tag: metadata.ratio_description(
                    layer.tag, layer.shape, layer.dtype) for layer in layers},
                shapes={layer.tag: layer.shape for layer in layers})
            writer.add_ratios(
                {layers[0].tag: 0.5}, step, skipped=False,
                descriptions={layers[0].tag: metadata.spectral_description(
                    layers[0].tag, layers[0].shape, layers[0].dtype)},
                shapes={layers[0].tag: layers[0].shape}, metric=metadata.METRIC_SPECTRAL)
            writer.add_histograms(
                {layer.tag: Counts(c) for layer, c in zip(layers, step_data.histograms)}, step,
                descriptions={layer.tag: metadata.histogram_description(
                    layer.tag, layer.shape, layer.dtype) for layer in layers})

    assert _file_bytes(tmp_path / "entry", through_one_writer, monkeypatch) == _file_bytes(
        tmp_path / "calls", by_hand, monkeypatch)


def test_a_layer_whose_kind_changes_is_refused_by_the_judgement(tmp_path):
    """The judgement keeps the kinds of the last shapes it saw: a tag seen as a matrix and
    then as a vector is refused, as the first time."""
    with SummaryWriter(tmp_path) as writer:
        writer.add_ratios({"w": 1e-3}, 0, shapes={"w": (4, 3)})
        writer.add_ratios({"w": 1e-3}, 1, shapes={"w": (4, 3)})
        with pytest.raises(ValueError, match="'w' was observed as a matrix, now vector"):
            writer.add_ratios({"w": 1e-3}, 2, shapes={"w": (3,)})


def test_the_skipped_rule():
    assert metadata.step_was_skipped(np.zeros(3))
    assert metadata.step_was_skipped(np.array([0.0, -0.0]))
    assert not metadata.step_was_skipped(np.array([0.0, 1e-300]))  # moved a little
    assert not metadata.step_was_skipped(np.array([0.0, np.nan]))  # not finite: not skipped
    assert not metadata.step_was_skipped(np.array([0.0, np.inf]))


def test_the_skipped_rule_in_tensorflow_is_the_same():
    tf = pytest.importorskip("tensorflow")
    for ratios in ([0.0, 0.0], [0.0, 1e-300], [0.0, np.nan]):
        in_graph = metadata.step_was_skipped(
            tf.constant(ratios, tf.float64), tf.reduce_all, tf.math.equal
        )
        assert bool(in_graph) == bool(metadata.step_was_skipped(np.array(ratios)))


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (dict(every=0), ValueError, "every must be >= 1, got 0"),
        (dict(every=-2), ValueError, "every must be >= 1, got -2"),
        (dict(every="3"), TypeError, "every must be an int >= 1, got '3'"),
        (dict(every=2.0), TypeError, "every must be an int >= 1, got 2.0"),
        (dict(every=True), TypeError, "every must be an int >= 1, got True"),
        (dict(histograms=1), TypeError, "histograms must be a bool, got 1"),
        (dict(spectral="yes"), TypeError, "spectral must be a bool, got 'yes'"),
    ],
)
def test_every_face_checks_the_watch_arguments_alike(tmp_path, arguments, error, message):
    """The same wrong value, the same error, whichever face it is given to."""
    given = dict(every=1, histograms=False, spectral=False) | arguments
    with pytest.raises(error) as checked:
        watch_arguments(**given)
    assert str(checked.value) == message

    torch = pytest.importorskip("torch")
    from tb_wur_plugin.torch import watch

    model = torch.nn.Linear(2, 1)
    with pytest.raises(error) as raised:
        watch(torch.optim.SGD(model.parameters(), lr=0.1), model, str(tmp_path), **given)
    assert str(raised.value) == message

    jnp = pytest.importorskip("jax.numpy")
    from tb_wur_plugin.jax import log_update_ratios

    with SummaryWriter(tmp_path / "jax") as writer, pytest.raises(error) as raised:
        log_update_ratios(writer, {"w": jnp.ones(2)}, {"w": jnp.ones(2)}, 0, **given)
    assert str(raised.value) == message


def test_the_watch_arguments_checked():
    assert watch_arguments(np.int64(5), True, False) == (5, True, False)
    assert type(watch_arguments(np.int64(5), True, False).every) is int
    assert watch_arguments(None, False, True, every_may_be_none=True).every is None
    with pytest.raises(TypeError, match=r"^update_freq must be an int >= 1 \(optimizer steps\)"):
        watch_arguments(None, False, False, every_name="update_freq",
                        every_unit="(optimizer steps)")
    with pytest.raises(ValueError, match=r"^every must be >= 1 or None, got 0$"):
        watch_arguments(0, False, False, every_may_be_none=True)

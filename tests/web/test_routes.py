"""Every route of the plugin over real event files, through the Python loader in-process."""

import csv
import io
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from backend import Backend
from out_of_order_runs import write_out_of_order_runs
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import metadata, wur_summary


def _write_runs(logdir):
    """alpha: a Keras model under watch with histograms and the learning rate, 12 steps.
    grown: a layer appears at step 6. special: hand-written ratios with 0, inf and NaN."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="first"), keras.layers.Dense(2, name="second")],
        name="net",
    )
    optimizer = keras.optimizers.SGD(0.05)
    x, y = tf.random.normal([8, 4]), tf.random.normal([8, 2])
    writer = tf.summary.create_file_writer(f"{logdir}/alpha")
    with writer.as_default():
        for _ in range(12):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            step = int(optimizer.iterations)
            wur_summary.learning_rate(0.05, step=step)
            with wur_summary.watch(model.trainable_variables, step=step, histograms=True):
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
    writer.close()

    writer = tf.summary.create_file_writer(f"{logdir}/grown")
    with writer.as_default():
        for step in range(0, 20, 2):
            wur_summary.scalar("base/kernel", 1e-3 * (1 + step), step=step)
            if step >= 6:
                wur_summary.scalar("added/kernel", 2e-2, step=step)
    writer.close()

    writer = tf.summary.create_file_writer(f"{logdir}/special")
    with writer.as_default():
        for step, value in enumerate([np.inf, 1.235e-3, 0.0, np.nan, 5e-2, 1.125]):
            wur_summary.scalar("odd/kernel", value, step=step)
            wur_summary.scalar("fine/kernel", 1e-3, step=step)
    writer.close()


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("logs"))
    _write_runs(logdir)
    return Backend(logdir)


def test_runs_lists_layers_in_model_order_with_their_series(backend):
    runs = {r["run"]: r for r in backend.json("runs")["runs"]}
    assert sorted(runs) == ["alpha", "grown", "special"]
    alpha = runs["alpha"]
    assert [l["tag"] for l in alpha["layers"]] == [
        "net/first/kernel", "net/first/bias", "net/second/kernel", "net/second/bias"
    ]
    assert alpha["layers"][0]["description"].endswith("shape [4, 3], float32")
    assert all(l["has_histograms"] for l in alpha["layers"])
    assert {(l["first_step"], l["last_step"], l["logged_steps"]) for l in alpha["layers"]} == {(0, 11, 12)}
    assert alpha["has_learning_rate"] and (alpha["first_step"], alpha["last_step"]) == (0, 11)
    grown = runs["grown"]
    assert [(l["tag"], l["first_step"]) for l in grown["layers"]] == [
        ("base/kernel", 0), ("added/kernel", 6)
    ]
    assert not grown["has_learning_rate"] and not grown["layers"][0]["has_histograms"]


def test_heatmap_one_column_per_step_with_exact_values(backend):
    header, arrays = backend.heatmap(run="alpha", columns=100)
    assert header["columns"] == 12 and header["reduction"] == "mean_log10"
    np.testing.assert_array_equal(arrays["column_first"], np.arange(12))
    np.testing.assert_array_equal(arrays["column_count"], np.ones(12))
    (run,) = header["runs"]
    assert run["run"] == "alpha" and len(run["tags"]) == 4
    codes = arrays[run["codes"]].reshape(4, 12)
    exported = json.loads(backend.get("export", run="alpha", format="json").get_data())
    for row, tag in enumerate(run["tags"]):
        values = [v for _, _, v in exported[tag]]
        shown = heatmap_wire.decode_cells(codes[row])
        for got, want in zip(shown, values):
            want = math.inf if want == "Infinity" else want
            assert got == want if math.isinf(want) else f"{got:.2e}" == f"{want:.2e}"


def test_heatmap_of_a_grown_model_has_explicit_gaps(backend):
    header, arrays = backend.heatmap(run="grown")
    (run,) = header["runs"]
    codes = arrays[run["codes"]].reshape(2, header["columns"])
    assert run["tags"] == ["base/kernel", "added/kernel"]
    assert list(codes[1][:3]) == [heatmap_wire.CODE_MISSING] * 3
    assert heatmap_wire.CODE_MISSING not in codes[0] and heatmap_wire.CODE_MISSING not in codes[1][3:]


def test_heatmap_special_values_are_kept(backend):
    header, arrays = backend.heatmap(run="special")
    (run,) = header["runs"]
    row = arrays[run["codes"]].reshape(2, 6)[run["tags"].index("odd/kernel")]
    assert [row[0], row[2], row[3]] == [heatmap_wire.CODE_INF, heatmap_wire.CODE_ZERO, heatmap_wire.CODE_NAN]
    shown = heatmap_wire.decode_cells(row)
    assert f"{shown[1]:.3g}" == "0.00123"  # 1.235e-3 is 0.0012349999... in binary
    assert f"{shown[5]:.3g}" == "1.13"  # 1.125 is a tie: up, as JavaScript's toPrecision


def test_heatmap_of_several_runs_shares_the_columns(backend):
    header, arrays = backend.heatmap(run=["grown", "special"], columns=1000)
    assert [r["run"] for r in header["runs"]] == ["grown", "special"]
    # steps 0..5 and 0, 2, ..., 18: one column per step, equal ranges for both runs
    np.testing.assert_array_equal(arrays["column_start"], np.arange(19))
    np.testing.assert_array_equal(arrays["column_count"], [1] * 7 + [0, 1] * 6)
    special = arrays[header["runs"][1]["codes"]].reshape(2, 19)
    assert list(special[0][6:]) == [heatmap_wire.CODE_MISSING] * 13  # after its last step
    assert not len(arrays[header["runs"][1]["held"]])
    # grown, logged every 2 steps, holds each ratio over the odd step after it
    grown = arrays[header["runs"][0]["codes"]].reshape(2, 19)
    assert heatmap_wire.CODE_MISSING not in grown[0]
    np.testing.assert_array_equal(grown[0][1::2], grown[0][0:-1:2])
    held = arrays[header["runs"][0]["held"]].reshape(-1, 3)
    held_from = arrays[header["runs"][0]["held_from"]]
    assert held.dtype == np.uint32 and held_from.dtype == np.float64
    # (row, first column, columns) held from step: base/kernel at every odd step; added/kernel
    # (from step 6) at 7, 9, ..., 17; nothing before its first step
    want = [(0, k, 1, k - 1) for k in range(1, 19, 2)] + [(1, k, 1, k - 1) for k in range(7, 19, 2)]
    assert [(*map(int, h), int(s)) for h, s in zip(held, held_from)] == want
    assert list(grown[1][:6]) == [heatmap_wire.CODE_MISSING] * 6


def test_heatmap_of_a_run_logged_every_second_step_has_a_column_per_logged_step(backend):
    header, arrays = backend.heatmap(run="grown")
    assert header["columns"] == 10
    np.testing.assert_array_equal(arrays["column_start"], np.arange(0, 20, 2))
    assert not len(arrays[header["runs"][0]["held"]])


@pytest.mark.parametrize("reduction", ["mean_log10", "max", "min", "last"])
def test_heatmap_of_a_range_between_two_logged_steps_is_one_column_of_held_cells(backend,
                                                                                reduction):
    """A range without a logged step (the run logs every second step) is one column: the
    layer that logged before and after it holds its step-2 ratio, the one added at step 6 is
    missing; by every reduction."""
    header, arrays = backend.heatmap(run="grown", start=3, end=3, reduction=reduction)
    assert header["columns"] == 1 and int(arrays["column_count"].sum()) == 0
    run = header["runs"][0]
    codes = arrays[run["codes"]]
    assert codes.shape == (2,) and codes[1] == heatmap_wire.CODE_MISSING
    assert codes[0] >= heatmap_wire.FIRST_VALUE_CODE
    assert list(arrays[run["held"]]) == [0, 0, 1] and list(arrays[run["held_from"]]) == [2]


def test_heatmap_of_the_widest_range(backend):
    header, arrays = backend.heatmap(run="alpha", start=-(2**62), end=2**62, columns=3)
    assert header["columns"] == 3 and int(arrays["column_count"].sum()) == 12


def test_heatmap_bins_to_the_requested_columns_and_zooms(backend):
    header, arrays = backend.heatmap(run="alpha", columns=5, reduction="max")
    assert header["columns"] == 4  # 12 steps in bins of ceil(12 / 5) = 3
    np.testing.assert_array_equal(arrays["column_start"], [0, 3, 6, 9])
    np.testing.assert_array_equal(arrays["column_count"], [3, 3, 3, 3])
    header, arrays = backend.heatmap(run="alpha", start=4, end=6)
    assert (header["start"], header["end"], header["columns"]) == (4, 6, 3)
    np.testing.assert_array_equal(arrays["column_first"], [4, 5, 6])


@pytest.mark.parametrize(
    "params,status,message",
    [
        ({}, 400, "missing parameter: run"),
        ({"run": "nope"}, 404, "no wur ratios in run 'nope'"),
        ({"run": ["alpha", "alpha"]}, 400, "only once"),
        ({"run": "alpha", "columns": "0"}, 400, "columns must be in"),
        ({"run": "alpha", "columns": "wide"}, 400, "columns must be an integer"),
        ({"run": "alpha", "columns": "99999999"}, 400, "columns must be in"),
        ({"run": "alpha", "start": "9", "end": "3"}, 400, "must not be after"),
        ({"run": "alpha", "start": "1e3"}, 400, "start must be an integer"),
        ({"run": "alpha", "end": str(2**63 - 1)}, 400, "end must be in"),
        ({"run": "alpha", "reduction": "median"}, 400, "reduction must be one of"),
        ({"run": "alpha", "reduction": ["max", "min"]}, 400, "given 2 times"),
    ],
)
def test_heatmap_bad_requests(backend, params, status, message):
    response = backend.get("heatmap", **params)
    assert response.status_code == status
    assert message in response.get_data(as_text=True)


def test_flags_report_out_of_band_and_non_finite_layers(backend):
    flags = backend.json("flags", run="special")
    (odd,) = flags["layers"]  # fine/kernel stays at 1e-3
    assert odd["tag"] == "odd/kernel" and (flags["low"], flags["high"]) == (None, None)
    assert (odd["reason"], odd["since"]) == ("nan", 3)
    assert odd["text"] == ("NaN: ratio NaN (the weights or their update are not finite) at 1 "
                           "logged steps in total, first at step 3")
    assert backend.json("flags", run="special", low="1e-4")["high"] == 1e-2  # the default edge
    assert (odd["nan_steps"], odd["first_nan_step"]) == (1, 3)
    assert (odd["inf_steps"], odd["first_inf_step"]) == (1, 0)
    assert (odd["below_steps"], odd["above_steps"]) == (1, 2)  # 0 at 2; 5e-2, 1.125 at 4, 5
    assert (odd["first_out_of_band_step"], odd["last_out_of_band_step"]) == (2, 5)
    assert odd["out_of_band_fraction"] == pytest.approx(3 / 6)
    narrow = backend.json("flags", run="special", low="1.1e-3", high="2e-3")
    assert [f["tag"] for f in narrow["layers"]] == ["odd/kernel", "fine/kernel"]
    assert narrow["layers"][1]["out_of_band_fraction"] == 1.0


@pytest.mark.parametrize(
    "params,message",
    [
        ({"run": "special", "low": "-1"}, "positive finite"),
        ({"run": "special", "low": "nan"}, "positive finite"),
        ({"run": "special", "high": "inf"}, "positive finite"),
        ({"run": "special", "low": "1e-2", "high": "1e-3"}, "must be below"),
        ({"run": "special", "low": "low"}, "must be a number"),
        ({}, "missing parameter: run"),
    ],
)
def test_flags_bad_requests(backend, params, message):
    response = backend.get("flags", **params)
    assert response.status_code == 400 and message in response.get_data(as_text=True)


def test_series_of_a_ratio_and_of_the_learning_rate(backend):
    series = backend.json("series", run="special", tag="odd/kernel")
    assert series["kind"] == "ratio" and series["steps"] == list(range(6))
    assert series["values"][:4] == ["Infinity", float(np.float32(1.235e-3)), 0.0, "NaN"]
    rate = backend.json("series", run="alpha", tag=metadata.LEARNING_RATE_TAG)
    assert rate["kind"] == "learning_rate" and rate["values"] == [float(np.float32(0.05))] * 12
    assert backend.get("series", run="alpha", tag="missing").status_code == 404
    assert backend.get("series", run="nope", tag="odd/kernel").status_code == 404
    assert backend.get("series", run="alpha").status_code == 400


def test_histograms_of_a_layer(backend):
    data = backend.json("histograms", run="alpha", tag="net/first/kernel")
    assert data["steps"] == list(range(12))
    assert all(sum(c) == 12 for c in data["counts"])  # a 4 x 3 kernel
    assert len(data["edges"]) == metadata.NUM_BINS + 1
    bias = backend.json("histograms", run="alpha", tag="net/first/bias")
    assert bias["counts"][0][bias["buckets"]["inf"]] == 3
    assert backend.get("histograms", run="grown", tag="base/kernel").status_code == 404


def test_export_csv_has_every_step_of_every_ratio_tag(backend):
    response = backend.get("export", run="special", format="csv")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/csv")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    rows = list(csv.reader(io.StringIO(response.get_data(as_text=True))))
    assert rows[0] == ["tag", "step", "wall_time", "ratio"]
    odd = [r for r in rows[1:] if r[0] == "odd/kernel"]
    assert [r[1] for r in odd] == [str(s) for s in range(6)]
    # float32 ratios with 9 significant digits: each names its float32 exactly
    assert [r[3] for r in odd] == ["inf", "0.00123499997", "0", "nan", "0.0500000007", "1.125"]
    assert [np.float32(float(r[3])) for r in odd[1:5:3]] == [np.float32(1.235e-3), np.float32(5e-2)]
    assert len(rows) == 1 + 12
    alpha = list(csv.reader(io.StringIO(backend.get("export", run="alpha", format="csv").get_data(as_text=True))))
    assert len(alpha) == 1 + 4 * 12
    assert not any(metadata.is_reserved_tag(r[0]) for r in alpha[1:])


def test_export_json_matches_the_contract(backend):
    data = json.loads(backend.get("export", run="special", format="json").get_data())
    assert set(data) == {"odd/kernel", "fine/kernel"}
    assert [row[1] for row in data["odd/kernel"]] == list(range(6))
    assert [row[2] for row in data["odd/kernel"]][:4] == ["Infinity", float(np.float32(0.001235)), 0.0, "NaN"]
    assert all(isinstance(row[0], float) for row in data["fine/kernel"])


@pytest.mark.parametrize(
    "params,status",
    [({"run": "nope", "format": "csv"}, 404), ({"run": "special"}, 400),
     ({"run": "special", "format": "xml"}, 400), ({"format": "csv"}, 400)],
)
def test_export_bad_requests(backend, params, status):
    assert backend.get("export", **params).status_code == status


def test_index_js_is_served_as_a_module(backend):
    response = backend.get("index.js")
    assert response.status_code == 200 and response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Type"].startswith("text/javascript")


# Random and malformed requests to every route: test_fuzz.py (10,000 of them).


# --- skipped steps ------------------------------------------------------------------------

SKIPPED = (2, 5)  # steps whose gradients are not finite: the loss scaler skips the update


def _write_skipping_runs(logdir):
    """skipping: watch around a LossScaleOptimizer, 8 steps counted by the loop (so a skipped
    step keeps its number), non-finite gradients at SKIPPED. retried: the step is
    `optimizer.iterations`, so the retry of a skipped step is written at the same step.
    plain: ratios written by hand, no marker."""
    for run in ("skipping", "retried"):
        variables = [
            tf.Variable(np.ones((3, 2), np.float32), name="net/w"),
            tf.Variable(np.full(2, 0.5, np.float32), name="net/b"),
        ]
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-3))
        writer = tf.summary.create_file_writer(f"{logdir}/{run}")
        with writer.as_default():
            for count in range(8):
                bad = count in SKIPPED
                grads = [tf.fill((3, 2), np.inf) if bad else tf.ones((3, 2)), tf.ones(2)]
                step = count if run == "skipping" else optimizer.iterations
                with wur_summary.watch(variables, step=step):
                    optimizer.apply([optimizer.scale_loss(g) for g in grads], variables)
        writer.close()
    writer = tf.summary.create_file_writer(f"{logdir}/plain")
    with writer.as_default():
        for step in range(4):
            wur_summary.scalar("net/w", 0.0 if step == 1 else 1e-3, step=step)
    writer.close()


@pytest.fixture(scope="module")
def skipping(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("skipping"))
    _write_skipping_runs(logdir)
    return Backend(logdir)


def test_runs_count_the_skipped_steps(skipping):
    runs = {r["run"]: r for r in skipping.json("runs")["runs"]}
    assert [l["tag"] for l in runs["skipping"]["layers"]] == ["net/w", "net/b"]
    assert runs["skipping"]["skipped_steps"] == len(SKIPPED)
    # the retry, written last at the same step, is what the tab shows: nothing skipped
    assert runs["retried"]["skipped_steps"] == 0 and runs["retried"]["last_step"] == 5
    assert runs["plain"]["skipped_steps"] == 0  # no marker: a zero ratio is just a zero


def test_heatmap_counts_the_skipped_steps_of_each_column(skipping):
    header, arrays = skipping.heatmap(run=["skipping", "plain"])
    skipping_run, plain_run = header["runs"]
    skipped = arrays[skipping_run["skipped"]]
    assert skipped.dtype == np.uint32
    assert list(skipped) == [int(step in SKIPPED) for step in range(8)]
    assert list(arrays[plain_run["skipped"]]) == [0] * 8
    codes = arrays[skipping_run["codes"]].reshape(2, 8)
    # the skipped steps hold ratio 0 in every layer; the others move by the learning rate
    for step in range(8):
        if step in SKIPPED:
            assert list(codes[:, step]) == [heatmap_wire.CODE_ZERO] * 2
        else:
            assert heatmap_wire.decode_cells(codes[:, step]) == pytest.approx([1e-3, 2e-3], rel=0.02)
    # binned: steps 0-2, 3-5, 6-7
    header, arrays = skipping.heatmap(run="skipping", columns=3)
    assert list(arrays["column_count"]) == [3, 3, 2]
    assert list(arrays[header["runs"][0]["skipped"]]) == [1, 1, 0]
    # zoomed: only the skipped steps inside the range
    header, arrays = skipping.heatmap(run="skipping", start=3, end=7)
    assert list(arrays[header["runs"][0]["skipped"]]) == [0, 0, 1, 0, 0]
    header, arrays = skipping.heatmap(run="retried")
    assert not arrays[header["runs"][0]["skipped"]].any()


def test_skipped_steps_are_not_judged_stalled(skipping):
    # every ratio is in the default band except at the skipped steps, where all are 0
    assert skipping.json("flags", run="skipping")["layers"] == []
    # a zero of a step that was not marked skipped still counts as below the band: one
    # step out is no streak of the default patience (5), but is one of patience 1
    assert skipping.json("flags", run="plain")["layers"] == []
    # (the band rule: the default judgement has no peers for a run of one layer)
    assert skipping.json("flags", run="plain", patience="1")["layers"] == []
    (plain,) = skipping.json("flags", run="plain", patience="1", low="1e-4")["layers"]
    assert (plain["below_steps"], plain["skipped_steps"]) == (1, 0)
    assert plain["first_out_of_band_step"] == 1
    assert (plain["since"], plain["reason"], plain["streak_length"]) == (1, "below_band", 1)
    # a band that w (1e-3) leaves: judged over the 6 applied updates
    narrow = {f["tag"]: f for f in skipping.json("flags", run="skipping", low="1.5e-3")["layers"]}
    assert list(narrow) == ["net/w"]
    w = narrow["net/w"]
    assert (w["logged_steps"], w["skipped_steps"], w["below_steps"]) == (8, 2, 6)
    assert w["out_of_band_fraction"] == 1.0
    assert w["first_out_of_band_step"] == 0 and w["last_out_of_band_step"] == 7


def test_series_of_the_skipped_step_marker(skipping):
    series = skipping.json("series", run="skipping", tag=metadata.SKIPPED_STEP_TAG)
    assert series["kind"] == metadata.KIND_SKIPPED_STEP
    assert series["steps"] == list(range(8))
    assert series["values"] == [float(step in SKIPPED) for step in range(8)]
    exported = json.loads(skipping.get("export", run="skipping", format="json").get_data())
    assert set(exported) == {"net/w", "net/b"}  # the marker is not a ratio


def test_runs_list_the_skipped_steps(skipping):
    runs = {r["run"]: r for r in skipping.json("runs")["runs"]}
    assert runs["skipping"]["skipped_at"] == list(SKIPPED)
    assert runs["retried"]["skipped_at"] == [] and runs["plain"]["skipped_at"] == []
    assert all(r["skipped_steps"] == len(r["skipped_at"]) for r in runs.values())


def test_runs_are_the_same_before_and_after_a_heatmap(skipping):
    """/runs answers from a step index it caches, of the matrix it reads or a heatmap read."""
    runs = sorted(r["run"] for r in skipping.json("runs")["runs"])
    first = Backend(skipping.logdir)
    listed = first.json("runs")
    first.heatmap(run=runs)
    assert first.json("runs") == listed
    second = Backend(skipping.logdir)
    second.heatmap(run=runs)
    assert second.json("runs") == listed


def test_runs_then_heatmaps_read_each_run_once(skipping):
    fresh = Backend(skipping.logdir)
    data = fresh.plugin._data
    reads = []

    def counted(read):
        def counting(ctx, experiment, run, tags):
            reads.append((run, tuple(tags)))
            return read(ctx, experiment, run, tags)
        return counting

    data.read_scalar_columns = counted(data.read_scalar_columns)
    data.read_tensor_columns = counted(data.read_tensor_columns)
    runs = [r["run"] for r in fresh.json("runs")["runs"]]
    first_pass = list(reads)
    fresh.heatmap(run=runs)
    fresh.json("flags", run=runs[0])
    fresh.json("runs")
    assert reads == first_pass  # nothing read again
    assert sorted({run for run, _ in reads}) == sorted(runs)
    assert len(set(reads)) == len(reads)  # no series read twice


def test_runs_list_a_run_without_ratios(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "rate_only"))
    with writer.as_default():
        wur_summary.learning_rate(0.1, step=3)
    writer.close()
    (run,) = Backend(str(tmp_path)).json("runs")["runs"]
    assert run == {"run": "rate_only", "layers": [], "first_step": None, "last_step": None,
                   "has_learning_rate": True, "has_line_search": False,
                   "skipped_steps": 0, "skipped_at": [], "metrics": [], "damaged": []}


# --- what the wire names, so that the client repeats no rule of the backend -----------------


def test_runs_name_the_reserved_tags(backend):
    reserved = backend.json("runs")["reserved_tags"]
    assert reserved == {
        "learning_rate": metadata.LEARNING_RATE_TAG,
        "skipped_step": metadata.SKIPPED_STEP_TAG,
        "histogram_prefix": metadata.histogram_tag(""),
    }
    assert metadata.layer_of_histogram_tag(reserved["histogram_prefix"] + "a/b") == "a/b"
    assert all(metadata.is_reserved_tag(tag) for tag in reserved.values())


def _decode_with(codes_header: dict, codes: np.ndarray) -> np.ndarray:
    """What a client decodes knowing only the header's `codes` object and http_api.md: the
    decimal "{m}e{k}" read with correct rounding (Python's float() of the text)."""
    h = codes_header
    special = {h["missing"]: math.nan, h["nan"]: math.nan, h["inf"]: math.inf,
               h["zero"]: 0.0, h["tiny"]: 0.0, h["huge"]: math.inf}
    last = h["first_value"] + (h["max_exponent"] - h["min_exponent"] + 1) * h["mantissas"] - 1
    values = []
    for code in codes.tolist():
        if code in special:
            values.append(special[code])
            continue
        assert h["first_value"] <= code <= last
        index = code - h["first_value"]
        mantissa = index % h["mantissas"] + 100
        exponent = index // h["mantissas"] + h["min_exponent"]
        values.append(float(f"{mantissa}e{exponent}"))
    return np.array(values)


def test_heatmap_header_carries_every_constant_of_the_decoder(backend):
    header, _ = backend.heatmap(run="special")
    codes_header = header["codes"]
    assert codes_header == heatmap_wire.CODES
    assert codes_header["max_exponent"] == heatmap_wire.MAX_EXPONENT
    last = codes_header["first_value"] + (
        codes_header["max_exponent"] - codes_header["min_exponent"] + 1
    ) * codes_header["mantissas"] - 1
    every_code = np.arange(last + 1, dtype=np.uint16)
    np.testing.assert_array_equal(
        _decode_with(codes_header, every_code), heatmap_wire.decode_cells(every_code)
    )
    # the largest code is the largest value encoded; anything above it is `huge`
    extremes = np.array([9.99e23, 1e24, 1e-40, 9.9e-41])
    encoded = heatmap_wire.encode_cells(extremes, np.zeros(4, bool))
    assert encoded.tolist() == [last, codes_header["huge"], codes_header["first_value"],
                                codes_header["tiny"]]
    assert _decode_with(codes_header, encoded[:1])[0] == pytest.approx(9.99e23)


# --- steps written out of order ---------------------------------------------------------------


def test_series_is_by_step_as_the_export(tmp_path):
    write_out_of_order_runs(str(tmp_path))
    backend = Backend(str(tmp_path))
    shuffled = backend.json("series", run="shuffled", tag="net/w")
    assert shuffled["steps"] == [2, 5, 9]
    assert shuffled["values"] == [float(np.float32(1e-3 * (1 + s))) for s in (2, 5, 9)]
    restarted = backend.json("series", run="restarted", tag="net/w")
    assert restarted["steps"] == sorted(restarted["steps"])
    assert restarted["steps"] == [0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11]
    first, second = float(np.float32(1e-3)), float(np.float32(2e-3))
    assert restarted["values"][4:6] == [first, second]  # a step written twice: in write order
    for run in ("shuffled", "restarted"):
        series = backend.json("series", run=run, tag="net/w")
        exported = json.loads(backend.get("export", run=run, format="json").get_data())["net/w"]
        assert [(s, v) for _, s, v in exported] == list(zip(series["steps"], series["values"]))
        assert [w for w, _, _ in exported] == series["wall_times"]
    # the heatmap and /runs count a step written twice once, its last value
    (layer,) = {r["run"]: r for r in backend.json("runs")["runs"]}["restarted"]["layers"]
    assert (layer["first_step"], layer["last_step"], layer["logged_steps"]) == (0, 11, 12)
    header, arrays = backend.heatmap(run="restarted", reduction="last")
    decoded = heatmap_wire.decode_cells(arrays[header["runs"][0]["codes"]])
    assert decoded.tolist() == pytest.approx([1e-3] * 4 + [2e-3] * 8, rel=1e-3)


def test_a_heatmap_asked_again_is_the_same_answer_until_the_run_changes(tmp_path):
    from tb_wur_plugin.writer import SummaryWriter

    with SummaryWriter(str(tmp_path / "run")) as writer:
        for step in range(5):
            writer.add_ratios({"a/w": 1e-3, "b/w": 2e-3}, step)
    backend = Backend(str(tmp_path))
    first = backend.get("heatmap", run="run").get_data()
    assert backend.get("heatmap", run="run").get_data() == first
    with SummaryWriter(str(tmp_path / "run")) as writer:  # a later step: a new matrix
        writer.add_ratios({"a/w": 5e-1, "b/w": 2e-3}, 5)
    backend.multiplexer.Reload()
    header, arrays = heatmap_wire.unpack(backend.get("heatmap", run="run").get_data())
    assert header["end"] == 5 and header["columns"] == 6
    assert heatmap_wire.unpack(first)[0]["end"] == 4


def test_flags_are_kept_per_request_until_the_run_grows(tmp_path, monkeypatch):
    from tb_wur_plugin.judgement import judge
    from tb_wur_plugin.writer import SummaryWriter

    calls = []
    flag_layers = judge.flag_layers
    monkeypatch.setattr(judge, "flag_layers", lambda *a, **k: calls.append(a) or flag_layers(*a, **k))

    def write(steps, odd):
        with SummaryWriter(str(tmp_path / "run")) as writer:
            for step in steps:
                writer.add_ratios({"a/kernel": 1e-3, "b/kernel": 2e-3, "c/kernel": odd}, step)

    write(range(6), 1e-3)
    backend = Backend(str(tmp_path))
    first = backend.json("flags", run="run")
    assert first["layers"] == [] and len(calls) == 1
    assert backend.json("flags", run="run") == first and len(calls) == 1  # kept
    banded = backend.json("flags", run="run", low="1.5e-3")  # another request: judged
    assert [l["tag"] for l in banded["layers"]] == ["a/kernel", "c/kernel"] and len(calls) == 2
    write(range(6, 12), 0.9)  # c/kernel too fast from step 6
    backend.multiplexer.Reload()
    (grown,) = backend.json("flags", run="run")["layers"]
    assert (grown["tag"], grown["reason"], grown["since"]) == ("c/kernel", "too_fast", 6)
    assert len(calls) == 3

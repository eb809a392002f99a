"""Every route of the plugin over real event files, through the Python loader in-process."""

import csv
import io
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend import Backend
from tb_wur_plugin import heatmap, metadata, wur_summary


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
        shown = heatmap.decode_cells(codes[row])
        for got, want in zip(shown, values):
            want = math.inf if want == "Infinity" else want
            assert got == want if math.isinf(want) else f"{got:.2e}" == f"{want:.2e}"


def test_heatmap_of_a_grown_model_has_explicit_gaps(backend):
    header, arrays = backend.heatmap(run="grown")
    (run,) = header["runs"]
    codes = arrays[run["codes"]].reshape(2, header["columns"])
    assert run["tags"] == ["base/kernel", "added/kernel"]
    assert list(codes[1][:3]) == [heatmap.CODE_MISSING] * 3
    assert heatmap.CODE_MISSING not in codes[0] and heatmap.CODE_MISSING not in codes[1][3:]


def test_heatmap_special_values_are_kept(backend):
    header, arrays = backend.heatmap(run="special")
    (run,) = header["runs"]
    row = arrays[run["codes"]].reshape(2, 6)[run["tags"].index("odd/kernel")]
    assert [row[0], row[2], row[3]] == [heatmap.CODE_INF, heatmap.CODE_ZERO, heatmap.CODE_NAN]
    shown = heatmap.decode_cells(row)
    assert f"{shown[1]:.3g}" == "0.00123"  # 1.235e-3 is 0.0012349999... in binary
    assert f"{shown[5]:.3g}" == "1.13"  # 1.125 is a tie: up, as JavaScript's toPrecision


def test_heatmap_of_several_runs_shares_the_columns(backend):
    header, arrays = backend.heatmap(run=["grown", "special"], columns=1000)
    assert [r["run"] for r in header["runs"]] == ["grown", "special"]
    # union of steps 0..5 and 0, 2, ..., 18
    np.testing.assert_array_equal(arrays["column_first"], [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18])
    special = arrays[header["runs"][1]["codes"]].reshape(2, 13)
    assert list(special[0][6:]) == [heatmap.CODE_MISSING] * 7


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
    assert odd["tag"] == "odd/kernel" and (flags["low"], flags["high"]) == (1e-4, 1e-2)
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
    stored = [repr(float(np.float32(v))) for v in (1.235e-3, 5e-2)]
    assert [r[3] for r in odd] == ["inf", stored[0], "0.0", "nan", stored[1], "1.125"]
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


_VALUES = st.one_of(
    st.sampled_from(["alpha", "grown", "special", "net/first/kernel", "odd/kernel",
                     metadata.LEARNING_RATE_TAG, "csv", "json", "max", "last", "mean_log10",
                     "0", "-1", "1e3", "nan", "inf", "-inf", "99999999999999999999999",
                     "", " ", "%00", "../../etc/passwd", "\u202e\u0000", "1.5"]),
    st.text(max_size=30),
    st.integers(-(2**70), 2**70).map(str),
)
_PARAMS = st.dictionaries(
    st.sampled_from(["run", "tag", "columns", "start", "end", "reduction", "low", "high",
                     "format", "other"]),
    st.one_of(_VALUES, st.lists(_VALUES, min_size=1, max_size=3)),
    max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(["runs", "heatmap", "flags", "series", "histograms", "export"]),
       params=_PARAMS)
def test_no_request_gets_a_server_error(backend, route, params):
    response = backend.get(route, **params)
    body = response.get_data()  # consumes a streamed export too
    assert response.status_code in (200, 400, 404), (route, params, body[:300])
    assert b"Traceback" not in body
    if response.status_code != 200:
        assert body.strip() and b"\n" not in body.strip()  # a one-line reason

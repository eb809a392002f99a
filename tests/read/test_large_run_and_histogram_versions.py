"""Issue #18: a larger run (50 layers x 2,000 steps) and histograms of both protocol versions
read the same through /runs, /heatmap, /export and /histograms, in-process and with both of
the real `tensorboard` command's loaders.

Written with the TF-free `tb_wur_plugin.writer.SummaryWriter`; histograms of version 2
(varints in a uint8 vector) by setting `metadata.HISTOGRAM_WRITE_VERSION` while writing.
"""

import csv
import io
import json

import numpy as np
import pytest

from backend import Backend
from tb_server import TensorBoardServer
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import metadata
from tb_wur_plugin.writer import Counts, SummaryWriter

LAYERS, STEPS = 50, 2000
HISTOGRAM_STEPS = 10
WALL_TIME = 1_796_000_000.0


def _tags():
    return [f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(LAYERS)]


def _ratios():
    rng = np.random.default_rng(18)
    ratios = 10.0 ** (rng.uniform(-5, -1, LAYERS) + rng.normal(0, 0.2, (STEPS, LAYERS)))
    ratios[7, 0], ratios[8, 1], ratios[9, 2] = np.nan, np.inf, 0.0
    return ratios


def _counts(step, layer):
    """Counts with zeros, one-byte and several-byte varints."""
    rng = np.random.default_rng(step * 100 + layer)
    counts = rng.integers(0, 300, metadata.NUM_BUCKETS)
    counts[::5] = 0
    counts[3] = 70_000 + step
    return counts


def _write_histograms(writer, steps, layers):
    for step in steps:
        writer.add_histograms(
            {f"h{j}/kernel": Counts(_counts(step, j)) for j in range(layers)}, step,
            wall_time=WALL_TIME + step,
        )


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    tags, ratios = _tags(), _ratios()
    with SummaryWriter(root / "big") as writer:
        for step in range(STEPS):
            writer.add_ratios(
                dict(zip(tags, ratios[step].tolist())), step, wall_time=WALL_TIME + step / 4
            )
    with pytest.MonkeyPatch.context() as patch:
        for name, versions in {"v1": (1, 1), "v2": (2, 2), "mixed": (1, 2)}.items():
            with SummaryWriter(root / name) as writer:
                writer.add_ratios({f"h{j}/kernel": 1e-3 for j in range(2)}, 0,
                                  wall_time=WALL_TIME)
                half = HISTOGRAM_STEPS // 2
                patch.setattr(metadata, "HISTOGRAM_WRITE_VERSION", versions[0])
                _write_histograms(writer, range(half), 2)
                patch.setattr(metadata, "HISTOGRAM_WRITE_VERSION", versions[1])
                _write_histograms(writer, range(half, HISTOGRAM_STEPS), 2)
    return str(root)


def _expected_csv():
    tags, ratios = _tags(), _ratios().astype(np.float32)
    rows = ["tag,step,wall_time,ratio"]
    for layer, tag in enumerate(tags):
        for step in range(STEPS):
            # float32 ratios: 9 significant digits (http_api.md)
            rows.append(f"{tag},{step},{WALL_TIME + step / 4!r},{float(ratios[step, layer]):.9g}")
    return "\r\n".join(rows) + "\r\n"


def _read_everything(get):
    """(/runs, /heatmap header and arrays, /export csv and json, /histograms of each run)
    through `get(path) -> (status, body bytes)`."""
    def ok(path):
        status, body = get(path)
        assert status == 200, (path, status, body[:300])
        return body

    runs = json.loads(ok("runs"))
    header, arrays = heatmap_wire.unpack(ok("heatmap?run=big&columns=700"))
    histograms = {
        (run, j): json.loads(ok(f"histograms?run={run}&tag=h{j}/kernel"))
        for run in ("v1", "v2", "mixed") for j in range(2)
    }
    return {
        "runs": runs,
        "heatmap": (header, {k: v.tolist() for k, v in arrays.items()}),
        "csv": ok("export?run=big&format=csv").decode(),
        "json": json.loads(ok("export?run=big&format=json")),
        "histograms": histograms,
    }


@pytest.fixture(scope="module")
def in_process(logdir):
    backend = Backend(logdir)

    def get(path):
        response = backend.client.get(
            "/data/plugin/wur/" + path, headers={"Accept-Encoding": "gzip"}
        )
        body = response.get_data()
        if response.headers.get("Content-Encoding") == "gzip" and not path.startswith("heatmap"):
            import gzip
            body = gzip.decompress(body)
        return response.status_code, body

    return _read_everything(get)


def test_in_process_reads_every_point(in_process):
    runs = {r["run"]: r for r in in_process["runs"]["runs"]}
    assert [l["tag"] for l in runs["big"]["layers"]] == _tags()
    assert all(l["logged_steps"] == STEPS for l in runs["big"]["layers"])
    assert in_process["csv"] == _expected_csv()
    exported = in_process["json"]
    assert list(exported) == _tags()
    assert exported["dense_0/kernel"][7] == [WALL_TIME + 7 / 4, 7, "NaN"]
    assert exported["dense_0/bias"][8] == [WALL_TIME + 2, 8, "Infinity"]
    rows = list(csv.reader(io.StringIO(in_process["csv"])))[1:]
    assert [[r[0], int(r[1])] for r in rows[STEPS - 1:STEPS + 1]] == [
        ["dense_0/kernel", STEPS - 1], ["dense_0/bias", 0]
    ]
    header, arrays = in_process["heatmap"]
    assert header["columns"] <= 700 and header["runs"][0]["tags"] == _tags()
    assert sum(arrays["column_count"]) == STEPS


def test_both_histogram_versions_read_the_same(in_process):
    histograms = in_process["histograms"]
    for j in range(2):
        want = [_counts(step, j).tolist() for step in range(HISTOGRAM_STEPS)]
        for run in ("v1", "v2", "mixed"):
            got = histograms[(run, j)]
            assert got["steps"] == list(range(HISTOGRAM_STEPS))
            assert got["wall_times"] == [WALL_TIME + s for s in range(HISTOGRAM_STEPS)]
            assert got["counts"] == want, run


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_the_real_tensorboard_reads_what_the_app_reads(logdir, in_process, load_fast):
    with TensorBoardServer(logdir, load_fast) as server:
        server.wait_for(
            lambda d: {r["run"] for r in d["runs"]} == {"big", "v1", "v2", "mixed"}
            and all(l["logged_steps"] == STEPS for r in d["runs"] if r["run"] == "big"
                    for l in r["layers"])
            and len(next(r for r in d["runs"] if r["run"] == "big")["layers"]) == LAYERS,
            "/data/plugin/wur/runs",
        )

        def get(path):
            headers = {"Accept-Encoding": "gzip"} if path.startswith("heatmap") else {}
            status, _, body = server.get("/data/plugin/wur/" + path, headers)
            return status, body

        served = _read_everything(get)
    for part in ("runs", "heatmap", "csv", "json", "histograms"):
        assert served[part] == in_process[part], part


def test_the_python_loaders_kept_listing_follows_new_points_series_and_runs(tmp_path):
    """RunData keeps the Python loader's scalar listing while every series' last point is
    unchanged: each reload that brings a point, a series or a run is seen at once."""
    with SummaryWriter(tmp_path / "a", filename_suffix=".1") as writer:
        for step in range(5):
            writer.add_ratios({"x/kernel": 1e-3}, step, wall_time=WALL_TIME + step)
    backend = Backend(str(tmp_path))

    def layers():
        return {
            r["run"]: {l["tag"]: l["logged_steps"] for l in r["layers"]}
            for r in backend.json("runs")["runs"]
        }

    assert layers() == {"a": {"x/kernel": 5}} == layers()  # the second from the kept listing
    with SummaryWriter(tmp_path / "a", filename_suffix=".2") as writer:
        writer.add_ratios({"x/kernel": 2e-3, "y/kernel": 3e-3}, 5, wall_time=WALL_TIME + 5)
    with SummaryWriter(tmp_path / "b") as writer:
        writer.add_ratios({"z/kernel": 1e-3}, 0, wall_time=WALL_TIME)
    backend.multiplexer.AddRunsFromDirectory(str(tmp_path))  # as TensorBoard's reload does
    backend.multiplexer.Reload()
    assert layers() == {"a": {"x/kernel": 6, "y/kernel": 1}, "b": {"z/kernel": 1}}
    series = backend.json("series", run="a", tag="x/kernel")
    assert series["steps"] == list(range(6))

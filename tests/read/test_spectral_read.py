"""The read side of the spectral update ratios ‖ΔW‖₂ / ‖W‖₂: runs trained with optax and
logged by `jax.log_update_ratios(..., spectral=True)`, read back through the plugin's routes
(`metric=spectral`; `metric=frobenius` the default) with werkzeug's test client and the real
TensorBoard server with both loaders, and judged by `tb-wur report --metric spectral`. The
expected values are decoded from the event files by tests/helpers.read_packed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backend import Backend
from framework_servers import both_loaders
from helpers import read_packed
from tb_wur_plugin import cli, metadata

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from tb_wur_plugin.jax import log_update_ratios  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

STEPS = 40
MATRICES = ["hidden/kernel", "out/kernel"]


def _train(run_dir: str, optimizer: str, spectral: bool = True) -> None:
    """A two-layer MLP on a fixed regression task, trained STEPS steps, every step logged."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((256, 16)), jnp.float32)
    y = jnp.asarray(np.sin(np.asarray(x) @ rng.standard_normal((16, 4))), jnp.float32)
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    params = {
        "hidden": {"kernel": jax.random.normal(key1, (16, 32)) / 4, "bias": jnp.zeros(32)},
        "out": {"kernel": jax.random.normal(key2, (32, 4)) / 6, "bias": jnp.zeros(4)},
    }
    opt = {"sgd": optax.sgd(0.05, momentum=0.9), "adamw": optax.adamw(3e-3)}[optimizer]
    opt_state = opt.init(params)

    def loss(p):
        h = jnp.tanh(x @ p["hidden"]["kernel"] + p["hidden"]["bias"])
        return jnp.mean((h @ p["out"]["kernel"] + p["out"]["bias"] - y) ** 2)

    @jax.jit
    def step(p, s):
        updates, s = opt.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s, updates

    with SummaryWriter(run_dir) as writer:
        for i in range(STEPS):
            new, opt_state, updates = step(params, opt_state)
            log_update_ratios(writer, params, updates, i, spectral=spectral)
            params = new


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("spectral_read")
    _train(str(root / "sgd"), "sgd")
    _train(str(root / "adamw"), "adamw")
    _train(str(root / "plain"), "sgd", spectral=False)
    return str(root)


@pytest.fixture(scope="module")
def expected(logdir):
    """{run: {"frobenius": {tag: {step: ratio}}, "spectral": {...}}} from the event files."""
    found = {}
    for run in ("sgd", "adamw", "plain"):
        packed = read_packed(f"{logdir}/{run}")
        found[run] = {
            metric: {tag: {s: float(r) for s, r in points} for tag, points in series.items()}
            for metric, series in (("frobenius", packed.ratios), ("spectral", packed.spectral))
        }
    return found


def _assert_close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        assert sorted(got[tag]) == sorted(want[tag]), tag
        steps = sorted(want[tag])
        np.testing.assert_allclose([got[tag][s] for s in steps], [want[tag][s] for s in steps],
                                   rtol=1e-6, err_msg=tag)


def _json_export(body: bytes) -> dict:
    return {tag: {step: float(r) for _, step, r in points}
            for tag, points in json.loads(body).items()}


def test_the_runs_are_real(expected):
    """Spectral ratios exist for the matrices only, differ from the Frobenius ones and
    (‖ΔW‖₂ ≤ ‖ΔW‖_F, ‖W‖₂ ≤ ‖W‖_F) are within the bounds the norms allow."""
    for run in ("sgd", "adamw"):
        assert sorted(expected[run]["spectral"]) == MATRICES
        assert len(expected[run]["frobenius"]) == 4
        for tag in MATRICES:
            spec = np.array(list(expected[run]["spectral"][tag].values()))
            frob = np.array(list(expected[run]["frobenius"][tag].values()))
            assert len(spec) == STEPS and np.all(spec > 0)
            assert not np.allclose(spec, frob, rtol=1e-3)
    assert expected["plain"]["spectral"] == {}


def test_routes_with_the_metric(logdir, expected):
    backend = Backend(logdir)
    runs = {r["run"]: r for r in backend.json("runs")["runs"]}
    assert runs["sgd"]["metrics"] == ["frobenius", "spectral"]
    assert runs["plain"]["metrics"] == ["frobenius"]
    assert backend.json("runs")["metrics"] == ["frobenius", "spectral"]
    for run in ("sgd", "adamw"):
        for metric in ("frobenius", "spectral"):
            params = {} if metric == "frobenius" else {"metric": metric}
            response = backend.get("export", run=run, format="json", **params)
            assert response.status_code == 200, response.get_data(as_text=True)
            _assert_close(_json_export(response.get_data()), expected[run][metric])
            csv = backend.get("export", run=run, format="csv", metric=metric).get_data(as_text=True)
            lines = csv.strip().splitlines()
            assert lines[0] == "tag,step,wall_time,ratio"
            assert len(lines) - 1 == sum(len(v) for v in expected[run][metric].values())
            header, _ = backend.heatmap(run=run, metric=metric)
            assert header["metric"] == metric
            assert header["runs"][0]["tags"] == (
                MATRICES if metric == "spectral" else list(expected[run]["frobenius"]))
            series = backend.json("series", run=run, tag="out/kernel", metric=metric)
            want = expected[run][metric]["out/kernel"]
            np.testing.assert_allclose(series["values"], [want[s] for s in series["steps"]],
                                       rtol=1e-6)
            flagged = backend.json("flags", run=run, metric=metric)
            assert flagged["metric"] == metric and flagged["layers"] == [], flagged
    compare = backend.client.get("/data/plugin/wur/compare", query_string={
        "run_a": "sgd", "run_b": "adamw", "metric": "spectral"})
    assert compare.status_code == 200
    # a run without spectral ratios: 404; a bad metric: 400 naming the parameter
    missing = backend.get("export", run="plain", format="csv", metric="spectral")
    assert missing.status_code == 404 and b"spectral" in missing.get_data()
    for route, params in (("export", {"run": "sgd", "format": "csv"}), ("flags", {"run": "sgd"}),
                          ("series", {"run": "sgd", "tag": "out/kernel"}),
                          ("heatmap", {"run": "sgd"})):
        bad = backend.get(route, metric="operator", **params)
        assert bad.status_code == 400 and b"metric" in bad.get_data(), route


def test_both_tensorboard_loaders(logdir, expected):
    with both_loaders(logdir, {"sgd": STEPS - 1, "adamw": STEPS - 1}) as servers:
        for name, server in servers.items():
            for run in ("sgd", "adamw"):
                status, _, body = server.get(
                    f"/data/plugin/wur/export?run={run}&format=json&metric=spectral")
                assert status == 200, (name, body[:200])
                _assert_close(_json_export(body), expected[run]["spectral"])
                status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=json")
                _assert_close(_json_export(body), expected[run]["frobenius"])


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_report_metric(logdir, expected, capsys, load_fast):
    status = cli.main(["report", logdir, "--metric", "spectral", "--format", "json",
                       "--fail-on-flags", "--load_fast", load_fast])
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    by_run = {r["run"]: r for r in out["runs"]}
    assert sorted(by_run) == ["adamw", "sgd"]  # "plain" has no spectral ratios
    for run in ("sgd", "adamw"):
        layers = {l["tag"]: l for l in by_run[run]["layers"]}
        assert sorted(layers) == MATRICES
        for tag, layer in layers.items():
            values = list(expected[run]["spectral"][tag].values())
            assert layer["logged_steps"] == STEPS
            assert layer["median"] == pytest.approx(float(np.median(values)), rel=1e-6)
            assert layer["flagged"] is False
    # an explicit band far below the ratios flags every spectral layer above it
    status = cli.main(["report", logdir, "--metric", "spectral", "--run", "^sgd$",
                       "--low", "1e-9", "--high", "1e-8", "--format", "json", "--fail-on-flags"])
    out = json.loads(capsys.readouterr().out)
    assert status == 1
    assert {l["reason"] for l in out["runs"][0]["layers"]} == {"above_band"}


def test_report_metric_errors(logdir, tmp_path, capsys):
    plain = tmp_path / "only_frobenius"
    _train(str(plain / "run"), "sgd", spectral=False)
    assert cli.main(["report", str(plain), "--metric", "spectral"]) == 2
    assert "no spectral wur ratios" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", logdir, "--metric", "operator"])
    assert exit_info.value.code == 2
    assert "--metric" in capsys.readouterr().err
    assert metadata.METRICS == ("frobenius", "spectral")


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_read_ratios_metric(logdir, expected, load_fast):
    """`read_ratios(..., metric="spectral")`: the spectral ratios of the matrices, as written;
    the default the Frobenius ones; a logdir without spectral ratios, or another metric, a
    ValueError naming it."""
    import tb_wur_plugin

    for metric in ("frobenius", "spectral"):
        kwargs = {} if metric == "frobenius" else {"metric": metric}
        frame = tb_wur_plugin.read_ratios(logdir, run="^(sgd|adamw)$", load_fast=load_fast,
                                          **kwargs)
        for run in ("sgd", "adamw"):
            rows = frame[frame["run"] == run]
            got = {tag: dict(zip(part["step"], part["ratio"])) for tag, part in rows.groupby("tag")}
            _assert_close(got, expected[run][metric])
    with pytest.raises(ValueError, match="holds no spectral wur ratios"):
        tb_wur_plugin.read_ratios(f"{logdir}/plain", metric="spectral", load_fast=load_fast)
    with pytest.raises(ValueError, match="metric must be one of frobenius, spectral"):
        tb_wur_plugin.read_ratios(logdir, metric="operator", load_fast=load_fast)

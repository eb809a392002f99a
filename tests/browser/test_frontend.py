"""The WUR tab (frontend/): the committed bundle is a fresh build, the JS unit tests pass, and
the tab works in headless Chromium against the real `tensorboard` in both loaders.

Needs Node.js, frontend/node_modules and /usr/bin/chromium: `scripts/frontend.sh` installs
them (scripts/test.sh runs it). Without them these tests fail; they never skip.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from tb_server import TensorBoardServer
from tb_wur_plugin.web import heatmap_wire

ROOT = Path(__file__).resolve().parents[2]
FRONTEND = ROOT / "frontend"
BUNDLE = ROOT / "tb_wur_plugin" / "static" / "index.js"
BROWSER_TEST = ROOT / "tests" / "browser" / "wur_tab.mjs"
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"

import wur_data  # noqa: E402 (tests/browser/, beside this file)


def _node() -> str:
    node = shutil.which("node")
    assert node, "Node.js is needed for the frontend tests (scripts/frontend.sh)"
    assert (FRONTEND / "node_modules" / "esbuild").is_dir(), (
        "frontend/node_modules is missing: run scripts/frontend.sh"
    )
    return node


def _run(args, timeout, cwd=ROOT):
    result = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )
    return result.returncode, result.stdout + result.stderr


def test_committed_bundle_equals_a_fresh_build(tmp_path):
    out = tmp_path / "index.js"
    code, output = _run([_node(), str(FRONTEND / "build.mjs"), "--outfile", str(out)], 120)
    assert code == 0, output
    fresh = out.read_bytes()
    assert fresh == BUNDLE.read_bytes(), (
        "tb_wur_plugin/static/index.js differs from a fresh build of frontend/src: "
        "run `npm run build` in frontend/ and commit the result"
    )
    assert b"export function render()" in fresh
    # one self-contained module: it imports nothing (no chunk, nothing from a CDN)
    assert not re.search(rb"\bimport\s*[(\"'{*]", fresh), "the bundle imports something"
    assert not re.search(rb"https?://(?!www\.w3\.org/)", fresh), "the bundle names a URL"


def test_bundle_builds_deterministically(tmp_path):
    outs = []
    for name in ("a.js", "b.js"):
        code, output = _run([_node(), str(FRONTEND / "build.mjs"), "--outfile", str(tmp_path / name)], 120)
        assert code == 0, output
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]


def test_typescript_typechecks():
    code, output = _run([_node(), str(FRONTEND / "node_modules" / "typescript" / "bin" / "tsc"),
                         "--noEmit", "-p", str(FRONTEND)], 180, cwd=FRONTEND)
    assert code == 0, output


def test_js_unit_tests():
    code, output = _run([_node(), str(FRONTEND / "run-tests.mjs")], 180, cwd=FRONTEND)
    assert code == 0, output
    assert "# fail 0" in output, output
    passed = [line for line in output.splitlines() if line.startswith("# pass ")]
    assert passed and int(passed[0].split()[-1]) >= 20, output


# --- in the browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tab_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("wur_tab")
    wur_data.write(str(logdir))
    return str(logdir)


def _browser(config: dict, tmp_path: Path, timeout: float = 150) -> str:
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: scripts/frontend.sh installs Debian's chromium"
    )
    path = tmp_path / "browser-config.json"
    path.write_text(json.dumps(config))
    code, output = _run([_node(), str(BROWSER_TEST), str(path)], timeout)
    assert code == 0, output
    return output


def _expected_runs():
    return [
        {"run": wur_data.RUN_A, "tags": wur_data.TAGS_A, "steps": wur_data.STEPS},
        {"run": wur_data.RUN_B, "tags": wur_data.TAGS_B, "steps": wur_data.STEPS},
        {"run": wur_data.RUN_C, "tags": wur_data.TAGS_C, "steps": wur_data.STEPS},
    ]


PATIENCES = (5, 25, 40)


def _report(logdir: str, patience: int) -> dict:
    """{run: [flagged tags]} of `tb-wur report` (the installed console script) on `logdir`."""
    exe = shutil.which("tb-wur") or str(Path(sys.executable).with_name("tb-wur"))
    code, output = _run([exe, "report", logdir, "--format", "json", "--low", "1e-4", "--high", "1e-2",
                         "--patience", str(patience)], 300)
    assert code == 0, output
    report = json.loads(output)
    return {r["run"]: [l["tag"] for l in r["layers"] if l["flagged"]] for r in report["runs"]}


@pytest.fixture(scope="module")
def tab_reports(tab_logdir):
    """{patience: _report(tab_logdir, patience)} for PATIENCES: the logdir is the same for
    both loaders' tab tests, so its headless reports are made once, at once."""
    with concurrent.futures.ThreadPoolExecutor(len(PATIENCES)) as pool:
        return dict(zip(PATIENCES, pool.map(lambda p: _report(tab_logdir, p), PATIENCES)))


def _points(export: dict, tag: str) -> dict:
    """{step: ratio} of an exported tag (the last value written at a step counts)."""
    return {p[1]: float(p[2]) for p in export[tag]}


def _expected_comparison(runs: dict, exports: dict, run_a: str, run_b: str) -> dict:
    """ratio_A / ratio_B per common layer and common step, and the ranking, with numpy from
    /export (the skipped steps of either run not compared)."""
    import numpy as np

    info = {r["run"]: r for r in runs["runs"]}
    skipped = set(info[run_a]["skipped_at"]) | set(info[run_b]["skipped_at"])
    tags = [t for t in exports[run_a] if t in exports[run_b]]
    cells, ranking, steps = {}, [], None
    for tag in tags:
        a, b = _points(exports[run_a], tag), _points(exports[run_b], tag)
        common = sorted(set(a) & set(b))
        steps = common if steps is None else sorted(set(steps) | set(common))
        va = np.array([a[s] for s in common]); vb = np.array([b[s] for s in common])
        judged = np.array([s not in skipped for s in common])
        with np.errstate(divide="ignore", invalid="ignore"):
            q = va / vb
        cells[tag] = {str(s): (float(x) if j else None) for s, x, j in zip(common, q, judged)}
        ok = judged & np.isfinite(va) & np.isfinite(vb) & (va > 0) & (vb > 0)
        d = np.abs(np.log10(va[ok]) - np.log10(vb[ok]))
        ranking.append({"tag": tag, "divergence": float(np.median(d)) if len(d) else None})
    ranking.sort(key=lambda r: (r["divergence"] is None, -(r["divergence"] or 0), r["tag"]))
    return {"run_a": run_a, "run_b": run_b, "steps": steps, "cells": cells, "ranking": ranking}


def _expected_suggestion(server, runs: dict, exports: dict, run: str, tag: str, target=1e-3, last=10) -> dict:
    """lr · target / ratio, geometric means over the layer's last `last` logged steps that were
    judged with a finite positive ratio and learning rate, with numpy from /export and /series."""
    import numpy as np

    info = next(r for r in runs["runs"] if r["run"] == run)
    lr_tag = runs["reserved_tags"]["learning_rate"]
    series = server.get_json(f"/data/plugin/wur/series?run={urllib.parse.quote(run)}&tag={urllib.parse.quote(lr_tag)}")
    lr = dict(zip(series["steps"], map(float, series["values"])))
    ratio = _points(exports[run], tag)
    steps = [s for s in sorted(ratio)[-last:] if s not in info["skipped_at"]
             and np.isfinite(ratio[s]) and ratio[s] > 0 and s in lr and np.isfinite(lr[s]) and lr[s] > 0]
    assert steps, (ratio, lr)
    g_ratio = float(np.exp(np.mean(np.log([ratio[s] for s in steps]))))
    g_lr = float(np.exp(np.mean(np.log([lr[s] for s in steps]))))
    return {"run": run, "tag": tag, "target": target, "value": g_lr * target / g_ratio, "steps": len(steps)}


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_tab_in_chromium(tab_logdir, tab_reports, load_fast, tmp_path):
    """Both loaders' answers are checked here; in the browser, the tab's rows, columns,
    crisp pixels and every tooltip over either loader (a high-DPI screen with one), and every
    interaction over the fast one (the tab's code is the same over either: its answers are
    what differs, and they are checked, here and by the route tests in both loaders)."""
    label = "fast" if load_fast else "python"
    with TensorBoardServer(tab_logdir, load_fast) as server:
        runs = server.wait_for(
            lambda d: len(d["runs"]) == 3
            and all(l["logged_steps"] == len(wur_data.STEPS) for r in d["runs"] for l in r["layers"])
            and sum(len(r["layers"]) for r in d["runs"])
            == len(wur_data.TAGS_A) + len(wur_data.TAGS_B) + len(wur_data.TAGS_C),
            "/data/plugin/wur/runs",
        )
        # the rows are the layers in the order /runs gives them (model order)
        assert [l["tag"] for l in runs["runs"][0]["layers"]] == wur_data.TAGS_A
        assert [r["run"] for r in runs["runs"]] == [wur_data.RUN_A, wur_data.RUN_B, wur_data.RUN_C]
        assert [l["tag"] for l in runs["runs"][2]["layers"]] == wur_data.TAGS_C
        # only the run trained with the line search has its data
        assert [r.get("has_line_search") for r in runs["runs"]] == [False, False, True]
        line_search = server.get_json(
            f"/data/plugin/wur/line_search?run={urllib.parse.quote(wur_data.RUN_C)}")
        assert line_search["steps"] == wur_data.STEPS, line_search
        assert sum(line_search["backtracks"]) > 0, line_search
        exports, flags, flags_default = {}, {}, {}
        for run in (wur_data.RUN_A, wur_data.RUN_B, wur_data.RUN_C):
            q = urllib.parse.quote(run)
            exports[run] = json.loads(server.get(f"/data/plugin/wur/export?run={q}&format=json")[2])
            # the tab's flags: by the default judgement until the band is set (it is, in the
            # test, by the time the flags table is checked against these)
            flags_default[run] = server.get_json(f"/data/plugin/wur/flags?run={q}")["layers"]
            flags[run] = [l["tag"] for l in server.get_json(f"/data/plugin/wur/flags?run={q}&low=0.0001&high=0.01")["layers"]]
        # the flags for several patiences: /flags, and the same layers as the headless report
        flags_by_patience = {}
        for patience in PATIENCES:
            report = tab_reports[patience]
            flags_by_patience[str(patience)] = {}
            for run in (wur_data.RUN_A, wur_data.RUN_B, wur_data.RUN_C):
                q = urllib.parse.quote(run)
                got = server.get_json(f"/data/plugin/wur/flags?run={q}&low=0.0001&high=0.01&patience={patience}")
                assert got["patience"] == patience, got
                tags = [l["tag"] for l in got["layers"]]
                assert sorted(tags) == sorted(report[run]), (patience, run, tags, report[run])
                flags_by_patience[str(patience)][run] = tags
        assert flags_by_patience["5"] == flags
        assert len({json.dumps(v, sort_keys=True) for v in flags_by_patience.values()}) == len(PATIENCES), (
            "the patiences tested should flag different layers", flags_by_patience)
        compare = _expected_comparison(runs, exports, wur_data.RUN_A, wur_data.RUN_B)
        suggestion = _expected_suggestion(server, runs, exports, wur_data.RUN_A, "model/dense/kernel")
        assert wur_data.XSS_TAG in exports[wur_data.RUN_A]
        assert [r["skipped_steps"] for r in runs["runs"]] == [1, 0, 0]
        # the zeros of the skipped step do not make an in-band layer look stalled
        assert "model/dense/kernel" not in flags[wur_data.RUN_A]
        config = {
            "url": server.url, "mode": "data" if load_fast else "basic", "label": label,
            "artifacts": str(ARTIFACTS),
            "runs": _expected_runs(), "exports": exports, "flags": flags, "flags_default": flags_default,
            "histogram_tag": "model/dense/kernel", "nan_tag": "model/odd/kernel",
            "histogram_elements": wur_data.HISTOGRAM_ELEMENTS,
            "dpr": 2 if load_fast else 1,  # high-DPI in one loader
            "group": {"name": "model/dense", "members": ["model/dense/kernel", "model/dense/bias"],
                      "worst": "model/dense/bias"},
            "skipped": {"run": wur_data.RUN_A, "step": wur_data.SKIPPED_STEP},
            "line_search": {"run": wur_data.RUN_C, "data": line_search},
            "flags_by_patience": flags_by_patience, "compare": compare,
            "suggestion": suggestion, "no_lr_run": wur_data.RUN_B,
        }
        output = _browser(config, tmp_path)
        assert "Traceback" not in server.output()
    assert "tooltips match the export" in output, output
    if not load_fast:
        return
    for part in ("layer filter works", "run toggle works",
                 "zoom works and survives reloads", "layer detail works", "flags work",
                 "export works", "keyboard navigation works", "grouping by layer works",
                 "tag and run names are text", "skipped steps are marked", "line search shown",
                 "patience works", "comparison works", "suggested learning rate works",
                 "flagged rows are marked at once", "widths work"):
        assert part in output, output
    for scheme in ("light", "dark"):
        assert (ARTIFACTS / f"wur-tab-{label}-{scheme}.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def interval_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("wur_intervals")
    steps = wur_data.write_intervals(str(logdir))
    return str(logdir), steps


def _report_layers(logdir: str, *band: str) -> dict:
    """{run: [flagged layers]} of `tb-wur report --format json` (the default judgement, or
    the band given as "--low", L, "--high", H)."""
    exe = shutil.which("tb-wur") or str(Path(sys.executable).with_name("tb-wur"))
    code, output = _run([exe, "report", logdir, "--format", "json", *band], 300)
    assert code == 0, output
    return {r["run"]: [l for l in r["layers"] if l["flagged"]] for r in json.loads(output)["runs"]}


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_step_axis_flags_and_run_filter_in_chromium(interval_logdir, load_fast, tmp_path):
    """Runs logged every 2 and every 5 steps share a column per step, the sparse one's ratios
    held (never "not logged" inside a layer's range); the flags table says what /flags and
    the report say; the run filter hides a run's heatmap, flags and comparison choice."""
    logdir, steps = interval_logdir
    label = "fast" if load_fast else "python"
    runs = [wur_data.RUN_EVERY2, wur_data.RUN_EVERY5]
    last = wur_data.INTERVAL_LAST_STEP
    band = {"low": 1e-4, "high": 1e-2, "low_text": "1e-4", "high_text": "1e-2"}
    with TensorBoardServer(logdir, load_fast) as server:
        server.wait_for(
            lambda d: len(d["runs"]) == 2
            and all(l["logged_steps"] == len(steps[r["run"]]) for r in d["runs"] for l in r["layers"])
            and all(len(r["layers"]) == len(wur_data.INTERVAL_TAGS) for r in d["runs"]),
            "/data/plugin/wur/runs",
        )
        quoted = "&".join(f"run={urllib.parse.quote(r)}" for r in runs)
        header, arrays = heatmap_wire.unpack(server.get(f"/data/plugin/wur/heatmap?{quoted}&columns=1000")[2])
        np.testing.assert_array_equal(arrays["column_start"], np.arange(last + 1))
        exports, flags_default, flags_band = {}, {}, {}
        for shown in header["runs"]:
            codes = arrays[shown["codes"]].reshape(len(shown["tags"]), last + 1)
            assert heatmap_wire.CODE_MISSING not in codes, shown["run"]  # every layer logs 0..40
            held = arrays[shown["held"]].reshape(-1, 3)
            every = steps[shown["run"]][1]
            assert int(held[:, 2].sum()) == len(wur_data.INTERVAL_TAGS) * (last + 1 - len(steps[shown["run"]]))
            assert all(int(s) % every == 0 and int(k) == int(s) + 1 for (_, k, _), s in zip(held, arrays[shown["held_from"]]))
        for run in runs:
            q = urllib.parse.quote(run)
            exports[run] = json.loads(server.get(f"/data/plugin/wur/export?run={q}&format=json")[2])
            flags_default[run] = server.get_json(f"/data/plugin/wur/flags?run={q}")["layers"]
            flags_band[run] = server.get_json(f"/data/plugin/wur/flags?run={q}&low=0.0001&high=0.01")["layers"]
        # the tab shows /flags; /flags says what the report says (tags, reasons, since, text)
        for judged, args in ((flags_default, ()), (flags_band, ("--low", "1e-4", "--high", "1e-2"))):
            report = _report_layers(logdir, *args)
            for run in runs:
                got = [(l["tag"], l["reason"], l["since"], l.get("text")) for l in judged[run]]
                want = [(l["tag"], l.get("reason"), l.get("since"), l.get("text")) for l in report[run]]
                assert sorted(got, key=str) == sorted(want, key=str), (args, run, got, want)
        frozen = [l for l in flags_default[wur_data.RUN_EVERY5] if l["tag"] == "net/out/kernel"]
        assert frozen, flags_default
        config = {
            "url": server.url, "mode": "axis", "label": f"axis-{label}", "artifacts": str(ARTIFACTS),
            "last_step": last, "exports": exports, "flags_default": flags_default,
            "flags_band": flags_band, "band": band,
            "runs": [
                {"run": run, "tags": wur_data.INTERVAL_TAGS, "steps": steps[run], "every": steps[run][1],
                 "held_cells": len(wur_data.INTERVAL_TAGS) * (last + 1 - len(steps[run]))}
                for run in runs
            ],
        }
        if not load_fast:  # its answers are checked above; the tab's code is the same
            return
        output = _browser(config, tmp_path)
        assert "Traceback" not in server.output()
    for part in ("step axis works", "flags table matches /flags", "run filter works"):
        assert part in output, output


def test_new_steps_appear_live_keeping_filter_and_layer(tmp_path):
    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    logdir = tmp_path / "live"
    tags = ["net/dense/kernel", "net/dense/bias", "net/out/kernel"]

    def log(steps):
        writer = tf.summary.create_file_writer(str(logdir / "run"))
        with writer.as_default():
            for step in steps:
                for i, tag in enumerate(tags):
                    wur_summary.scalar(tag, 1e-3 * (i + 1) * (1 + step / 100), step=step)
        writer.close()

    log(range(10))
    go = tmp_path / "go"
    config = {
        "mode": "live", "label": "live", "runs": [{"run": "run", "tags": tags, "steps": list(range(20))}],
        "steps_before": 10, "steps_after": 20, "filter": "kernel", "go_file": str(go),
    }
    with TensorBoardServer(str(logdir), load_fast=True, extra_args=("--reload_interval", "1")) as server:
        server.wait_for(lambda d: d["runs"] and d["runs"][0]["last_step"] == 9, "/data/plugin/wur/runs")
        config["url"] = server.url
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        process = subprocess.Popen(
            [_node(), str(BROWSER_TEST), str(path)], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        lines = []
        try:
            for line in process.stdout:
                lines.append(line)
                if "waiting for new steps" in line:
                    log(range(10, 20))
                    go.write_text("go")
            process.wait(120)
        finally:
            if process.poll() is None:
                process.kill()
        output = "".join(lines)
        assert process.returncode == 0, output
    assert "live update works (10 -> 20 columns)" in output, output


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_keras_callback_run_in_chromium(load_fast, tmp_path):
    import keras
    import numpy as np

    from tb_wur_plugin.keras import WeightUpdateRatioCallback

    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu", name="hidden"),
         keras.layers.Dense(1, name="out")],
        name="tiny",
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    logdir = tmp_path / "keras"
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[WeightUpdateRatioCallback(str(logdir), update_freq=2, histograms=True)])
    tags = [v.path for v in model.trainable_variables]
    steps = list(range(0, 16, 2))  # 16 updates, every 2nd logged
    with TensorBoardServer(str(logdir), load_fast) as server:
        server.wait_for(
            lambda d: d["runs"] and len(d["runs"][0]["layers"]) == len(tags)
            and all(l["logged_steps"] == len(steps) for l in d["runs"][0]["layers"]),
            "/data/plugin/wur/runs",
        )
        exported = json.loads(server.get("/data/plugin/wur/export?run=train&format=json")[2])
        config = {
            "url": server.url, "mode": "basic", "label": f"keras-{'fast' if load_fast else 'python'}",
            "runs": [{"run": "train", "tags": tags, "steps": steps}], "exports": {"train": exported},
        }
        output = _browser(config, tmp_path)
    assert f"{len(tags) * len(steps)} tooltips match the export" in output, output


def test_binned_columns_show_the_reduction_of_their_steps(tmp_path):
    import math

    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    steps = 3000
    logdir = tmp_path / "binned"
    writer = tf.summary.create_file_writer(str(logdir / "long"))

    def special(step):
        # the second layer goes NaN at step 1234 and holds still (0) at step 2000
        return {1234: math.nan, 2000: 0.0}.get(step)

    with writer.as_default():
        for step in range(steps):
            wur_summary.scalar("net/a/kernel", 1e-3 * (1 + (step % 7) / 10 + step / steps), step=step)
            value = special(step)
            wur_summary.scalar("net/b/kernel", 2e-4 * (1 + (step % 11) / 5) if value is None else value, step=step)
    writer.close()
    with TensorBoardServer(str(logdir), load_fast=True) as server:
        server.wait_for(
            lambda d: d["runs"] and all(l["logged_steps"] == steps for l in d["runs"][0]["layers"]),
            "/data/plugin/wur/runs",
        )
        exported = json.loads(server.get("/data/plugin/wur/export?run=long&format=json")[2])
        config = {
            "url": server.url, "mode": "binned", "label": "binned",
            "runs": [{"run": "long", "tags": ["net/a/kernel", "net/b/kernel"], "steps": list(range(steps))}],
            "exports": {"long": exported},
            # bins to check: the first ones, one in the middle, the last; and those of these steps
            "columns": [0, 1, 300, -1], "special_steps": [1234, 2000],
        }
        output = _browser(config, tmp_path)
    assert "binned columns work" in output, output


def test_empty_logdir_says_what_to_do(tmp_path):
    logdir = tmp_path / "empty"
    logdir.mkdir()
    with TensorBoardServer(str(logdir), load_fast=True) as server:
        output = _browser({"url": server.url, "mode": "empty", "label": "empty"}, tmp_path)
    assert "empty state works" in output and "error state works" in output, output


METRIC_TEST = ROOT / "tests" / "browser" / "wur_metric.mjs"


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "slow"])
def test_metric_switch_shows_the_spectral_ratios(load_fast, tmp_path):
    """A run with Frobenius ratios of every layer and spectral ratios (other values) of its
    matrices: the tab offers the switch; flipped, its rows, flags, open layer's series and
    export links are the spectral ones (the exported values those written), and back."""
    from tb_wur_plugin.writer import SummaryWriter

    run = "metric/train"
    tags = ["net/fc1/weight", "net/fc1/bias", "net/fc2/weight"]
    matrices = [t for t in tags if t.endswith("weight")]
    steps = list(range(0, 60, 3))
    frobenius = {t: {s: float(np.float32(1e-3 * (k + 1) * (1 + s / 100))) for s in steps}
                 for k, t in enumerate(tags)}
    spectral = {t: {s: float(np.float32(3e-2 * (k + 1) * (1 + s / 50))) for s in steps}
                for k, t in enumerate(matrices)}
    writer = SummaryWriter(tmp_path / "logs" / run)
    for s in steps:
        writer.add_ratios({t: frobenius[t][s] for t in tags}, s)
        writer.add_ratios({t: spectral[t][s] for t in matrices}, s, metric="spectral")
    writer.close()
    with TensorBoardServer(str(tmp_path / "logs"), load_fast=load_fast) as server:
        server.wait_for(lambda d: "spectral" in d.get("metrics", []), "/data/plugin/wur/runs")
        config = {"url": server.url, "label": f"metric-{'fast' if load_fast else 'slow'}",
                  "run": run, "frobenius": frobenius, "spectral": spectral}
        path = tmp_path / "metric-config.json"
        path.write_text(json.dumps(config))
        code, output = _run([_node(), str(METRIC_TEST), str(path)], 150)
    assert code == 0, output
    assert "spectral shown" in output and "metric switch works" in output, output


if __name__ == "__main__":
    # PYTHONPATH=tests/support python tests/browser/test_frontend.py screenshot LOGDIR OUT.png:
    # a screenshot of the tab over LOGDIR
    _, _, logdir, out = sys.argv
    with TensorBoardServer(logdir, load_fast=True) as server:
        server.wait_for(lambda d: bool(d["runs"]), "/data/plugin/wur/runs")
        config = {"url": server.url, "mode": "screenshot", "label": "screenshot",
                  "screenshot": str(Path(out).resolve())}
        path = Path(out).resolve().with_suffix(".json")
        path.write_text(json.dumps(config))
        code, output = _run([_node(), str(BROWSER_TEST), str(path)], 120)
        path.unlink()
        print(output)
        sys.exit(code)

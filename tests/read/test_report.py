"""`tb-wur report`: every number against the plugin's /export of the same logdir (in-process),
text and JSON, --run, --compare and suggested learning rates against numpy, and the exit
status of the installed console script."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from backend import Backend
from tb_wur_plugin import cli, metadata
from tb_wur_plugin.read import suggest
from tb_wur_plugin.writer import SummaryWriter

SKIPPED = {4, 5}
LOW, HIGH, PATIENCE = 1e-4, 1e-2, 5


def _write(logdir):
    rng = np.random.default_rng(7)
    # out/kernel: below the default band, but within the default judgement's reach of its
    # peers (no flag without a band)
    base = {"net/dense/kernel": 1e-3, "net/dense/bias": 1e-2, "net/out/kernel": 3e-5,
            "net/out/bias": 2e-3}
    for run, scale, lr_every in [("a/train", 1.0, 1), ("b/train", 3.0, 2), ("c/eval", 1.0, None)]:
        with SummaryWriter(f"{logdir}/{run}") as w:
            for step in range(0, 60, 2):
                skipped = step in SKIPPED and run == "a/train"
                ratios = {t: 0.0 if skipped else v * scale * math.exp(rng.normal(0, 0.5))
                          for t, v in base.items()}
                if run == "a/train" and step == 0:
                    ratios["net/dense/bias"] = math.inf
                if run == "a/train" and step == 40:
                    ratios["net/out/bias"] = math.nan
                if run == "b/train" and step >= 50:
                    ratios["net/extra/kernel"] = 1e-3  # only in b
                w.add_ratios(ratios, step, skipped=skipped)
                if lr_every and step % (2 * lr_every) == 0:
                    w.add_learning_rate(0.1 * (1 + step / 100), step)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("report"))
    _write(path)
    return path


@pytest.fixture(scope="module")
def backend(logdir):
    return Backend(logdir)


def _report(capsys, *args):
    status = cli.main(["report", *args])
    out = capsys.readouterr().out
    return status, out


def _lr(backend, run):
    response = backend.get("series", run=run, tag=metadata.LEARNING_RATE_TAG)
    if response.status_code == 404:
        return {}
    s = json.loads(response.get_data())
    return dict(zip(s["steps"], s["values"]))


def _skipped(backend, run):
    (r,) = [r for r in backend.json("runs")["runs"] if r["run"] == run]
    return set(r["skipped_at"])


def _expected(backend, run, target=1e-3, last=10):
    """Each layer's numbers from /export, in numpy."""
    exported = backend.json("export", run=run, format="json")
    skipped, lr = _skipped(backend, run), _lr(backend, run)
    out = {}
    for tag, points in exported.items():
        steps = np.array([p[1] for p in points])
        v = np.array([float(p[2]) for p in points])  # "NaN", "Infinity" parse
        judged = ~np.isin(steps, list(skipped))
        fin = judged & np.isfinite(v)
        ok_tail = [
            (r, lr[s]) for s, r, j in zip(steps[-last:], v[-last:], judged[-last:])
            if j and 0 < r < math.inf and s in lr
        ]
        suggested = None
        moved = [i for i, (s, r) in enumerate(zip(steps, v)) if s not in skipped and r > 0]
        not_finite = bool(np.isnan(v).any()) or bool(
            moved and np.isinf(v[moved[0] + 1:]).any())  # NaN, or +inf after its first move
        if ok_tail and not not_finite:
            r, l = np.array(ok_tail).T
            suggested = math.exp(np.log(l).mean()) * target / math.exp(np.log(r).mean())
        out[tag] = {
            "logged_steps": len(steps),
            "median": float(np.median(v[fin])) if fin.any() else None,
            "last": v[-1],
            "above": int((fin & (v > HIGH)).sum()),
            "below": int((fin & (v < LOW)).sum()),
            "nonfinite": int((~np.isfinite(v)).sum()),
            "suggested_learning_rate": suggested,
        }
    return out


def _same(got, want):
    if want is None or got is None:
        return got is want
    if isinstance(want, float) and math.isnan(want):
        return got == "NaN"
    if isinstance(want, float) and math.isinf(want):
        return got == "Infinity"
    return got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("load_fast,band", [
    ("true", []), ("false", []), ("false", ["--low", "1e-4", "--high", "1e-2"]),
])
def test_json_numbers_against_the_export(logdir, backend, capsys, load_fast, band):
    status, out = _report(capsys, logdir, "--format", "json", "--load_fast", load_fast, *band)
    assert status == 0
    answer = json.loads(out)
    assert [r["run"] for r in answer["runs"]] == ["a/train", "b/train", "c/eval"]
    params = {"low": "1e-4", "high": "1e-2"} if band else {}
    for r in answer["runs"]:
        assert (r["low"], r["high"], r["patience"]) == ((1e-4, 1e-2) if band else (None, None)) + (5,)
        want = _expected(backend, r["run"])
        skipped = len(_skipped(backend, r["run"]))
        assert [l["tag"] for l in r["layers"]] == list(want)  # model order, as /export
        route = backend.json("flags", run=r["run"], **params)
        assert (route["low"], route["high"]) == (r["low"], r["high"])
        flagged = {f["tag"]: f for f in route["layers"]}
        for layer in r["layers"]:
            assert set(layer) == {"tag", "logged_steps", "median", "last", "above", "below",
                                  "nonfinite", "flagged", "reason", "since", "text",
                                  "judged_steps", "skipped_steps", "steps_in_a_row",
                                  "steps_in_total", "suggested_learning_rate"}
            for key, value in want[layer["tag"]].items():
                assert _same(layer[key], value), (r["run"], layer["tag"], key, layer[key], value)
            assert layer["skipped_steps"] == skipped
            assert layer["judged_steps"] == layer["logged_steps"] - skipped
            assert layer["flagged"] == (layer["tag"] in flagged)
            f = flagged.get(layer["tag"], {})
            # the tab's flags and the report say the same thing, word for word
            for key in ("reason", "since", "text", "steps_in_a_row", "steps_in_total",
                        "judged_steps", "skipped_steps"):
                assert layer[key] == f.get(key, layer[key] if key.endswith("ed_steps") else None)
            assert (layer["text"] is not None) == layer["flagged"]
    a = {l["tag"]: l for l in answer["runs"][0]["layers"]}
    assert a["net/out/bias"]["flagged"] and a["net/out/bias"]["since"] == 40  # NaN
    assert a["net/out/bias"]["reason"] == "nan" and "NaN" in a["net/out/bias"]["text"]
    assert a["net/out/bias"]["suggested_learning_rate"] is None  # not finite: no suggestion
    assert not a["net/dense/bias"]["flagged"] or a["net/dense/bias"]["since"] != 0
    assert a["net/out/kernel"]["below"] > 0
    if band:
        assert (a["net/out/kernel"]["since"], a["net/out/kernel"]["reason"]) == (0, "below_band")
    else:  # the default judgement: no band, and 3e-5 among peers at 1e-3 is no defect
        assert not a["net/out/kernel"]["flagged"]
        assert [l["tag"] for l in a.values() if l["flagged"]] == ["net/out/bias"]
    # c/eval logs no learning rate: no suggestion
    assert all(l["suggested_learning_rate"] is None for l in answer["runs"][2]["layers"])


def _number(x):
    return "-" if x is None else ("nan" if isinstance(x, float) and math.isnan(x) else (
        "inf" if x == math.inf else f"{x:.3g}"))


@pytest.mark.parametrize("band", [[], ["--high", "1e-2"]])
def test_text_table_against_the_export(logdir, backend, capsys, band):
    status, out = _report(capsys, logdir, "--run", "^a/", "--load_fast", "false", *band)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("run a/train: ") and "b/train" not in out
    assert ("band [0.0001, 0.01]" if band else "default judgement") in lines[0]
    header = lines[1].split()
    assert header == ["layer", "steps", "skipped", "median", "last", "above", "below",
                      "nonfinite", "flagged", "since", "suggested_lr"]
    width = len(lines[1])
    n_rows = next(i for i, l in enumerate(lines[2:]) if l.startswith("  "))
    rows = [l.split() for l in lines[2: 2 + n_rows]]
    want = _expected(backend, "a/train")
    skipped = len(_skipped(backend, "a/train"))
    params = {"high": "1e-2"} if band else {}
    flagged = {f["tag"]: f for f in backend.json("flags", run="a/train", **params)["layers"]}
    assert flagged and len(rows) == len(want)
    # flagged layers first, in the order of /flags
    assert [r[0] for r in rows[: len(flagged)]] == [f["tag"] for f in flagged.values()]
    for row in rows:
        w = want[row[0]]
        assert row[1:8] == [str(w["logged_steps"]), str(skipped), _number(w["median"]),
                            _number(w["last"]), str(w["above"]), str(w["below"]),
                            str(w["nonfinite"])]
        f = flagged.get(row[0])
        assert row[8:10] == ([f["reason"], str(f["since"])] if f else ["no", "-"])
        assert row[10] == _number(w["suggested_learning_rate"])
    for line in lines[1: 2 + len(rows)]:  # aligned: the right-aligned last column ends together
        assert len(line) == width
    # then one line per flagged layer: the tab's text, word for word, and the suggestion's
    # assumption
    texts = lines[2 + n_rows: 2 + n_rows + len(flagged)]
    assert texts == [f"  {tag}: {f['text']}" for tag, f in flagged.items()]
    assert lines[2 + n_rows + len(flagged)] == f"  suggested_lr = lr * target / ratio. {suggest.CAVEAT}"


def test_compare_ranking_against_numpy(logdir, backend, capsys):
    status, out = _report(capsys, logdir, "--format", "json", "--compare", "a/train", "b/train",
                          "--run", "^a/", "--load_fast", "false")
    assert status == 0
    ranking = json.loads(out)["compare"]
    assert (ranking["run_a"], ranking["run_b"]) == ("a/train", "b/train")
    ea = backend.json("export", run="a/train", format="json")
    eb = backend.json("export", run="b/train", format="json")
    skipped = _skipped(backend, "a/train") | _skipped(backend, "b/train")
    want = {}
    for tag in set(ea) & set(eb):
        va = {p[1]: float(p[2]) for p in ea[tag]}
        vb = {p[1]: float(p[2]) for p in eb[tag]}
        d = [math.log10(va[s] / vb[s]) for s in sorted(set(va) & set(vb))
             if s not in skipped and 0 < va[s] < math.inf and 0 < vb[s] < math.inf]
        want[tag] = (float(np.median(np.abs(d))), float(np.median(d)), len(d))
    got = ranking["layers"]
    assert {l["tag"] for l in got} == set(want) and "net/extra/kernel" not in want
    for l in got:
        div, med, n = want[l["tag"]]
        assert l["divergence"] == pytest.approx(div) and l["median_log10_ratio"] == pytest.approx(med)
        assert l["steps"] == n
    assert [l["divergence"] for l in got] == sorted((l["divergence"] for l in got), reverse=True)
    # b's ratios are about 3x a's: the signed median is near -log10(3)
    assert np.median([l["median_log10_ratio"] for l in got]) == pytest.approx(-math.log10(3), abs=0.3)
    # the text output ranks the same
    status, text = _report(capsys, logdir, "--compare", "a/train", "b/train", "--load_fast", "false")
    section = text[text.index("compare a/train / b/train"):].splitlines()
    assert [line.split()[0] for line in section[2:] if line.strip()] == [l["tag"] for l in got]


def test_suggestions_options_and_route(logdir, backend, capsys):
    status, out = _report(capsys, logdir, "--format", "json", "--target", "1e-2", "--last", "3",
                          "--run", "b/", "--load_fast", "false")
    (run,) = json.loads(out)["runs"]
    want = _expected(backend, "b/train", target=1e-2, last=3)
    route = {l["tag"]: l for l in backend.json("suggestions", run="b/train", target="1e-2", last="3")["layers"]}
    for layer in run["layers"]:
        assert _same(layer["suggested_learning_rate"], want[layer["tag"]]["suggested_learning_rate"])
        assert _same(route[layer["tag"]]["suggested_learning_rate"], want[layer["tag"]]["suggested_learning_rate"])
    assert backend.json("suggestions", run="c/eval")["has_learning_rate"] is False
    # the route states its formula and assumption; a layer with a NaN gets no suggestion
    a = backend.json("suggestions", run="a/train")
    assert a["formula"] == "lr * target / ratio"
    assert a["assumes"] == "update proportional to the learning rate (SGD, momentum, Adam, AdamW)"
    # one caveat, in the route's words and the report's (the tab shows the route's)
    assert a["caveat"].startswith(f"Assumes an {a['assumes']}: exact for the next update")
    assert a["caveat"] == run["suggestions_caveat"] == suggest.CAVEAT
    by_tag = {l["tag"]: l for l in a["layers"]}
    assert by_tag["net/out/bias"]["finite"] is False
    assert by_tag["net/out/bias"]["suggested_learning_rate"] is None
    assert by_tag["net/out/bias"]["ratio"] is not None  # its last steps alone were usable
    # the zero-initialised bias (+inf at its first update only) keeps its suggestion
    assert by_tag["net/dense/bias"]["finite"] is True
    assert by_tag["net/dense/bias"]["suggested_learning_rate"] is not None
    assert backend.get("suggestions", run="nope").status_code == 404
    assert backend.get("suggestions", run="a/train", last="0").status_code == 400


def _tb_wur():
    path = shutil.which("tb-wur") or os.path.join(os.path.dirname(sys.executable), "tb-wur")
    assert os.path.exists(path), "the tb-wur console script is not installed"
    return path


@pytest.mark.parametrize("args,status,reason", [
    (["{logdir}"], 0, None),
    (["{logdir}", "--fail-on-flags"], 1, None),
    (["{logdir}", "--fail-on-flags", "--run", "c/eval", "--high", "1", "--low", "1e-9"], 0, None),
    (["{missing}"], 2, "no such directory"),
    (["{file}"], 2, "not a directory"),
    (["{empty}"], 2, "no wur ratios"),
    (["{logdir}", "--run", "zzz"], 2, "selects no run"),
    (["{logdir}", "--run", "("], 2, "regular expression"),
    (["{logdir}", "--low", "1e-2", "--high", "1e-3"], 2, "must be below"),
    (["{logdir}", "--low", "-1"], 2, "positive"),
    (["{logdir}", "--patience", "0"], 2, "at least 1"),
    (["{logdir}", "--format", "xml"], 2, "invalid choice"),
    (["{logdir}", "--compare", "a/train", "nope"], 2, "no run 'nope'"),
    (["{logdir}", "--last", "x"], 2, "must be an integer"),
    ([], 2, "LOGDIR"),
])
def test_exit_status_of_the_console_script(logdir, tmp_path, args, status, reason):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "other").mkdir()
    (tmp_path / "file").write_text("not a logdir")
    args = [a.format(logdir=logdir, missing=str(tmp_path / "missing"), empty=str(tmp_path / "empty"),
                     file=str(tmp_path / "file"))
            for a in args]
    done = subprocess.run([_tb_wur(), "report", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    if reason:
        assert reason in done.stderr and not done.stdout
    else:
        assert "run a/train" in done.stdout or "run c/eval" in done.stdout


@pytest.mark.parametrize("load_fast", ["true", "false"])
def test_a_logdir_that_is_a_run_directory_names_the_run_after_it(logdir, tmp_path, capsys,
                                                                    load_fast):
    """TensorBoard names the run of a logdir's own event files "."; the report names it after
    the directory, in its text and JSON, and takes that name in --run and --compare, also
    beside a subdirectory's run. A subdirectory of that name keeps "." for the logdir's."""
    run_dir = os.path.join(logdir, "a", "train")
    status, out = _report(capsys, run_dir, "--format", "json", "--load_fast", load_fast)
    assert status == 0
    assert [r["run"] for r in json.loads(out)["runs"]] == ["train"]
    status, out = _report(capsys, run_dir, "--load_fast", load_fast)
    assert status == 0 and out.startswith("run train: ") and "run .:" not in out
    nested = tmp_path / "trial"
    with SummaryWriter(str(nested)) as w:
        w.add_ratios({"net/kernel": 1e-3, "net/other": 2e-3}, 0)
    with SummaryWriter(str(nested / "eval")) as w:
        w.add_ratios({"net/kernel": 3e-3}, 0)
    status, out = _report(capsys, str(nested), "--format", "json", "--load_fast", load_fast,
                          "--run", "^trial$", "--compare", "trial", "eval")
    answer = json.loads(out)
    assert status == 0 and [r["run"] for r in answer["runs"]] == ["trial"]
    assert (answer["compare"]["run_a"], answer["compare"]["run_b"]) == ("trial", "eval")
    with SummaryWriter(str(nested / "trial")) as w:
        w.add_ratios({"net/kernel": 1e-3}, 0)
    status, out = _report(capsys, str(nested) + os.sep, "--format", "json", "--load_fast", load_fast)
    assert status == 0 and [r["run"] for r in json.loads(out)["runs"]] == [".", "eval", "trial"]


def test_compare_route_matches_the_report(logdir, backend, capsys):
    from tb_wur_plugin.web import heatmap_wire

    response = backend.client.get("/data/plugin/wur/compare", query_string={
        "run_a": "a/train", "run_b": "b/train"}, headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    header, arrays = heatmap_wire.unpack(response.get_data())
    _, out = _report(capsys, logdir, "--format", "json", "--compare", "a/train", "b/train",
                     "--load_fast", "false")
    assert header["ranking"] == json.loads(out)["compare"]["layers"]
    ea = backend.json("export", run="a/train", format="json")
    eb = backend.json("export", run="b/train", format="json")
    cells = heatmap_wire.decode_cells(arrays["codes"]).reshape(len(header["tags"]), header["columns"])
    steps = arrays["column_first"]
    skipped = _skipped(backend, "a/train")
    for row, tag in enumerate(header["tags"]):
        va = {p[1]: float(p[2]) for p in ea[tag]}
        vb = {p[1]: float(p[2]) for p in eb[tag]}
        for col, step in enumerate(steps):
            step = int(step)
            if step in skipped:
                assert math.isnan(cells[row, col])  # missing decodes as NaN
            elif math.isnan(va[step]):
                assert math.isnan(cells[row, col])
            elif math.isfinite(va[step]):
                assert cells[row, col] == pytest.approx(va[step] / vb[step], rel=6e-3)
    assert backend.get("compare", run_a="a/train").status_code == 400
    assert backend.get("compare", run_a="a/train", run_b="nope").status_code == 404

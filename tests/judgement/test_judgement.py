"""The default judgement on real training runs (tests/support/judgement_corpus.py): healthy runs get
no flag, each seeded defect exactly its layers with its reason — through `tb-wur report`
(in-process and the installed console script, both loaders) and through `/flags` (the
in-process plugin and the real `tensorboard`), which say the same thing word for word. And
the suggested learning rate, checked against a real next step of PyTorch SGD and Adam."""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import pytest

import judgement_corpus
from backend import Backend
from tb_server import TensorBoardServer
from tb_wur_plugin import cli

RUNS = {run.name: run for run in judgement_corpus.RUNS}
HEALTHY = [n for n, r in RUNS.items() if r.healthy]
SICK = [n for n, r in RUNS.items() if not r.healthy]




@pytest.fixture(scope="session")
def reported(corpus):
    """`tb-wur report --format json` of the whole corpus (Python loader), by run."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["report", corpus, "--format", "json", "--fail-on-flags",
                           "--load_fast", "false"])
    assert status == 1  # the sick runs
    return {r["run"]: r for r in json.loads(out.getvalue())["runs"]}


def _flags_of(layers):
    return {l["tag"]: l["reason"] for l in layers if l.get("flagged", True)}


def test_the_corpus_is_what_it_says(reported):
    assert sorted(reported) == sorted(RUNS)
    assert len(HEALTHY) >= 12 and len(SICK) >= 8
    frameworks = {RUNS[n].framework for n in HEALTHY}
    assert frameworks == {"pytorch", "keras", "jax"}
    for name, run in RUNS.items():
        tags = [l["tag"] for l in reported[name]["layers"]]
        assert set(run.expected) <= set(tags), (name, tags)  # the seeded layers exist
        assert all(l["logged_steps"] >= 16 for l in reported[name]["layers"])
        # every layer has a known kind: its shape came with the ratios
        kinds = {l["tag"]: l for l in reported[name]["layers"]}
        assert all(l["judged_steps"] > 0 for l in kinds.values())


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_run_gets_no_flag(corpus, reported, name, capsys):
    assert _flags_of(reported[name]["layers"]) == {}
    assert cli.main(["report", corpus, "--run", f"^{re.escape(name)}$",
                     "--fail-on-flags", "--load_fast", "false"]) == 0
    out = capsys.readouterr().out
    assert f"run {name}: 0 of " in out and "default judgement" in out


@pytest.mark.parametrize("name", SICK)
def test_a_seeded_defect_flags_exactly_its_layers_with_its_reason(corpus, reported, name, capsys):
    layers = reported[name]["layers"]
    assert _flags_of(layers) == RUNS[name].expected
    for layer in layers:
        if layer["flagged"]:
            assert layer["text"].startswith(layer["reason"].replace("_", " ").replace("nan", "NaN"))
            assert f"step {layer['since']}" in layer["text"]
    assert cli.main(["report", corpus, "--run", f"^{re.escape(name)}$",
                     "--fail-on-flags", "--load_fast", "false"]) == 1
    out = capsys.readouterr().out
    for tag, reason in RUNS[name].expected.items():
        assert re.search(rf"^{re.escape(tag)} .* {reason} ", out, re.M), (tag, out)


def test_the_zero_ratio_of_a_frozen_layer_reads_did_not_move(reported):
    for name in ("torch_frozen_group", "jax_frozen_layer"):
        for layer in reported[name]["layers"]:
            if layer["flagged"]:
                assert "ratio 0 (did not move)" in layer["text"], layer["text"]
                assert "in a row" in layer["text"]


def test_the_route_says_what_the_report_says(corpus, reported):
    backend = Backend(corpus)
    for name, run in reported.items():
        answer = backend.json("flags", run=name)
        assert (answer["low"], answer["high"], answer["patience"]) == (None, None, 5)
        by_tag = {l["tag"]: l for l in run["layers"]}
        assert [f["tag"] for f in answer["layers"]] == sorted(
            (t for t, l in by_tag.items() if l["flagged"]),
            key=lambda t: (by_tag[t]["reason"] != "nan", by_tag[t]["since"], t))
        for f in answer["layers"]:
            layer = by_tag[f["tag"]]
            for key in ("reason", "since", "text", "steps_in_a_row", "steps_in_total",
                        "judged_steps", "skipped_steps"):
                assert f[key] == layer[key], (name, f["tag"], key)


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_the_real_tensorboard_flags_the_corpus(corpus, reported, load_fast):
    with TensorBoardServer(corpus, load_fast) as server:
        server.wait_for(lambda d: len(d["runs"]) == len(RUNS), "/data/plugin/wur/runs")
        for name, run in RUNS.items():
            answer = server.get_json(f"/data/plugin/wur/flags?run={urllib.parse.quote(name)}")
            assert {f["tag"]: f["reason"] for f in answer["layers"]} == run.expected, name
            assert [f["text"] for f in answer["layers"]] == [
                l["text"] for l in sorted(
                    (l for l in reported[name]["layers"] if l["flagged"]),
                    key=lambda l: (l["reason"] != "nan", l["since"], l["tag"]))]


def test_the_console_script_exits_0_on_the_healthy_runs_and_1_on_the_sick(corpus):
    tb_wur = shutil.which("tb-wur") or os.path.join(os.path.dirname(sys.executable), "tb-wur")
    healthy = "^(" + "|".join(re.escape(n) for n in HEALTHY) + ")$"
    done = subprocess.run([tb_wur, "report", corpus, "--run", healthy, "--fail-on-flags"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" layers flagged (default judgement") == len(HEALTHY)
    assert all(f"run {n}: 0 of " in done.stdout for n in HEALTHY)
    for name in SICK:
        done = subprocess.run(
            [tb_wur, "report", corpus, "--run", f"^{re.escape(name)}$", "--fail-on-flags",
             "--format", "json"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stderr
        (run,) = json.loads(done.stdout)["runs"]
        assert _flags_of(run["layers"]) == RUNS[name].expected


def test_an_explicit_band_adds_the_band_rule_on_the_corpus(corpus, capsys):
    # the healthy Adam run's matrices move at ~1e-2 and more: above a band of [1e-4, 1e-3]
    assert cli.main(["report", corpus, "--run", "^torch_adam_layernorm$", "--high", "1e-3",
                     "--format", "json", "--load_fast", "false", "--fail-on-flags"]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert (run["low"], run["high"]) == (1e-4, 1e-3)
    reasons = {l["reason"] for l in run["layers"] if l["flagged"]}
    assert reasons == {"above_band"}
    route = Backend(corpus).json("flags", run="torch_adam_layernorm", high="1e-3")
    assert {f["tag"]: f["text"] for f in route["layers"]} == {
        l["tag"]: l["text"] for l in run["layers"] if l["flagged"]}


# --- the suggested learning rate, against a real next step -------------------------------


def _next_step_ratio(torch, model, optimizer, x, y, lr):
    """Each parameter's ‖Δw‖/‖w‖ of one more step at `lr` from copies of the model and the
    optimizer's state."""
    model = copy.deepcopy(model)
    state = copy.deepcopy(optimizer.state_dict())
    accepted = inspect.signature(type(optimizer)).parameters
    new = type(optimizer)(model.parameters(),
                          **{k: v for k, v in optimizer.defaults.items() if k in accepted})
    new.load_state_dict(state)
    for group in new.param_groups:
        group["lr"] = lr
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    new.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    new.step()
    return {n.replace(".", "/"): float((p.detach() - before[n]).norm() / before[n].norm())
            for n, p in model.named_parameters()}


@pytest.mark.parametrize("family", ["sgd_momentum", "adam", "adamw"])
def test_the_suggestion_brings_the_next_update_to_the_target(tmp_path, family, capsys):
    """lr * target / ratio is what the report gives, and what it says it assumes: the update
    is proportional to the learning rate at the logged state (SGD with momentum and
    Adam-type optimizers alike). One more step from the same weights and optimizer state
    at the suggested rate moves the layer by the target ratio."""
    torch = judgement_corpus._torch()
    from tb_wur_plugin.torch import watch

    x, y = (torch.as_tensor(a) for a in judgement_corpus.digits(64))
    model = judgement_corpus._torch_mlp(torch)
    optimizer = {
        "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
    }[family](model.parameters())
    for _ in range(5):  # some state: momentum, Adam's moments
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    lr = optimizer.param_groups[0]["lr"]
    # the logged step is the next one from this state, on the same batch
    want_ratio = _next_step_ratio(torch, model, optimizer, x, y, lr)
    snapshot = copy.deepcopy((model, optimizer))  # the optimizer bound to the model's copy
    handle = watch(optimizer, model, str(tmp_path), every=1)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    handle.remove()
    target = 2e-3
    assert cli.main(["report", str(tmp_path), "--format", "json", "--last", "1",
                     "--target", str(target), "--load_fast", "false"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["suggestions_assume"].startswith("update proportional to the learning rate")
    model0, optimizer0 = snapshot
    for layer in run["layers"]:
        ratio = want_ratio[layer["tag"]]
        assert layer["last"] == pytest.approx(ratio, rel=1e-4)
        suggested = layer["suggested_learning_rate"]
        assert suggested == pytest.approx(lr * target / ratio, rel=1e-4)
        got = _next_step_ratio(torch, model0, optimizer0, x, y, suggested)
        assert got[layer["tag"]] == pytest.approx(target, rel=1e-3), layer["tag"]


@pytest.mark.parametrize("name", ["torch_killed", "torch_frozen_group", "torch_adam_layernorm"])
def test_the_spectral_judgement_of_real_runs(corpus, name):
    """The corpus's runs, written with spectral ratios too, judged on them (`--metric spectral`,
    `/flags?metric=spectral`): the matrices of the expected flags, with the same reasons.
    A network whose matrices all died while its last bias still moves (torch_killed) is
    `not_moving` there too: the run's Frobenius ratios say that the run moves."""
    import contextlib
    import io

    run = RUNS[name]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["report", corpus, "--run", f"^{re.escape(name)}$", "--format", "json",
                           "--metric", "spectral", "--load_fast", "false", "--fail-on-flags"])
    (report,) = json.loads(out.getvalue())["runs"]
    matrices = {l["tag"] for l in report["layers"]}
    assert matrices and all(t.endswith("weight") for t in matrices)
    want = {t: why for t, why in run.expected.items() if t in matrices}
    assert _flags_of([l for l in report["layers"] if l["flagged"]]) == want
    assert status == (1 if want else 0)
    answer = Backend(corpus).json("flags", run=name, metric="spectral")
    assert answer["metric"] == "spectral" and _flags_of(answer["layers"]) == want

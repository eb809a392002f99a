"""The judgement (judgement/judge.py) on hand-made series, and /flags and `tb-wur report` flagging the
same layers of the same logdir."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from backend import Backend
from tb_wur_plugin import cli
from tb_wur_plugin.judgement import judge as judgement
from tb_wur_plugin.read import heatmap
from tb_wur_plugin.writer import SummaryWriter

# in the band [1e-4, 1e-2], above it, below it; float32, the precision the matrix holds
IN, HI, LO = (float(np.float32(x)) for x in (1e-3, 5e-2, 1e-6))


def judge(values, skipped=(), patience=5, steps=None):
    steps = np.arange(len(values)) if steps is None else np.asarray(steps)
    matrix = heatmap.RunMatrix.from_series(
        [("layer", steps, np.asarray(values, np.float64))], skipped
    )
    (layer,) = judgement.judge_layers(matrix, 1e-4, 1e-2, patience)
    assert layer["flagged"] == (layer["since"] is not None)
    assert (layer["reason"] is None) == (not layer["flagged"])
    return layer


def test_isolated_out_of_band_steps_are_not_a_streak():
    values = [IN, HI, IN, HI, HI, IN, LO, LO, LO, LO, IN, HI, HI, HI, HI]  # at most 4 in a row
    layer = judge(values)
    assert not layer["flagged"] and layer["since"] is None
    assert (layer["above"], layer["below"]) == (7, 4)
    assert judge(values, patience=4)["since"] == 6  # LO x 4 from step 6
    assert judge(values, patience=1)["since"] == 1
    assert judge(values, patience=1)["reason"] == "above_band"


def test_a_streak_of_patience_steps_flags_since_its_first_step():
    layer = judge([IN, IN, HI, HI, HI, HI, HI, HI, IN], steps=[0, 10, 20, 30, 40, 50, 60, 70, 80])
    assert (layer["since"], layer["reason"], layer["streak_length"]) == (20, "above_band", 6)
    assert (layer["steps_in_a_row"], layer["steps_in_total"]) == (6, 6)
    assert layer["text"] == (
        "above band: ratio above the band's high edge 0.01 (median 0.05) at 6 judged steps in "
        "a row from step 20")
    layer = judge([IN, 0.0, 0.0, 0.0, 0.0, 0.0])  # 0 is below, and said to be no movement
    assert (layer["since"], layer["reason"]) == (1, "below_band")
    assert layer["text"] == "below band: ratio 0 (did not move) at 5 judged steps in a row from step 1"
    layer = judge([HI, LO, HI, LO, HI])  # both sides: named by the side of its first step
    assert (layer["since"], layer["reason"]) == (0, "above_band")
    assert judge([LO, HI, LO, HI, LO])["reason"] == "below_band"
    assert judge([HI] * 4)["flagged"] is False
    assert judge([HI] * 4, patience=4)["since"] == 0


def test_inf_at_the_first_step_is_expected_later_it_flags():
    assert not judge([math.inf, IN, IN, IN])["flagged"]
    layer = judge([math.inf, IN, math.inf, IN])
    assert (layer["since"], layer["reason"], layer["nonfinite"]) == (2, "inf", 2)
    # the first logged step of the layer, not of the run: a layer added later
    matrix = heatmap.RunMatrix.from_series(
        [("a", np.arange(6), np.full(6, IN)), ("b", np.arange(3, 6), np.array([math.inf, IN, IN]))]
    )
    assert [l["flagged"] for l in judgement.judge_layers(matrix, 1e-4, 1e-2, 5)] == [False, False]


def test_nan_at_any_step_flags():
    for at in (0, 3):
        values = [IN] * 5
        values[at] = math.nan
        layer = judge(values)
        assert (layer["since"], layer["reason"], layer["nonfinite"]) == (at, "nan", 1)
    # the earliest finding wins: a streak from 0, NaN at 6
    layer = judge([HI] * 6 + [math.nan])
    assert (layer["since"], layer["reason"], layer["nan_since"], layer["streak_since"]) == (0, "above_band", 6, 0)


def test_skipped_and_non_finite_steps_neither_extend_nor_break_a_streak():
    # HI x3, a skipped step (0 by design), HI x2: one streak of 5 judged steps from 0
    layer = judge([HI, HI, HI, 0.0, HI, HI], skipped=[3])
    assert (layer["since"], layer["streak_length"], layer["below"]) == (0, 5, 0)
    # ... and the skipped steps alone are no streak, nor count below
    layer = judge([IN, 0.0, 0.0, 0.0, 0.0, 0.0, IN], skipped=[1, 2, 3, 4, 5])
    assert not layer["flagged"] and layer["below"] == 0 and layer["median"] == IN
    # an in-band step breaks it
    assert not judge([HI, HI, HI, IN, HI, HI])["flagged"]
    # a non-finite step neither extends nor breaks (+inf at the first step: not flagged)
    layer = judge([math.inf, HI, HI, HI, HI])
    assert not layer["flagged"]
    layer = judge([math.inf, HI, HI, HI, HI, HI])
    assert (layer["since"], layer["streak_length"]) == (1, 5)
    # a later +inf inside: flagged at the inf, the streak counted through it
    layer = judge([HI, HI, math.inf, HI, HI, HI])
    assert (layer["since"], layer["reason"], layer["streak_since"], layer["streak_length"]) == (
        0, "above_band", 0, 5)
    # +inf at the first update after skipped steps is the first update's: not flagged
    assert not judge([0.0, 0.0, math.inf, IN, IN], skipped=[0, 1])["flagged"]


def test_patience_must_be_positive():
    with pytest.raises(ValueError):
        judge([IN], patience=0)


def _write_agreement_logdir(logdir):
    """Runs with each kind of finding, and one where the old rule (any step out) flagged all."""
    rng = np.random.default_rng(3)
    with SummaryWriter(f"{logdir}/mixed") as w:
        for step in range(40):
            ratios = {
                "ok/kernel": 1e-3 * math.exp(rng.normal(0, 0.3)),
                "ok/bias": math.inf if step == 0 else 2e-3,  # zero-initialised bias
                "spiky/kernel": 5e-2 if step % 7 == 3 else 1e-3,
                "hot/kernel": 5e-2 if 10 <= step < 17 else 1e-3,
                "cold/kernel": 1e-6 if step >= 30 else 1e-3,
                "broken/kernel": math.nan if step == 25 else 1e-3,
                "late_inf/kernel": math.inf if step == 12 else 1e-3,
            }
            skipped = step in (20, 21, 22)
            if skipped:
                ratios = {k: 0.0 for k in ratios}
            w.add_ratios(ratios, step, skipped=skipped)
    with SummaryWriter(f"{logdir}/calm") as w:
        for step in range(10):
            w.add_ratios({"a/kernel": math.inf if step == 0 else 1e-3, "a/bias": 1e-3}, step)


@pytest.fixture(scope="module")
def agreement_logdir(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("agreement"))
    _write_agreement_logdir(logdir)
    return logdir


@pytest.mark.parametrize("settings", [
    {}, {"patience": "1"}, {"patience": "3", "low": "1e-5", "high": "0.1"}, {"patience": "8"},
])
def test_the_route_and_the_report_flag_the_same_layers(agreement_logdir, settings, capsys):
    backend = Backend(agreement_logdir)
    args = [f"--{k}={v}" for k, v in settings.items()]
    assert cli.main(["report", agreement_logdir, "--format", "json", "--load_fast", "false", *args]) == 0
    reported = {r["run"]: r["layers"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert sorted(reported) == ["calm", "mixed"]
    for run, layers in reported.items():
        answer = backend.json("flags", run=run, **settings)
        assert answer["patience"] == int(settings.get("patience", 5))
        route = {f["tag"]: f["since"] for f in answer["layers"]}
        assert route == {l["tag"]: l["since"] for l in layers if l["flagged"]}
        assert all(l["since"] is None for l in layers if not l["flagged"])


def test_the_default_flags_of_the_mixed_run(agreement_logdir):
    answer = Backend(agreement_logdir).json("flags", run="mixed")
    got = {f["tag"]: (f["since"], f["reason"]) for f in answer["layers"]}
    # the writer records no shapes here: every layer is of unknown kind, all are peers
    assert got == {
        "broken/kernel": (25, "nan"),
        "late_inf/kernel": (12, "inf"),
        "hot/kernel": (10, "fast_outlier"),  # 5e-2 among peers at 1e-3: 50x
        "cold/kernel": (30, "slow_outlier"),  # 1e-6: 1000x below
    }
    assert (answer["low"], answer["high"], answer["patience"]) == (None, None, 5)
    assert [f["tag"] for f in answer["layers"]][0] == "broken/kernel"  # NaN first, then by since
    assert [f["tag"] for f in answer["layers"]][1:] == ["hot/kernel", "late_inf/kernel", "cold/kernel"]
    hot = {f["tag"]: f for f in answer["layers"]}["hot/kernel"]
    assert (hot["steps_in_a_row"], hot["steps_in_total"], hot["skipped_steps"]) == (7, 7, 3)
    assert hot["text"] == (
        "fast outlier: ratio 50× above the median of the run's other layers (its median ratio "
        "0.05, the others' 0.001) at 7 judged steps in a row from step 10")
    assert Backend(agreement_logdir).json("flags", run="calm")["layers"] == []
    # an explicit band adds the band rule; at the same step the default judgement's reason wins
    banded = Backend(agreement_logdir).json("flags", run="mixed", high="0.04")
    assert (banded["low"], banded["high"]) == (1e-4, 0.04)
    assert {f["tag"]: (f["since"], f["reason"]) for f in banded["layers"]} == got
    banded = Backend(agreement_logdir).json("flags", run="mixed", low="2e-3", patience="3")
    assert {f["tag"]: f["reason"] for f in banded["layers"]}["ok/kernel"] == "below_band"


@pytest.mark.parametrize("patience", ["0", "-1", "x", "1.5"])
def test_bad_patience_is_400(agreement_logdir, patience):
    response = Backend(agreement_logdir).get("flags", run="mixed", patience=patience)
    assert response.status_code == 400
    assert "patience" in response.get_data(as_text=True)


# --- the default judgement, rule by rule, on hand-made runs -------------------------------------

M, V = "matrix", "vector"


def run_of(rows, skipped=(), steps=None):
    """A matrix of {tag: values} (every layer logged at every step)."""
    n = len(next(iter(rows.values())))
    steps = np.arange(n) if steps is None else np.asarray(steps)
    return heatmap.RunMatrix.from_series(
        [(tag, steps, np.asarray(v, np.float64)) for tag, v in rows.items()], skipped)


def default(rows, kinds=None, patience=5, skipped=(), **band):
    matrix = run_of(rows, skipped)
    judged = judgement.judge_layers(matrix, band.get("low"), band.get("high"), patience, kinds)
    return {l["tag"]: l for l in judged}


def flagged(rows, kinds=None, **kw):
    return {t: (l["reason"], l["since"]) for t, l in default(rows, kinds, **kw).items()
            if l["flagged"]}


def test_not_moving_is_a_zero_while_the_run_moves():
    rng = np.random.default_rng(0)
    moving = lambda: list(1e-3 * np.exp(rng.normal(0, 0.3, 12)))  # noqa: E731
    rows = {"a": moving(), "b": moving(), "frozen": [1e-3] * 4 + [0.0] * 8}
    layers = default(rows)
    assert flagged(rows) == {"frozen": ("not_moving", 4)}
    assert layers["frozen"]["text"] == (
        "not moving: ratio 0 (did not move) at 8 judged steps in a row from step 4 while the "
        "run's other layers moved")
    assert (layers["frozen"]["steps_in_a_row"], layers["frozen"]["steps_in_total"]) == (8, 8)
    # below 1e-9 is no real movement either, and said so
    rows["frozen"] = [1e-3] * 4 + [1e-11] * 8
    assert "ratio below 1e-09 (no real movement" in default(rows)["frozen"]["text"]
    # a run that stops as a whole (converged; not marked skipped) is not judged
    assert flagged({"a": [1e-3] * 3 + [0.0] * 9, "b": [1e-3] * 3 + [0.0] * 9}) == {}
    # nor are skipped steps, where every ratio is 0 by design
    skipped = list(range(3, 12))
    assert flagged({k: [1e-3] * 3 + [0.0] * 9 for k in "abc"}, skipped=skipped) == {}
    # 4 zeros in a row are no streak of 5
    rows["frozen"] = [1e-3, 0, 0, 0, 0, 1e-3] * 2
    assert flagged(rows) == {}


def test_a_converging_run_is_tiny_everywhere_at_once_and_not_flagged():
    decay = np.logspace(-3, -8, 60)
    rng = np.random.default_rng(1)
    rows = {f"l{i}": decay * np.exp(rng.normal(0, 0.3, 60)) for i in range(4)}
    assert flagged(rows, [M, M, V, V]) == {}
    assert flagged(rows, [M, M, V, V], low=1e-4)["l0"][0] == "below_band"  # a band does flag


def test_too_fast_is_sustained_and_a_zero_initialised_bias_is_not():
    steps = 20
    grows = [math.inf] + [1.0 / k for k in range(1, steps)]  # b_k = k·u: ratio 1/k
    momentum = [math.inf] + [  # SGD momentum 0.9 on a constant gradient, from 0
        (1 - 0.9 ** (k + 1)) / sum(1 - 0.9 ** (j + 1) for j in range(k)) for k in range(1, steps)]
    assert sum(r >= 0.5 for r in momentum[1:]) <= 3
    rows = {"b1": grows, "b2": momentum, "w": [1e-3] * steps,
            "hot": [1e-3] * 5 + [0.7] * 6 + [1e-3] * 9}
    assert flagged(rows) == {"hot": ("too_fast", 5)}
    assert default(rows)["hot"]["text"] == (
        "too fast: ratio at least 0.5 (updates at least half the weights' norm; median 0.7) at "
        "6 judged steps in a row from step 5")


def test_outliers_are_judged_against_peers_of_the_same_kind():
    rng = np.random.default_rng(2)
    n = 10
    noisy = lambda level: list(level * np.exp(rng.normal(0, 0.2, n)))  # noqa: E731
    rows = {"k1": noisy(2e-2), "k2": noisy(2e-2), "k3": noisy(2e-2),
            "scale1": noisy(1e-4), "scale2": noisy(1e-4), "scale3": noisy(1e-4)}
    kinds = [M, M, M, V, V, V]
    # Adam: kernels at lr / rms(w), normalization scales at lr / 1: no defect
    assert flagged(rows, kinds) == {}
    # without kinds (a run written before shapes) all are peers: the scales 200x below
    # the kernels are slow outliers of that mixed crowd only where the kernels are the most
    assert flagged({"a": noisy(2e-2), "b": noisy(2e-2), "c": noisy(2e-2), "s": noisy(1e-4)}) == {
        "s": ("slow_outlier", 0)}
    # a kernel 1000x slower than the other kernels is one
    rows["k3"] = noisy(2e-5)
    assert flagged(rows, kinds) == {"k3": ("slow_outlier", 0)}
    text = default(rows, kinds)["k3"]["text"]
    assert re.match(r"slow outlier: ratio \d{3}× below the median of the run's other matrices "
                    r"\(its median ratio 2\.\d+e-05, the others' 0\.0[12]\d*\)", text), text
    assert text.endswith("at 10 judged steps in a row from step 0")
    # 100x faster at 2.0 is too fast too: at the same step, the first in REASONS wins
    rows["k3"] = noisy(2e-2 * 100)
    assert flagged(rows, kinds)["k3"] == ("too_fast", 0)
    assert default(rows, kinds)["k3"]["fast_outlier_since"] == 0
    rows = {"k1": noisy(1e-4), "k2": noisy(1e-4), "k3": noisy(1e-2)}
    assert flagged(rows, [M, M, M]) == {"k3": ("fast_outlier", 0)}
    # two peers are needed: a pair cannot tell which one is odd
    assert flagged({"k1": noisy(1e-4), "k3": noisy(1e-2)}, [M, M]) == {}
    # among three, one 1000x slow layer is the only outlier: it drags its two healthy peers'
    # leave-one-out medians toward itself (3x apart, each ~55x above the other's and its
    # median), but they are not 10x from the group's median
    rows = {"k1": noisy(1e-3), "k2": noisy(3e-3), "k3": noisy(1e-6)}
    assert flagged(rows, [M, M, M]) == {"k3": ("slow_outlier", 0)}
    # a fast outlier of a converged run (peers ~1e-7) moving at 1e-4 is no defect
    assert flagged({"k1": noisy(1e-7), "k2": noisy(1e-7), "k3": noisy(1e-4)}, [M, M, M]) == {}


def test_layers_growing_from_zero_are_peers_of_each_other_only():
    n = 30
    from_zero = [math.inf] + [1.0 / k for k in range(1, n)]
    rows = {"w1": [1e-3] * n, "w2": [1e-3] * n, "w3": [1e-3] * n,
            "gamma1": [1e-4] * n, "gamma2": [1e-4] * n,
            "beta1": from_zero, "beta2": from_zero, "beta3": from_zero}
    kinds = [M, M, M, V, V, V, V, V]
    # beta's 1/k is 1000x the gammas' at first: not compared
    assert flagged(rows, kinds) == {}
    # the +inf of a bias that first moves late (behind a zero-initialised layer) is expected
    rows["beta3"] = [0.0] * 4 + from_zero[: n - 4]
    assert flagged(rows, kinds) == {}
    rows["beta3"] = [1e-4] * 4 + from_zero[: n - 4]  # it had moved: ‖b‖ back to exactly 0
    assert flagged(rows, kinds)["beta3"] == ("inf", 4)


def test_the_layer_kinds_must_match_the_matrix():
    matrix = run_of({"a": [1e-3], "b": [1e-3]})
    with pytest.raises(ValueError, match="kinds names 1 layers"):
        judgement.judge_layers(matrix, kinds=[M])
    with pytest.raises(ValueError, match="unknown layer kind"):
        judgement.judge_layers(matrix, kinds=[M, "tensor"])
    with pytest.raises(ValueError, match="must be below"):
        judgement.judge_layers(matrix, low=1e-2, high=1e-3)
    with pytest.raises(ValueError, match="patience"):
        judgement.judge_layers(matrix, patience=True)


def test_the_shape_travels_with_the_ratios_and_older_runs_fall_back(tmp_path):
    from tb_wur_plugin import metadata

    with SummaryWriter(str(tmp_path / "new")) as w:
        for step in range(3):
            w.add_ratios({"k": 1e-3, "b": 1e-3, "s": 1e-3}, step,
                         shapes={"k": (3, 2), "b": [2], "s": ()})
    for layout, packed in (("old", False), ("packed_old", True)):  # before the shape field
        with SummaryWriter(str(tmp_path / layout), packed=packed) as w:
            for step in range(3):
                w.add_ratios({"k": 1e-3, "b": 1e-3, "x": 1e-3}, step, descriptions={
                    "k": metadata.ratio_description("k", [3, 2], "float32"),
                    "b": metadata.ratio_description("b", [2], "float32")})
    answer = Backend(str(tmp_path)).json("flags", run="new")  # served
    assert answer["layers"] == []
    from tb_wur_plugin.read import report

    with report.open_logdir(str(tmp_path), load_fast=False) as logdir:
        assert logdir.layer_kinds("new", ("k", "b", "s")) == [M, V, V]
        assert logdir.layer_kinds("old", ("k", "b", "x")) == [M, V, "unknown"]
        assert logdir.layer_kinds("packed_old", ("k", "b", "x")) == [M, V, "unknown"]
    content = metadata.parse_plugin_content(metadata.create_summary_metadata(
        metadata.KIND_RATIO, shape=(3, 2)).plugin_data.content)
    assert content["shape"] == [3, 2]
    with pytest.raises(ValueError, match="only for kind"):
        metadata.create_summary_metadata(metadata.KIND_HISTOGRAM, shape=(3,))
    with pytest.raises(ValueError, match="bad shape"):
        metadata.parse_plugin_content(b'{"version": 1, "kind": "ratio", "shape": [-1]}')
    with pytest.raises(ValueError, match="bad shape"):
        metadata.parse_plugin_content(b'{"version": 1, "kind": "ratio", "shape": "3x2"}')
    with SummaryWriter(str(tmp_path / "bad")) as w:
        with pytest.raises(TypeError, match="shape of 'k'"):
            w.add_ratios({"k": 1e-3}, 0, shapes={"k": [2.5]})
        with pytest.raises(ValueError, match="shape of 'k'"):
            w.add_ratios({"k": 1e-3}, 0, shapes={"k": [-2]})
        with pytest.raises(TypeError, match="mapping"):
            w.add_ratios({"k": 1e-3}, 0, shapes=[(2,)])
    assert metadata.shape_from_description("Weight-update ratio of a: shape [], float32") == []
    assert metadata.shape_from_description("Weight-update ratio of a") is None


def test_judging_in_blocks_of_steps_changes_nothing(monkeypatch):
    """A large run is judged a few steps at a time (every condition of a cell depends on its
    step alone): blocks of 8 steps give what one block gives, texts included."""
    rng = np.random.default_rng(7)
    n = 83
    rows = {f"m{i}": list(10.0 ** rng.normal(-3, 0.3, n)) for i in range(4)}
    rows["m0"][20:40] = [1e-9] * 20  # stalls: not moving while the others move
    rows["m1"][50:70] = [x * 1e-4 for x in rows["m1"][50:70]]  # a slow outlier
    rows.update({f"v{i}": list(10.0 ** rng.normal(-2.5, 0.3, n)) for i in range(4)})
    rows["v2"][60] = math.nan
    kinds = [M, M, M, M, V, V, V, V]
    matrix = run_of(rows, skipped=[10, 11])
    whole = judgement.judge_layers(matrix, kinds=kinds)
    assert {layer["reason"] for layer in whole} >= {"not_moving", "slow_outlier", "nan"}
    monkeypatch.setattr(judgement, "_BLOCK_CELLS", 8)
    assert judgement.judge_layers(matrix, kinds=kinds) == whole
    assert judgement.judge_layers(matrix, 1e-4, 1e-2, 3, kinds) == (
        monkeypatch.undo() or judgement.judge_layers(matrix, 1e-4, 1e-2, 3, kinds))


@pytest.mark.parametrize("seed", range(6))
def test_a_layer_absent_from_a_block_is_left_out_of_it_with_the_same_judgement(
        monkeypatch, seed):
    """Layers added or removed mid-run (absent from whole blocks of steps, in a group that
    then has too few peers) are left out of those blocks: the same layers as judging every
    row of every block, each field and text."""
    rng = np.random.default_rng(seed)
    n, kinds = 96, [M, M, M, M, V, V, V]
    series = []
    for i, kind in enumerate(kinds):
        values = 10.0 ** rng.normal(-3 if kind == M else -2, 0.4, n)
        values[rng.random(n) < 0.02] = rng.choice([0.0, math.nan, math.inf, 1e-10, 0.7])
        start, stop = sorted(rng.integers(0, n, 2)) if rng.random() < 0.6 else (0, n)
        keep = np.zeros(n, bool)
        keep[start:stop + 1] = True
        keep &= rng.random(n) > (0.1 if i == 0 else 0.0)  # (one layer gapped too)
        series.append((f"{kind}{i}", np.flatnonzero(keep), values[keep]))
    matrix = heatmap.RunMatrix.from_series(series, [5, 6, 50])
    assert not matrix.present.all(axis=1).all()
    monkeypatch.setattr(judgement, "_BLOCK_CELLS", 8 * len(kinds))  # blocks of 8 steps
    for settings in [(None, None, 3), (1e-4, 1e-2, 2)]:
        left_out = judgement.judge_layers(matrix, *settings, kinds)
        with monkeypatch.context() as every_row:
            every_row.setattr(judgement, "only_where_logged", lambda condition: False)
            assert judgement.judge_layers(matrix, *settings, kinds) == left_out


@pytest.mark.parametrize("seed", range(4))
def test_blocks_cut_around_skipped_steps_judge_as_whole_blocks(monkeypatch, seed):
    """A block of steps with skipped steps is judged in parts (the bytes of kept bits that
    hold a skipped step apart from the rest): the parts tile the block on byte bounds, and
    the judgement is the one of whole blocks, field for field."""
    rng = np.random.default_rng(seed)
    n, kinds = 700, [M, M, M, M, V, V, V]
    rows = {f"{k}{i}": list(10.0 ** rng.normal(-3 if k == M else -2, 0.4, n))
            for i, k in enumerate(kinds)}
    rows["matrix1"][300:340] = [x * 1e-4 for x in rows["matrix1"][300:340]]  # a slow outlier
    rows["vector5"][500] = math.inf
    skipped = sorted(set(rng.integers(0, n, int(rng.integers(1, 40))).tolist()))
    for values in rows.values():
        for step in skipped:
            values[step] = 0.0
    matrix = run_of(rows, skipped=skipped)
    monkeypatch.setattr(judgement, "_BLOCK_CELLS", 96 * len(kinds))  # blocks of 96 steps
    for c0 in range(0, n, 96):
        parts = judgement._parts(matrix.skipped_mask, c0, min(c0 + 96, n))
        assert [a for a, _ in parts[1:]] == [b for _, b in parts[:-1]]  # they tile it
        assert parts[0][0] == c0 and parts[-1][1] == min(c0 + 96, n)
        assert all(a % 8 == 0 for a, _ in parts)
    assert len(judgement._parts(matrix.skipped_mask, 0, 96)) > 1 or not any(
        s < 96 for s in skipped)
    for settings in [(None, None, 3), (1e-4, 1e-2, 2)]:
        in_parts = judgement.judge_layers(matrix, *settings, kinds)
        with monkeypatch.context() as whole:
            whole.setattr(judgement, "_MAX_SKIPPED_RUNS", -1)
            assert judgement.judge_layers(matrix, *settings, kinds) == in_parts


@pytest.mark.parametrize("gap", ["skipped", "nan"])
def test_a_condition_at_every_cell_then_at_none_keeps_its_first_blocks(monkeypatch, gap):
    """A condition that held at every cell of the first blocks, then at none of a block
    (8 steps all skipped, or all NaN), then again: the first blocks' cells still hold it
    (the layers' medians, counts and findings those of one block)."""
    rng = np.random.default_rng(5)
    n, kinds = 64, [M, M, M, M, V, V, V]
    rows = {f"{k}{i}": list(10.0 ** rng.normal(-3 if k == M else -2, 0.4, n))
            for i, k in enumerate(kinds)}
    rows["matrix1"][30:60] = [x * 1e-4 for x in rows["matrix1"][30:60]]  # a slow outlier
    skipped = list(range(8, 16)) + [28] if gap == "skipped" else [28]
    for values in rows.values():
        for step in range(8, 16):
            values[step] = 0.0 if gap == "skipped" else math.nan
        values[28] = 0.0
    matrix = run_of(rows, skipped=skipped)
    with monkeypatch.context() as whole:
        whole.setattr(judgement, "_MAX_SKIPPED_RUNS", -1)  # one block, in one part
        one_block = judgement.judge_layers(matrix, kinds=kinds)
    assert any(layer["slow_outlier_since"] is not None for layer in one_block)
    assert judgement.judge_layers(matrix, kinds=kinds) == one_block  # in parts
    monkeypatch.setattr(judgement, "_BLOCK_CELLS", 8 * len(kinds))  # blocks of 8 steps
    assert judgement.judge_layers(matrix, kinds=kinds) == one_block


def _first_streak(evaluable, hit, patience):
    """The definition: walk the evaluable columns; a hit extends the run, a miss breaks it."""
    run = []
    for column in range(len(hit)):
        if not evaluable[column]:
            continue
        if not hit[column]:
            run = []
            continue
        run.append(column)
        if len(run) == patience:
            while column + 1 < len(hit) and (not evaluable[column + 1] or hit[column + 1]):
                column += 1
                if evaluable[column]:
                    run.append(column)
            return run
    return None


def test_the_first_streak_is_its_definition_on_random_columns():
    rng = np.random.default_rng(11)
    found = 0
    for _ in range(3000):
        n = int(rng.integers(0, 50))
        hit = rng.random(n) < rng.uniform(0, 1)
        evaluable = rng.random(n) < rng.uniform(0, 1) if rng.random() < 0.7 else np.ones(n, bool)
        patience = int(rng.integers(1, 7))
        want = _first_streak(evaluable, hit, patience)
        got = judgement._streak(evaluable, hit, patience)
        assert (got is None) == (want is None), (evaluable, hit, patience, got, want)
        if want is not None:
            assert got.tolist() == want, (evaluable, hit, patience, got, want)
            found += 1
    assert found > 500


def test_others_moving_excludes_the_layer_itself_and_aligns_steps():
    """The Frobenius ratios as evidence that the run moves, per spectral layer and step: a
    layer's own Frobenius row does not count, steps the reference lacks are False, skipped
    steps and non-finite ratios are no evidence; the judgement refuses another shape."""
    reference = heatmap.RunMatrix.from_series(
        [("a/weight", np.array([0, 1, 2, 3]), np.array([1e-3, 1e-3, 0.0, np.nan])),
         ("a/bias", np.array([0, 1, 2, 3]), np.array([0.0, 1e-3, 1e-3, 1e-3]))],
        skipped_steps=[1],
    )
    spectral = heatmap.RunMatrix.from_series(
        [("a/weight", np.array([0, 2, 3, 5]), np.array([0.0, 0.0, 0.0, 0.0])),
         ("b/kernel", np.array([0, 2, 3, 5]), np.array([0.0, 0.0, 0.0, 0.0]))])
    moving = judgement.others_moving(spectral, reference)
    # a/weight: only a/bias counts (0 at step 0, 1e-3 at 2 and 3); b/kernel: any layer
    assert moving.tolist() == [[False, True, True, False], [True, True, True, False]]
    with pytest.raises(ValueError, match="moving has shape"):
        judgement.judge_layers(spectral, moving=moving[:, :2])

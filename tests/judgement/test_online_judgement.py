"""The judgement while training (judgement/online.py): step by step it fires what the report's
judgement of the steps logged so far finds, at the step it first finds it, with its `since`
and its text. Checked on every prefix of the real runs of tests/support/judgement_corpus.py where
a flag appears (Frobenius and spectral ratios, the default judgement and an explicit band), and
on hand-made runs: the fire step and `since` of each kind of defect."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

import judgement_corpus
from tb_wur_plugin import Flag
from tb_wur_plugin.judgement import judge
from tb_wur_plugin.judgement.online import OnlineJudgement, others_moving_at
from tb_wur_plugin.read import heatmap, report

M, V = "matrix", "vector"
SETTINGS = {"default": (None, None), "band": (1e-4, 1e-2)}


def _prefix(matrix: heatmap.RunMatrix, k: int) -> heatmap.RunMatrix:
    """The run as logged up to its k-th logged step."""
    return heatmap.RunMatrix(matrix.tags, matrix.steps[:k], matrix.values[:, :k],
                             matrix.present[:, :k], matrix.skipped_mask[:k])


def replay(matrix, kinds=None, low=None, high=None, patience=5, moving_of=None,
           metric="frobenius") -> tuple[OnlineJudgement, list[list[Flag]]]:
    """The online judgement fed `matrix` one logged step at a time (each step's present
    layers, in row order); `moving_of(j, rows)`: the `moving` of column j. Returns it and
    the flags fired at each step."""
    kinds = kinds or ["unknown"] * len(matrix.tags)
    online = OnlineJudgement(metric, low, high, patience)
    fired = []
    for j, step in enumerate(matrix.steps):
        rows = np.flatnonzero(matrix.present[:, j])
        fired.append(online.observe(
            step, [matrix.tags[i] for i in rows], [kinds[i] for i in rows],
            matrix.values[rows, j], bool(matrix.skipped_mask[j]),
            None if moving_of is None else moving_of(j, rows)))
    return online, fired


def check_prefix_consistency(matrix, kinds=None, low=None, high=None, patience=5, moving=None,
                             moving_of=None, metric="frobenius") -> list[Flag]:
    """Replays `matrix` and checks every fired flag against `judge.findings` of the prefix
    that ends at its step (found there, with the flag's since and text) and of the one
    before (not found); at the end, the findings are exactly the fired flags, and every
    layer `judge_layers` flags has fired its reason and since, no other layer any.
    `moving`: bool[L, S] for the whole-run judgement, `moving_of` the same per step."""
    online, fired = replay(matrix, kinds, low, high, patience, moving_of, metric)
    cache: dict[int, list[dict]] = {}

    def findings(k: int) -> list[dict]:
        if k not in cache:
            cache[k] = judge.findings(_prefix(matrix, k), low, high, patience, kinds,
                                      None if moving is None else moving[:, :k])
        return cache[k]

    row_of = {tag: i for i, tag in enumerate(matrix.tags)}
    for j, flags in enumerate(fired):
        for flag in flags:
            assert flag.step == matrix.steps[j] and flag.metric == metric
            found = findings(j + 1)[row_of[flag.tag]].get(flag.reason)
            assert found is not None, (flag, "not found by the judgement of its prefix")
            assert (found.since, found.text) == (flag.since, flag.text), (flag, found)
            assert flag.reason not in findings(j)[row_of[flag.tag]], (flag, "fired late")
    assert online.flags == [f for flags in fired for f in flags]
    final = findings(len(matrix.steps))
    got = {(f.tag, f.reason): f.since for f in online.flags}
    assert len(got) == len(online.flags), "a layer fired a reason twice"
    assert got == {(matrix.tags[i], reason): f.since
                   for i, by_reason in enumerate(final) for reason, f in by_reason.items()}
    layers = judge.judge_layers(matrix, low, high, patience, kinds, moving)
    for layer in layers:
        mine = {reason for tag, reason in got if tag == layer["tag"]}
        if layer["flagged"]:
            assert got.get((layer["tag"], layer["reason"])) == layer["since"], layer["tag"]
        else:
            assert not mine, (layer["tag"], mine)
    return online.flags


# --- the real runs ------------------------------------------------------------------------------




@pytest.fixture(scope="module")
def runs(corpus):
    """{(metric, run): (matrix, kinds, moving)} of every run of the corpus."""
    out = {}
    with report.open_logdir(corpus, load_fast=False) as frobenius:
        with report.open_logdir(corpus, load_fast=False, metric="spectral") as spectral:
            for logdir in (frobenius, spectral):
                for run in logdir.runs():
                    matrix = logdir.matrix(run)
                    out[(logdir.metric, run)] = (
                        matrix, logdir.layer_kinds(run, matrix.tags), logdir.moving(run, matrix))
    return out


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", [run.name for run in judgement_corpus.RUNS])
def test_real_runs_fire_what_the_report_finds_when_it_finds_it(runs, name, setting):
    matrix, kinds, _ = runs[("frobenius", name)]
    flags = check_prefix_consistency(matrix, kinds, *SETTINGS[setting])
    if setting == "default":  # the seeded defects fire (and, with the report, nothing else)
        (run,) = [r for r in judgement_corpus.RUNS if r.name == name]
        fired = {(f.tag, f.reason) for f in flags}
        assert set(run.expected.items()) <= fired, fired


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_the_spectral_ratios_of_real_runs_with_the_frobenius_ratios_as_evidence(runs, setting):
    """Each step's `moving` from that step's Frobenius ratios (others_moving_at), as a
    writer has them, against the report's others_moving of the whole run."""
    spectral = sorted(run for metric, run in runs if metric == "spectral")
    assert len(spectral) >= 15
    fired = 0
    for name in spectral:
        matrix, kinds, moving = runs[("spectral", name)]
        reference = runs[("frobenius", name)][0]
        assert moving is not None and list(reference.steps) == list(matrix.steps)

        def moving_of(j, rows):
            present = np.flatnonzero(reference.present[:, j])
            return others_moving_at([matrix.tags[i] for i in rows],
                                    [reference.tags[i] for i in present],
                                    reference.values[present, j],
                                    bool(reference.skipped_mask[j]))

        flags = check_prefix_consistency(matrix, kinds, *SETTINGS[setting], moving=moving,
                                         moving_of=moving_of, metric="spectral")
        fired += len(flags)
        assert all(f.metric == "spectral" for f in flags)
    assert fired > 0


# --- hand-made runs ---------------------------------------------------------------------------


def run_of(rows, skipped=(), steps=None):
    n = len(next(iter(rows.values())))
    steps = np.arange(n) * 10 if steps is None else np.asarray(steps)
    return heatmap.RunMatrix.from_series(
        [(tag, steps, np.asarray(v, np.float64)) for tag, v in rows.items()], skipped)


def noisy(level, n, seed):
    return list(level * np.exp(np.random.default_rng(seed).normal(0, 0.2, n)))


def fired_of(matrix, kinds=None, **settings):
    flags = check_prefix_consistency(matrix, kinds, **settings)
    return {(f.tag, f.reason): (f.step, f.since) for f in flags}


def test_nan_fires_at_the_step_it_appears_once():
    rows = {"a": noisy(1e-3, 12, 0), "b": noisy(1e-3, 12, 1)}
    rows["b"][7] = math.nan
    rows["b"][9] = math.nan
    assert fired_of(run_of(rows)) == {("b", "nan"): (70, 70)}


def test_inf_fires_after_the_layer_moved_not_at_its_first_update():
    rows = {"a": noisy(1e-3, 12, 0), "bias": [0.0, math.inf] + noisy(1e-2, 10, 1)}
    assert fired_of(run_of(rows)) == {}  # a zero-initialised bias moving: expected
    rows["bias"][6] = math.inf  # exactly 0 again, and moved
    assert fired_of(run_of(rows)) == {("bias", "inf"): (60, 60)}


def test_a_frozen_layer_fires_when_the_streak_completes_since_its_first_step():
    rows = {"a": noisy(1e-3, 16, 0), "b": noisy(1e-3, 16, 1),
            "frozen": noisy(1e-3, 4, 2) + [0.0] * 12}
    assert fired_of(run_of(rows)) == {("frozen", "not_moving"): (80, 40)}
    # a skipped step (every ratio 0) neither extends nor breaks it: one step later
    rows = {k: v[:6] + [0.0] + v[6:15] for k, v in rows.items()}
    assert fired_of(run_of(rows, skipped=[60])) == {("frozen", "not_moving"): (90, 40)}
    assert fired_of(run_of(rows, skipped=[60]), patience=1) == {
        ("frozen", "not_moving"): (40, 40)}


def test_a_1000x_slow_layer_fires_at_patience_since_the_first_step():
    n = 12
    rows = {"k1": noisy(1e-3, n, 0), "k2": noisy(1e-3, n, 1), "k3": noisy(1e-3, n, 2),
            "slow": noisy(1e-6, n, 3), "b1": noisy(1e-2, n, 4), "b2": noisy(1e-2, n, 5)}
    kinds = [M, M, M, M, V, V]
    assert fired_of(run_of(rows), kinds) == {("slow", "slow_outlier"): (40, 0)}
    assert fired_of(run_of(rows), kinds, patience=3) == {("slow", "slow_outlier"): (20, 0)}


def test_layers_growing_from_zero_join_their_own_peers_when_they_first_move():
    n = 30
    from_zero = [math.inf] + [1.0 / k for k in range(1, n)]
    rows = {"w1": noisy(1e-3, n, 0), "w2": noisy(1e-3, n, 1), "w3": noisy(1e-3, n, 2),
            "gamma1": noisy(1e-4, n, 3), "gamma2": noisy(1e-4, n, 4), "gamma3": noisy(1e-4, n, 5),
            "beta1": from_zero, "beta2": [0.0] * 2 + from_zero[:n - 2],
            "beta3": [0.0] * 4 + from_zero[:n - 4]}  # 4 steps still: no streak of 5
    kinds = [M, M, M, V, V, V, V, V, V]
    # a beta's 1/k is 1000x the gammas' at first: it is no outlier of theirs
    assert fired_of(run_of(rows), kinds) == {}
    rows["gamma3"] = noisy(1e-7, n, 5)  # 1000x below the other scales
    assert fired_of(run_of(rows), kinds) == {("gamma3", "slow_outlier"): (40, 0)}


def test_a_fast_outlier_fires_and_a_layer_gets_one_flag_per_reason():
    n = 14
    rows = {"k1": noisy(1e-4, n, 0), "k2": noisy(1e-4, n, 1), "k3": noisy(1e-4, n, 2),
            "fast": noisy(1e-4, 3, 3) + noisy(1e-2, n - 3, 4)}
    rows["fast"][12] = math.nan
    assert fired_of(run_of(rows), [M] * 4) == {
        ("fast", "fast_outlier"): (70, 30), ("fast", "nan"): (120, 120)}


def test_the_band_fires_the_side_of_its_first_step_and_layers_may_come_late():
    n = 10
    rows = {"a": noisy(1e-3, n, 0), "b": noisy(1e-3, n, 1)}
    rows["b"][2:8] = [5e-2, 1e-6, 5e-2, 5e-2, 1e-6, 5e-2]
    late = heatmap.RunMatrix.from_series(
        [("a", np.arange(n), np.asarray(rows["a"])), ("b", np.arange(n), np.asarray(rows["b"])),
         ("late", np.arange(4, n), np.asarray([1e-3, 1e-3, math.nan, 1e-3, 1e-3, 1e-3]))])
    assert fired_of(late, low=1e-4, high=1e-2) == {
        ("b", "above_band"): (6, 2), ("late", "nan"): (6, 6)}
    assert fired_of(late) == {("late", "nan"): (6, 6)}  # no band: no band rule


def test_the_flag_is_the_reports_finding_in_words():
    rows = {"a": noisy(1e-3, 8, 0), "b": noisy(1e-3, 8, 1), "hot": [0.7] * 8}
    online, fired = replay(run_of(rows), [V, V, V])
    assert [f.reason for f in fired[4]] == ["too_fast", "fast_outlier"]  # table order
    flag = fired[4][0]
    assert flag == Flag("hot", "too_fast", 0, 40, "frobenius", (
        "too fast: ratio at least 0.5 (updates at least half the weights' norm; median 0.7) "
        "at 5 judged steps in a row from step 0"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        flag.step = 1  # type: ignore[misc]
    assert online.flags == fired[4] and not any(fired[:4] + fired[5:])


def test_observe_refuses_what_it_cannot_judge():
    online = OnlineJudgement()
    online.observe(5, ["a", "b"], [M, V], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="not above"):
        online.observe(5, ["a"], [M], [1e-3])
    with pytest.raises(ValueError, match="ratios for 2 tags"):
        online.observe(6, ["a", "b"], [M, V], [1e-3])
    with pytest.raises(ValueError, match="observed as a matrix"):
        online.observe(6, ["a"], [V], [1e-3])
    with pytest.raises(ValueError, match="distinct"):
        online.observe(6, ["c", "c"], [M, M], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="unknown layer kind"):
        online.observe(6, ["c", "d"], [M, "tensor"], [1e-3, 1e-3])
    # nothing of a refused step stays: "c" comes as a vector, step 6 is still to come
    assert online.observe(6, ["a", "b", "c"], [M, V, V], [1e-3, 1e-3, math.nan]) == [
        Flag("c", "nan", 6, 6, "frobenius", online.flags[0].text)]
    with pytest.raises(ValueError, match="metric"):
        OnlineJudgement("nuclear")
    with pytest.raises(ValueError, match="patience"):
        OnlineJudgement(patience=0)
    with pytest.raises(ValueError, match="must be below"):
        OnlineJudgement(low=1e-2, high=1e-3)


def test_others_moving_at_is_the_reports_evidence_at_one_step():
    reference = heatmap.RunMatrix.from_series(
        [("a/weight", np.array([0, 1]), np.array([1e-3, 0.0])),
         ("a/bias", np.array([0, 1]), np.array([0.0, 1e-3]))])
    spectral = heatmap.RunMatrix.from_series(
        [("a/weight", np.array([0, 1]), np.array([0.0, 0.0])),
         ("b/kernel", np.array([0, 1]), np.array([0.0, 0.0]))])
    whole = judge.others_moving(spectral, reference)
    for j in range(2):
        assert others_moving_at(spectral.tags, reference.tags, reference.values[:, j]).tolist() \
            == whole[:, j].tolist()
    assert others_moving_at(["a/weight"], ["a/weight", "a/bias"], [1e-3, 1e-3], skipped=True
                            ).tolist() == [False]


def test_flag_is_importable_without_tensorflow():
    code = ("import sys\nfrom tb_wur_plugin import Flag\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


# --- random runs ------------------------------------------------------------------------------


def random_run(seed: int) -> tuple[heatmap.RunMatrix, list[str]]:
    """A run of a few layers of random kinds: healthy log-normal ratios with seeded 0, NaN,
    ±inf, negative, tiny, huge and far-off values, steps the optimizer skipped, cells not
    logged and layers that come late."""
    rng = np.random.default_rng(seed)
    n_layers, n_steps = int(rng.integers(1, 9)), int(rng.integers(8, 40))
    level = 10.0 ** rng.uniform(-4, -1, n_layers)
    values = level[:, None] * np.exp(rng.normal(0, 0.3, (n_layers, n_steps)))
    odd = rng.random((n_layers, n_steps))
    specials = np.array([0.0, np.nan, np.inf, -np.inf, -1.0, 1e-12, 0.7, 3.0])
    special = rng.random((n_layers, n_steps)) < 0.15
    values[special] = rng.choice(specials, int(special.sum()))
    for row in rng.choice(n_layers, int(rng.integers(0, n_layers + 1)), replace=False):
        start = int(rng.integers(0, n_steps))  # a defect from some step on
        values[row, start:] = rng.choice([0.0, 1e-10, 1e-7, 0.8]) if rng.random() < 0.5 \
            else values[row, start:] * rng.choice([1e-4, 1e3])
    present = odd > 0.08
    for row in rng.choice(n_layers, int(rng.integers(0, n_layers + 1)), replace=False):
        present[row, :int(rng.integers(0, n_steps))] = False  # comes late
    skipped = rng.random(n_steps) < 0.1
    values[:, skipped] = 0.0
    values = np.where(present, values, np.nan).astype(np.float32)
    steps = np.cumsum(rng.integers(1, 4, n_steps))
    kinds = list(rng.choice(["matrix", "vector", "unknown"], n_layers))
    matrix = heatmap.RunMatrix(tuple(f"layer{i}" for i in range(n_layers)), steps, values,
                               present, skipped)
    return matrix, kinds


@pytest.mark.parametrize("seed", range(24))
def test_random_runs_fire_what_the_report_finds_when_it_finds_it(seed):
    matrix, kinds = random_run(seed)
    patience = 1 + seed % 4
    low, high = SETTINGS[sorted(SETTINGS)[seed % 2]]
    check_prefix_consistency(matrix, kinds, low, high, patience)

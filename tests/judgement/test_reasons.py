"""The table of reasons (judgement/reasons.py): well formed, the one source of the reasons'
names, order and words, and served by `/reasons` as the tab reads it."""

from __future__ import annotations

import dataclasses

import numpy as np

from backend import Backend
from tb_wur_plugin.judgement import judge, reasons
from tb_wur_plugin.judgement.cells import Cells
from tb_wur_plugin.read import heatmap
from tb_wur_plugin.writer import SummaryWriter

CELL_FACTS = {field.name for field in dataclasses.fields(Cells)}


def test_the_table_is_well_formed():
    names = [r.name for r in reasons.REASONS]
    assert len(set(names)) == len(names) and names == list(reasons.NAMES)
    for r in reasons.REASONS:
        assert r.judgement in reasons.JUDGEMENTS, r.name
        assert r.label and r.label.strip() == r.label, r.name
        for condition in (r.hit, r.judges, r.starts):
            # a condition is a fact of the cells by name, or a function of them
            assert condition is None or callable(condition) or condition in CELL_FACTS, r.name
    for rule, group in reasons.rules(reasons.REASONS).items():
        if len(group) > 1:  # one finding for all: the same condition, told apart by `starts`
            assert len({(r.hit, r.judges, r.judgement) for r in group}) == 1, rule
            assert all(r.starts is not None for r in group), rule
        else:
            assert group[0].starts is None and group[0].name == rule
    # the default judgement comes first (a tie of since goes to the earlier reason)
    judgements = [r.judgement for r in reasons.REASONS]
    assert judgements == sorted(judgements, key=reasons.JUDGEMENTS.index)
    assert [r.name for r in reasons.active(None)] == [
        r.name for r in reasons.REASONS if r.judgement == reasons.DEFAULT]
    assert reasons.active((1e-4, 1e-2)) == reasons.REASONS


def test_every_reason_has_its_since_and_the_report_counts_in_table_order():
    matrix = heatmap.RunMatrix.from_series([("a", np.arange(3), np.array([1e-3, np.nan, 1e-3]))])
    (layer,) = judge.judge_layers(matrix, 1e-4, 1e-2, 1)
    since_keys = [f"{name}_since" for name in reasons.NAMES]
    assert [k for k in layer if k in since_keys] == since_keys
    assert (layer["reason"], layer["since"], layer["nan_since"]) == ("nan", 1, 1)
    assert layer["text"] == reasons.BY_NAME["nan"].words(reasons.Evidence(
        since=1, in_a_row=None, total=1, values=np.array([np.nan]), gaps=np.array([np.nan]),
        band=(1e-4, 1e-2), kind="unknown"))


def test_the_route_serves_the_table_in_its_order(tmp_path):
    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_ratios({"a": 1e-3}, 0)
    backend = Backend(str(tmp_path))
    answer = backend.json("reasons")
    assert answer == {"reasons": [
        {"name": r.name, "judgement": r.judgement, "label": r.label, "streak": r.streak}
        for r in reasons.REASONS]}
    streaks = {r["name"] for r in answer["reasons"] if r["streak"]}
    assert streaks == {"not_moving", "too_fast", "slow_outlier", "fast_outlier", "below_band",
                       "above_band"}
    assert {r["name"] for r in answer["reasons"] if r["judgement"] == "band"} == {
        "below_band", "above_band"}
    assert answer["reasons"][0] == {"name": "nan", "judgement": "default", "label": "NaN",
                                    "streak": False}  # a label "NaN" stays a string
    assert backend.get("reasons", run="x").status_code == 200  # parameters are ignored

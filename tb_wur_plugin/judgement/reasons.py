"""The table of reasons: every way the judgement flags a layer, in one place. The report, the
`/flags` and `/reasons` routes, the tab (which receives the table from `/reasons`) and the
online judgement all read it; a new reason is one entry here (its condition on one step's
cells, its words, the judgement it belongs to) and its tests.

A reason's finding is either a *single step* (`judges` None: every step at which `hit` holds
is one; the finding starts at the first) or a *streak* (`judges` given): a run of `patience`
consecutive judged steps at which `hit` holds, counting only the steps at which `judges`
holds (the others neither extend nor break it); the finding is the first such run.

Reasons that share a `rule` share one finding: the streak of their common `hit`, named by the
reason whose `starts` holds at its first step (the band's: ``below_band`` / ``above_band``,
the side of the streak's first step).

Table order matters: on a tie of `since` the earlier reason is the layer's reason.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Union

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement.cells import Cells
from tb_wur_plugin.judgement.thresholds import (
    FAST_OUTLIER_FACTOR,
    FAST_OUTLIER_FROM,
    NOT_MOVING_BELOW,
    SLOW_OUTLIER_FACTOR,
    TOO_FAST_FROM,
)

# The judgements a reason belongs to: the default one (no band given) flags only what is a
# defect whatever the optimizer; an explicit band adds the band rule's reasons on top.
DEFAULT = "default"
BAND = "band"
JUDGEMENTS = (DEFAULT, BAND)



@dataclasses.dataclass(frozen=True)
class Compare:
    """`fact op threshold` at each cell: a float fact of the cells (cells.Cells: "values" or
    "gap") against a number, as numpy compares float64 (NaN: False)."""

    fact: str
    op: str  # one of COMPARE_OPS
    threshold: float


COMPARE_OPS = {"<": np.less, "<=": np.less_equal, ">=": np.greater_equal, ">": np.greater}


@dataclasses.dataclass(frozen=True)
class All:
    """The cells at which every term holds: a term is a bool fact of the cells by its name,
    or a Compare. Called on cells.Cells it gives bool[L, C]; judge.py also reads its terms
    (blocks.py computes them without the cells' float64 facts)."""

    terms: tuple[Union[str, Compare], ...]

    def __call__(self, cells: Cells) -> np.ndarray:
        holds = np.ones(cells.present.shape, bool)
        for term in self.terms:
            if isinstance(term, Compare):
                holds &= COMPARE_OPS[term.op](getattr(cells, term.fact), term.threshold)
            else:
                holds &= getattr(cells, term)
        return holds


# A condition on a block of cells (cells.Cells): bool[L, C], a fact of the cells by its
# name (one the judgement keeps anyway), or a function of them (All, or any other).
Condition = Union[str, Callable[[Cells], np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a finding's words are made of, for the steps judged so far."""

    since: int  # the finding's first step
    in_a_row: int | None  # a streak's judged steps; None for a single-step finding
    total: int  # steps at which `hit` held (judged steps; logged steps for nan)
    values: np.ndarray  # float64: the ratios at the finding's steps (a streak's steps)
    gaps: np.ndarray  # float64: log10 of each of those ratios over its peers' median
    band: tuple[float, float] | None  # the explicit band judged against; None: none
    kind: str  # the layer's kind (metadata.LAYER_KINDS)


@dataclasses.dataclass(frozen=True)
class Reason:
    """One way the judgement flags a layer (module docstring).

    Attributes:
        name: what `reason` says (`/flags`, the report, `Flag.reason`).
        judgement: DEFAULT or BAND.
        label: a few words for the tab.
        hit: the finding's condition at each cell.
        judges: for a streak, the cells it judges; None: a single-step finding.
        words: the one line of English the report and `/flags` give (`text`).
        rule: the rule shared with other reasons (one finding for all of them); None: its own.
        starts: with `rule`, the condition at the finding's first step that names it this.
    """

    name: str
    judgement: str
    label: str
    hit: Condition
    judges: Condition | None
    words: Callable[[Evidence], str]
    rule: str | None = None
    starts: Condition | None = None

    @property
    def streak(self) -> bool:
        """Whether the finding is a streak (else a single step)."""
        return self.judges is not None

    @property
    def rule_name(self) -> str:
        """The rule whose finding this reason names: `rule`, else `name`."""
        return self.rule or self.name

    @property
    def hit_key(self) -> str:
        """The key of `hit` among `conditions`'."""
        return _key(self.hit, "hit", self.rule_name)

    @property
    def judges_key(self) -> str:
        """The key of `judges` (a streak's) among `conditions`'."""
        return _key(self.judges, "judges", self.rule_name)

    @property
    def starts_key(self) -> str:
        """The key of `starts` (a shared rule's) among `conditions`'."""
        return _key(self.starts, "starts", self.name)


def _key(condition: Condition, role: str, name: str) -> str:
    return condition if isinstance(condition, str) else f"{role}:{name}"


# --- the words --------------------------------------------------------------------------------


def _g(x: float) -> str:
    return f"{x:.3g}"


def _median(values: np.ndarray) -> str:
    return _g(float(np.median(values)))


def _factor(log10_gap: np.ndarray) -> str:
    factor = 10.0 ** float(np.median(np.abs(log10_gap)))
    return f"{factor:,.0f}" if factor >= 10 else f"{factor:.2g}"


def _in_a_row(e: Evidence) -> str:
    return f"at {e.in_a_row} judged steps in a row from step {e.since}"


def _also(e: Evidence) -> str:
    """The total when it differs from the streak."""
    return f" ({e.total} judged steps in total)" if e.total != e.in_a_row else ""


def _peers(kind: str) -> str:
    return {
        metadata.LAYER_MATRIX: "matrices",
        metadata.LAYER_VECTOR: "vectors (biases, normalization parameters)",
    }.get(kind, "layers")


def _peer_medians(e: Evidence) -> np.ndarray:
    """The peers' median ratio at each of the finding's steps (ratio / 10**gap)."""
    return e.values / 10.0 ** e.gaps


def _did_not_move(values: np.ndarray) -> bool:
    return not np.any(values > 0)


def _nan_words(e: Evidence) -> str:
    return (f"NaN: ratio NaN (the weights or their update are not finite) at {e.total} "
            f"logged steps in total, first at step {e.since}")


def _inf_words(e: Evidence) -> str:
    return (f"inf: ratio +inf (the weights were exactly 0 again and moved) at {e.total} "
            f"judged steps in total after the layer first moved, first at step {e.since}")


def _not_moving_words(e: Evidence) -> str:
    what = ("ratio 0 (did not move)" if _did_not_move(e.values)
            else f"ratio below {NOT_MOVING_BELOW:g} (no real movement; 0: did not move)")
    return f"not moving: {what} {_in_a_row(e)} while the run's other layers moved{_also(e)}"


def _too_fast_words(e: Evidence) -> str:
    return (f"too fast: ratio at least {TOO_FAST_FROM:g} (updates at least half the "
            f"weights' norm; median {_median(e.values)}) {_in_a_row(e)}{_also(e)}")


def _outlier_words(side: str) -> Callable[[Evidence], str]:
    def words(e: Evidence) -> str:
        name = "slow outlier" if side == "below" else "fast outlier"
        return (f"{name}: ratio {_factor(e.gaps)}× {side} the median of the run's other "
                f"{_peers(e.kind)} (its median ratio {_median(e.values)}, the others' "
                f"{_median(_peer_medians(e))}) {_in_a_row(e)}{_also(e)}")

    return words


def _below_band_words(e: Evidence) -> str:
    what = ("ratio 0 (did not move)" if _did_not_move(e.values)
            else f"ratio below the band's low edge {e.band[0]:g} (0: did not move)")
    return f"below band: {what} {_in_a_row(e)}{_also(e)}"


def _above_band_words(e: Evidence) -> str:
    return (f"above band: ratio above the band's high edge {e.band[1]:g} (median "
            f"{_median(e.values)}) {_in_a_row(e)}{_also(e)}")


# --- the conditions ---------------------------------------------------------------------------

_SLOW = All(("peers_ok", "confirmed", Compare("gap", "<=", float(-np.log10(SLOW_OUTLIER_FACTOR)))))
_FAST = All(("peers_ok", "confirmed", Compare("gap", ">=", float(np.log10(FAST_OUTLIER_FACTOR))),
             Compare("values", ">=", FAST_OUTLIER_FROM)))


# --- the table --------------------------------------------------------------------------------

REASONS: tuple[Reason, ...] = (
    # NaN (or a negative value, which is no ratio) at any logged step
    Reason("nan", DEFAULT, "NaN", hit="broken", judges=None, words=_nan_words),
    # +inf means ‖w‖ was exactly 0: expected once, when a zero-initialised weight first moves
    Reason("inf", DEFAULT, "+inf after first update",
           hit=All(("infinite", "moved_before")), judges=None, words=_inf_words),
    # no real movement while the run moves (another layer, or the `moving` evidence); a run
    # that stops as a whole has converged, or skipped
    Reason("not_moving", DEFAULT, "not moving",
           hit=All(("finite", Compare("values", "<", NOT_MOVING_BELOW))),
           judges=All(("finite", "run_moving")), words=_not_moving_words),
    # updates at least half as large as the weights themselves
    Reason("too_fast", DEFAULT, "too fast: updates as large as the weights",
           hit=All(("finite", Compare("values", ">=", TOO_FAST_FROM))), judges="finite",
           words=_too_fast_words),
    # far below / above the median of its peers (cells.py), confirmed against its group
    Reason("slow_outlier", DEFAULT, "far slower than its peers", hit=_SLOW, judges="peers_ok",
           words=_outlier_words("below")),
    Reason("fast_outlier", DEFAULT, "far faster than its peers", hit=_FAST, judges="peers_ok",
           words=_outlier_words("above")),
    # a finite ratio out of the explicit band; 0 is below
    Reason("below_band", BAND, "below band", hit="out_of_band", judges="finite",
           words=_below_band_words, rule="band", starts="below"),
    Reason("above_band", BAND, "above band", hit="out_of_band", judges="finite",
           words=_above_band_words, rule="band", starts="above"),
)

NAMES = tuple(r.name for r in REASONS)
BY_NAME = {r.name: r for r in REASONS}


def active(band: tuple[float, float] | None) -> tuple[Reason, ...]:
    """The reasons judged: the default judgement's, and the band's with a band."""
    return tuple(r for r in REASONS if r.judgement == DEFAULT or band is not None)


def rules(reasons: tuple[Reason, ...]) -> dict[str, tuple[Reason, ...]]:
    """{rule name: its reasons}, in table order."""
    out: dict[str, tuple[Reason, ...]] = {}
    for r in reasons:
        out[r.rule_name] = (*out.get(r.rule_name, ()), r)
    return out


def conditions(reasons: tuple[Reason, ...]) -> dict[str, Condition]:
    """{key: condition} of every condition `reasons` read (their `hit_key`, `judges_key`
    and `starts_key`): a fact by its own name, a function ``<role>:<rule or reason>``."""
    out: dict[str, Condition] = {}
    for r in reasons:
        out[r.hit_key] = r.hit
        if r.streak:
            out[r.judges_key] = r.judges
        if r.starts is not None:
            out[r.starts_key] = r.starts
    return out


def evaluate(condition: Condition, cells: Cells) -> np.ndarray:
    """bool[L, C]: `condition` on a block of cells."""
    if isinstance(condition, str):
        return getattr(cells, condition)
    with np.errstate(invalid="ignore"):
        return condition(cells)


def describe() -> list[dict]:
    """The table as `/reasons` answers it: name, judgement, label and streak of each reason,
    in table order."""
    return [{"name": r.name, "judgement": r.judgement, "label": r.label, "streak": r.streak}
            for r in REASONS]

"""The judgement while training: the same judgement as `judge.judge_layers`, one logged step at
a time, as a writer sees the ratios on the host.

`OnlineJudgement.observe` takes a logged step's ratios and answers the flags that fire at it:
a flag fires at the logged step at which `judge_layers`, run on the steps logged so far with
the same settings, first finds that reason for that layer (`judge.findings`): a single-step
finding (nan, inf) at the step it appears, a streak at the step that completes `patience`
judged steps. It fires once per layer and reason, with the `since` and the `text` that the
judgement of the steps so far gives that finding. Every rule is prefix-consistent (a finding
of the steps so far stays, with its `since`, whatever comes later: a step's cells depend on
that step and on when each layer first moved, cells.py), so at the end of a run, every layer
`judge_layers` flags has fired a flag with its `reason` and `since`, and no other layer has
fired.

The per-step conditions are the table's (reasons.py) on the cells of one step (cells.py), the
code that judges a whole run; the state is a few numbers a layer, and per layer and streak
rule the ratios (and their gaps to the peers) of the streak in progress, at most `patience`
of each: what the finding's words are made of.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement import judge
from tb_wur_plugin.judgement import reasons as table
from tb_wur_plugin.judgement.cells import Cells, cells_of
from tb_wur_plugin.judgement.thresholds import DEFAULT_BAND, DEFAULT_PATIENCE


@dataclasses.dataclass(frozen=True)
class Flag:
    """A finding of the judgement, fired while training.

    Attributes:
        tag: the layer.
        reason: a name of reasons.REASONS (`/reasons`).
        since: the finding's first step, as the report gives it.
        step: the logged step at which it fired.
        metric: the ratios judged, one of metadata.METRICS.
        text: the report's one line of English for the finding, for the steps logged so far.
    """

    tag: str
    reason: str
    since: int
    step: int
    metric: str
    text: str


class OnlineJudgement:
    """The judgement of one run's ratios of one metric, one logged step at a time (module
    docstring). `flags`: every flag fired so far, in order."""

    def __init__(
        self,
        metric: str = metadata.METRIC_FROBENIUS,
        low: float | None = None,
        high: float | None = None,
        patience: int = DEFAULT_PATIENCE,
    ):
        """
        Args:
            metric: the ratios judged (metadata.METRICS), named on each flag.
            low, high: the explicit band's edges (`judge.band_of`); both None: the default
                judgement only.
            patience: judged steps in a row that make a streak flag (>= 1).

        Raises:
            ValueError: an unknown metric, or a bad band or patience.
        """
        if metric not in metadata.METRICS:
            raise ValueError(f"metric must be one of {metadata.METRICS}, got {metric!r}")
        judge.check_settings(patience, 0, None)
        self.metric, self.patience = metric, int(patience)
        self.band = judge.band_of(low, high)
        self._counting_band = self.band if self.band is not None else DEFAULT_BAND
        judged = table.active(self.band)
        self._rules = list(table.rules(judged).values())
        self._conditions = table.conditions(judged)
        self.flags: list[Flag] = []
        self._last_step: int | None = None
        self._tags: list[str] = []
        self._row_of: dict[str, int] = {}
        # the last call's tags, kinds and rows, and whether they are every row in order (a
        # writer names the same layers at every step)
        self._seen: tuple[tuple[str, ...], list[str], np.ndarray, bool] | None = None
        self._kinds: list[str] = []
        self._moved = np.zeros(0, bool)  # had a judged ratio > 0
        self._from_zero = np.zeros(0, bool)  # its first such ratio was +inf
        self._group_rows: list[np.ndarray] | None = None  # None: to be grouped again
        self._rule_state = [_RuleState(self.patience, reasons) for reasons in self._rules]

    @property
    def last_step(self) -> int | None:
        """The last step observed (None before the first)."""
        return self._last_step

    def observe(
        self,
        step: int,
        tags: Sequence[str],
        kinds: Sequence[str] | None,
        ratios: Sequence[float] | np.ndarray,
        skipped: bool = False,
        moving: Sequence[bool] | np.ndarray | None = None,
    ) -> list[Flag]:
        """Judges one logged step.

        Args:
            step: the logged step, above the last one observed.
            tags: the layers logged at this step (a layer observed before and absent here is
                not present at this step, as in the report's matrix).
            kinds: each tag's layer kind (metadata.LAYER_KINDS; a layer keeps the kind it
                was first observed with); None: all unknown.
            ratios: each tag's ratio, judged at float32, the precision the events store.
            skipped: the optimizer skipped this step (every ratio 0 by design): not judged.
            moving: per tag, more evidence that the run moves (`others_moving_at` of the
                Frobenius ratios when judging spectral ones); None: none.

        Returns:
            The flags fired at this step, in the order of the layers' first observation, then
            of the table; each is appended to `flags` too.

        Raises:
            ValueError: a step not above the last one, tags not distinct, lengths that do
                not match, an unknown kind, or a layer observed with another kind.
        """
        step = int(step)
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(f"step {step} is not above the last step observed, {self._last_step}")
        tags = tuple(tags)
        values = np.asarray(ratios, np.float32)
        if values.shape != (len(tags),):
            raise ValueError(f"{values.shape[0] if values.ndim == 1 else values.shape} ratios "
                             f"for {len(tags)} tags")
        rows = self._rows(tags, kinds)
        n_layers = len(self._tags)
        if self._seen[3]:  # every layer, in row order
            column = values.astype(np.float64)[:, None]
            present = np.ones((n_layers, 1), bool)
        else:
            column = np.full((n_layers, 1), np.nan)
            column[rows, 0] = values
            present = np.zeros((n_layers, 1), bool)
            present[rows, 0] = True
        moving_column = None
        if moving is not None:
            moving_values = np.asarray(moving, bool)
            if moving_values.shape != (len(rows),):
                raise ValueError(f"moving names {moving_values.size} layers, tags {len(rows)}")
            moving_column = np.zeros((n_layers, 1), bool)
            moving_column[rows, 0] = moving_values
        if self._group_rows is None:
            groups: dict[tuple[str, bool], list[int]] = {}
            for row, group in enumerate(zip(self._kinds, self._from_zero.tolist())):
                groups.setdefault(group, []).append(row)
            self._group_rows = [np.array(r) for r in groups.values()]
        cells = cells_of(column, present, np.array([bool(skipped)]), self._group_rows,
                         self._counting_band, self._moved[:, None], moving_column)
        conditions = _Conditions(self._conditions, cells)
        # the layers that first move at this step join their group from the next step on
        with np.errstate(invalid="ignore"):
            first_moves = cells.judged[:, 0] & (column[:, 0] > 0) & ~self._moved
        if first_moves.any():
            self._moved = self._moved | first_moves  # (the cells read the old one)
            self._from_zero[first_moves] = column[first_moves, 0] == np.inf
            self._group_rows = None
        fired: list[tuple[int, int, Flag]] = []
        for reasons, state in zip(self._rules, self._rule_state):
            for row, evidence in state.step(step, reasons, conditions, cells, self.band,
                                            self._kinds):
                named = reasons[state.named[row]]
                flag = Flag(self._tags[row], named.name, evidence.since, step, self.metric,
                            named.words(evidence))
                fired.append((row, table.NAMES.index(named.name), flag))
        self._last_step = step
        out = [flag for _, _, flag in sorted(fired, key=lambda f: f[:2])]
        self.flags.extend(out)
        return out

    def _rows(self, tags: tuple[str, ...], kinds: Sequence[str] | None) -> np.ndarray:
        """The rows of `tags`, new layers added (their state grown)."""
        kinds = [metadata.LAYER_UNKNOWN] * len(tags) if kinds is None else list(kinds)
        if len(kinds) != len(tags):
            raise ValueError(f"kinds names {len(kinds)} layers, tags {len(tags)}")
        if self._seen is not None and self._seen[0] == tags and self._seen[1] == kinds:
            return self._seen[2]
        if len(set(tags)) != len(tags):
            raise ValueError("tags must be distinct")
        for tag, kind in zip(tags, kinds):  # checked before any layer is added
            if kind not in metadata.LAYER_KINDS:
                raise ValueError(f"unknown layer kind {kind!r}; expected one of "
                                 f"{metadata.LAYER_KINDS}")
            row = self._row_of.get(tag)
            if row is not None and self._kinds[row] != kind:
                raise ValueError(f"{tag!r} was observed as a {self._kinds[row]}, now {kind}")
        rows = []
        for tag, kind in zip(tags, kinds):
            row = self._row_of.get(tag)
            if row is None:
                row = self._row_of[tag] = len(self._tags)
                self._tags.append(tag)
                self._kinds.append(kind)
            rows.append(row)
        added = len(self._tags) - len(self._moved)
        if added:
            self._moved = np.concatenate([self._moved, np.zeros(added, bool)])
            self._from_zero = np.concatenate([self._from_zero, np.zeros(added, bool)])
            for state in self._rule_state:
                state.grow(len(self._tags))
            self._group_rows = None
        self._seen = (tags, kinds, np.array(rows, np.intp), rows == list(range(len(self._tags))))
        return self._seen[2]


class _RuleState:
    """One rule's findings so far, per layer: found, and for a streak the streak in progress
    (its length, first step, the reason naming it, the hits in total, its ratios and gaps)."""

    def __init__(self, patience: int, reasons: tuple[table.Reason, ...]):
        self.patience, self.streak = patience, reasons[0].streak
        self.hit_key = reasons[0].hit_key
        self.judges_key = reasons[0].judges_key if self.streak else None
        self.in_progress = False  # a layer not found has a streak in progress
        self.found = np.zeros(0, bool)
        self.length = np.zeros(0, np.int64)
        self.since = np.zeros(0, np.int64)
        self.named = np.zeros(0, np.int64)  # index among the rule's reasons
        self.total = np.zeros(0, np.int64)
        self.values = np.zeros((0, patience if self.streak else 0))
        self.gaps = np.zeros((0, patience if self.streak else 0))

    def grow(self, n_layers: int) -> None:
        """Room for `n_layers` layers, the new ones with nothing found."""
        added = n_layers - len(self.found)
        for name in ("found", "length", "since", "named", "total", "values", "gaps"):
            old = getattr(self, name)
            setattr(self, name, np.concatenate([old, np.zeros((added, *old.shape[1:]), old.dtype)]))

    def step(
        self, step: int, reasons: tuple[table.Reason, ...], conditions: dict[str, np.ndarray],
        cells: Cells, band: tuple[float, float] | None, kinds: list[str],
    ) -> list[tuple[int, table.Evidence]]:
        """Takes one step's cells (one column) and their conditions; (row, the finding's
        evidence) of each layer whose finding of this rule appears at this step."""
        rule = reasons[0]
        hit = conditions[self.hit_key]
        if not hit.any():  # nothing found, no streak extended
            if self.streak and self.in_progress:
                self.length[conditions[self.judges_key] & ~self.found] = 0  # broken
                self.in_progress = bool(self.length.any())
            return []
        values = cells.values[:, 0]
        hit = hit & ~self.found
        if not rule.streak:
            self.named[hit] = self._named(reasons, conditions, hit)
            self.found |= hit
            # the first hit: the finding's only step so far
            return [(int(row), table.Evidence(step, None, 1, values[row:row + 1],
                                              cells.gap[row, :1], band, kinds[row]))
                    for row in np.flatnonzero(hit)]
        judged = conditions[self.judges_key] & ~self.found
        self.total += hit
        self.length[judged & ~hit] = 0  # broken
        extends = judged & hit
        starts = extends & (self.length == 0)
        self.since[starts] = step
        self.named[starts] = self._named(reasons, conditions, starts)
        rows = np.flatnonzero(extends)
        at = self.length[rows]
        self.values[rows, at] = values[rows]
        self.gaps[rows, at] = cells.gap[rows, 0]
        self.length[rows] += 1
        complete = rows[self.length[rows] == self.patience]
        self.found[complete] = True
        self.length[complete] = 0  # found: judged no more
        self.in_progress = bool(self.length.any())
        return [(int(row), table.Evidence(int(self.since[row]), self.patience,
                                          int(self.total[row]), self.values[row].copy(),
                                          self.gaps[row].copy(), band, kinds[row]))
                for row in complete]

    @staticmethod
    def _named(reasons, conditions, rows: np.ndarray) -> np.ndarray | int:
        """Which of a shared rule's reasons names a finding starting at `rows` (its `starts`
        holds); 0 for a rule of one reason."""
        if len(reasons) == 1:
            return 0
        names = np.full(int(rows.sum()), -1)
        for index, reason in reversed(list(enumerate(reasons))):
            names[conditions[reason.starts_key][rows]] = index
        return names


class _Conditions(dict):
    """{key: bool[L]}: the conditions (`table.conditions`) on one step's cells, each
    evaluated when first read."""

    def __init__(self, conditions: dict[str, table.Condition], cells: Cells):
        super().__init__()
        self._conditions, self._cells = conditions, cells

    def __missing__(self, key: str) -> np.ndarray:
        value = self[key] = table.evaluate(self._conditions[key], self._cells)[:, 0]
        return value


def others_moving_at(
    tags: Sequence[str], reference_tags: Sequence[str], reference_ratios: Sequence[float],
    skipped: bool = False,
) -> np.ndarray:
    """bool per tag: `judge.others_moving` at one logged step, the evidence `observe` takes
    as `moving` when judging spectral ratios: a layer of the same step's Frobenius ratios
    (`reference_tags`, `reference_ratios`) other than the one of the same tag moves."""
    step = np.zeros(1, np.int64)
    matrix = _OneStep(tuple(tags), step, np.zeros((len(tags), 1), np.float32),
                      np.ones((len(tags), 1), bool), np.array([bool(skipped)]))
    reference = _OneStep(tuple(reference_tags), step,
                         np.asarray(reference_ratios, np.float32).reshape(-1, 1),
                         np.ones((len(reference_tags), 1), bool), np.array([bool(skipped)]))
    return judge.others_moving(matrix, reference)[:, 0]


@dataclasses.dataclass(frozen=True)
class _OneStep:
    """One logged step's ratios as judge.Ratios."""

    tags: tuple[str, ...]
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray
    skipped_mask: np.ndarray

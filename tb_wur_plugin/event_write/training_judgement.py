"""The judgement acting while training: each logged step's ratios judged as they are written,
each fired flag told (the `tb_wur_plugin` logger, `on_flag`), and a request to stop.

One `TrainingJudgement` per run. `SummaryWriter` owns one and feeds it every `add_ratios`
call, so that PyTorch `watch`, JAX `log_update_ratios`, the Keras callback on JAX and PyTorch
and the trainer callbacks, which all write through a `SummaryWriter`, are judged in that one
place; the processes of a distributed run that write nothing feed one of their own the same
ratios (`LoggedStepWriter` without a writer), so that every process fires the same flags.

The judgement itself is `judgement.online.OnlineJudgement`, the report's judgement one step
at a time: one per metric, the spectral one given the same step's Frobenius ratios as its
evidence that the run moves (as the report's `others_moving`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.judgement import online, reasons
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE

__all__ = ["TrainingJudgement", "check_stop_on", "judgement_settings", "changed_settings",
           "LOGGER"]

# The logger every fired flag is told through, once, at WARNING.
LOGGER = logging.getLogger("tb_wur_plugin")


def check_stop_on(stop_on: Iterable[str]) -> frozenset[str]:
    """The reasons of `stop_on` as a frozenset.

    Raises:
        TypeError: `stop_on` is a single string, or not an iterable of strings.
        ValueError: it names a reason the judgement does not have (the message lists them).
    """
    if isinstance(stop_on, (str, bytes)):
        raise TypeError(
            f"stop_on must be a collection of reasons, e.g. {{{stop_on!r}}}, not a string")
    try:
        names = list(stop_on)
    except TypeError:
        raise TypeError(
            f"stop_on must be a collection of reasons, got {type(stop_on).__name__}") from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"stop_on's reasons must be strings, got {name!r}")
    unknown = sorted(set(names) - set(reasons.NAMES))
    if unknown:
        raise ValueError(f"stop_on names unknown reasons {unknown}; the reasons are "
                         f"{', '.join(reasons.NAMES)}")
    return frozenset(names)


def judgement_settings(
    on_flag: Callable[[online.Flag], Any] | None = None,
    stop_on: Iterable[str] = (),
    patience: int = DEFAULT_PATIENCE,
    low: float | None = None,
    high: float | None = None,
) -> dict[str, Any]:
    """The settings of a `TrainingJudgement` (its arguments), checked, `stop_on` as a
    frozenset: what a face that takes them passes on later (to the writer it opens, to the
    handle of each fit), checked when the user gives them.

    Raises:
        TypeError, ValueError: as `TrainingJudgement`.
    """
    settings = dict(on_flag=on_flag, stop_on=check_stop_on(stop_on), patience=patience,
                    low=low, high=high)
    TrainingJudgement(**settings)  # checks the others
    return settings


def changed_settings(settings: dict[str, Any]) -> list[str]:
    """The names of the settings (`judgement_settings`'s) that are not their defaults."""
    defaults = judgement_settings()
    return [name for name, value in settings.items() if value != defaults[name]]


class TrainingJudgement:
    """Judges a run's logged steps as they are written (module docstring).

    Args:
        on_flag: called with each fired `Flag`, after it is logged; None: only logged.
        stop_on: reasons (`tb_wur_plugin.judgement.reasons.NAMES`) whose first flag sets
            `should_stop`.
        patience: judged steps in a row that make a streak flag (>= 1), as the report's.
        low, high: an explicit band (the report's `--low`/`--high`): the band rule on top of
            the default judgement; both None: the default judgement only.

    Raises:
        TypeError, ValueError: a bad `on_flag`, `stop_on`, `patience` or band.

    Example:
        >>> judgement = TrainingJudgement(stop_on={"nan"})
        >>> judgement.observe(0, ["dense/kernel", "dense/bias"], [(4, 2), (2,)], [1e-3, 2e-3])
        []
        >>> judgement.should_stop
        False
    """

    def __init__(
        self,
        on_flag: Callable[[online.Flag], Any] | None = None,
        stop_on: Iterable[str] = (),
        patience: int = DEFAULT_PATIENCE,
        low: float | None = None,
        high: float | None = None,
    ):
        if on_flag is not None and not callable(on_flag):
            raise TypeError(f"on_flag must be callable or None, got {type(on_flag).__name__}")
        self._on_flag = on_flag
        self._stop_on = check_stop_on(stop_on)
        self._settings = dict(low=low, high=high, patience=patience)
        self._judgements = {  # checks the settings
            metric: online.OnlineJudgement(metric, **self._settings)
            for metric in metadata.METRICS
        }
        self.flags: list[online.Flag] = []
        self.should_stop = False
        # the last Frobenius step: (step, tags, ratios, skipped), the spectral one's evidence
        self._frobenius: tuple[int, list[str], np.ndarray, bool] | None = None
        self._warned_repeat = False
        # per metric, the last shapes observed and their kinds (a writer names the same layers
        # at each step)
        self._last_kinds: dict[str, tuple[tuple, list[str]]] = {}

    @property
    def stop_on(self) -> frozenset[str]:
        """The reasons whose first flag sets `should_stop`."""
        return self._stop_on

    def observe(
        self,
        step: int,
        tags: Sequence[str],
        shapes: Sequence[tuple[int, ...] | None] | None,
        ratios: Sequence[float] | np.ndarray,
        skipped: bool = False,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> list[online.Flag]:
        """Judge one logged step of one metric; tell and return the flags it fires.

        A step not above the last one judged of the metric (a run restarted from an earlier
        step) starts that metric's judgement afresh; a second call for the same step (ratios
        of one step written in two calls) is not judged, with one warning: the report judges
        it from the files.

        Args:
            step: the logged step.
            tags: the layers' tags.
            shapes: each layer's shape (its kind, `metadata.layer_kind`; None: unknown), or
                None (all unknown), as written in the series' descriptions.
            ratios: each layer's ratio.
            skipped: the step's skipped-step marker.
            metric: "frobenius" or "spectral" (judged with the same step's Frobenius
                ratios as evidence that the run moves).

        Returns:
            The flags fired at this step (also appended to `flags`).
        """
        judgement = self._judgements[metric]
        last = judgement.last_step
        if last is not None and step == last:
            if not self._warned_repeat:
                self._warned_repeat = True
                LOGGER.warning(
                    "WUR step %d: ratios written in two calls for one step: the second is not "
                    "judged while training (tb-wur report judges the files)", step)
            return []
        if last is not None and step < last:
            judgement = self._judgements[metric] = online.OnlineJudgement(metric, **self._settings)
        tags = list(tags)
        values = np.asarray(ratios, np.float64)
        kinds = None if shapes is None else self._kinds(metric, shapes)
        moving = None
        if metric == metadata.METRIC_FROBENIUS:
            self._frobenius = (step, tags, values, bool(skipped))
        elif self._frobenius is not None and self._frobenius[0] == step:
            _, reference_tags, reference, reference_skipped = self._frobenius
            moving = online.others_moving_at(tags, reference_tags, reference, reference_skipped)
        fired = judgement.observe(step, tags, kinds, values, bool(skipped), moving)
        for flag in fired:
            self._tell(flag)
        return fired

    def _kinds(self, metric: str, shapes: Sequence[tuple[int, ...] | None]) -> list[str]:
        """Each shape's layer kind (`metadata.layer_kind`; None: unknown)."""
        shapes = tuple(shapes)
        last = self._last_kinds.get(metric)
        if last is None or last[0] != shapes:
            last = self._last_kinds[metric] = (shapes, [
                metadata.LAYER_UNKNOWN if s is None else metadata.layer_kind(s) for s in shapes])
        return last[1]

    def _tell(self, flag: online.Flag) -> None:
        self.flags.append(flag)
        metric = "" if flag.metric == metadata.METRIC_FROBENIUS else f" ({flag.metric} ratios)"
        LOGGER.warning("WUR step %d: %s: %s%s", flag.step, flag.tag, flag.text, metric)
        if flag.reason in self._stop_on:
            self.should_stop = True
        if self._on_flag is not None:
            self._on_flag(flag)

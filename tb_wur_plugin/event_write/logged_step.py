"""A logged step of the TensorFlow-free faces, and the one entry that writes it.

PyTorch `watch`, JAX `log_update_ratios` and the Keras callback on JAX and PyTorch each
compute, at a logged step, the layers' ratios (and, as asked, their spectral ratios and
histogram counts) with their framework's math, and hand the result to
`LoggedStepWriter.write` as a `LoggedStep`. `write` decides the skipped-step marker (the
rule is `metadata.step_was_skipped`), builds every series' description from the layers'
tags, shapes and dtypes, and writes the step's events through a `SummaryWriter`:

    steps = LoggedStepWriter(SummaryWriter("logs/run1"))
    steps.write(LoggedStep(step, [LoggedLayer("fc1/weight", (64, 32), "float32")], [1.2e-3]))

Every logged step of these faces passes through `write`, and nothing else sees all of a
step's data at once (step, layers, their kinds `metadata.layer_kind(layer.shape)`, ratios,
spectral ratios, skipped): what is to act on whole logged steps as they are written lives
there.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from tb_wur_plugin import metadata
from tb_wur_plugin.event_write.summary_writer import Counts, SummaryWriter, to_stored_scalar
from tb_wur_plugin.event_write.training_judgement import TrainingJudgement

__all__ = ["Layer", "LoggedLayer", "LoggedStep", "LoggedStepWriter"]


class Layer(Protocol):
    """What a logged step knows of a layer: its tag, its full shape and its dtype's name
    (a `LoggedLayer`, or a framework's own record of a parameter with these fields)."""

    tag: str
    shape: tuple[int, ...]
    dtype: str


class LoggedLayer(NamedTuple):
    """A layer of a logged step: its tag (the variable's path), its variable's shape and
    the name of its dtype (e.g. "float32")."""

    tag: str
    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass(frozen=True, eq=False)
class LoggedStep:
    """Everything one logged step writes.

    Attributes:
      step: the step (the number of updates before this one).
      layers: the layers, in model order (each a `Layer`: tag, shape, dtype).
      ratios: one weight-update ratio ‖Δw‖₂ / ‖w‖₂ per layer (float64 array or floats).
      spectral: {index in `layers`: spectral ratio ‖ΔW‖₂ / ‖W‖₂}, in the order to write
        them (the layers of two or more dimensions), or None (none logged); an empty
        mapping writes nothing either.
      histograms: per layer, its elementwise ratios' counts on the protocol's buckets
        (integers [len(layers), NUM_BUCKETS], an array or a sequence of rows), or None.
      learning_rate: the learning rate to write beside the ratios, or None.
      skipped: the skipped-step marker when the face knows it (e.g. a GradScaler that
        skipped the update on every rank); None: `metadata.step_was_skipped(ratios)`.
    """

    step: int
    layers: Sequence[Layer]
    ratios: Any
    spectral: Mapping[int, float] | None = None
    histograms: Any = None
    learning_rate: float | None = None
    skipped: bool | None = None

    @property
    def was_skipped(self) -> bool:
        """The step's skipped-step marker: `skipped`, or the protocol's rule when None."""
        if self.skipped is not None:
            return bool(self.skipped)
        return bool(metadata.step_was_skipped(np.asarray(self.ratios)))


class LoggedStepWriter:
    """Writes the logged steps of one run through `writer`, or, on a process of a
    distributed run that writes nothing, judges them only.

    Every logged step is judged while training (`TrainingJudgement`): by the writer's own
    judgement (`SummaryWriter.add_ratios` judges what it writes), or by `judgement` where
    there is no writer, so that every process fires the same flags on the same ratios.
    It neither flushes nor closes `writer`: the face that opened the writer does (each face
    flushes as its contract says).

    Args:
      writer: the run's `SummaryWriter`; None on a process that writes nothing.
      judgement: the judgement of a process that writes nothing (given with `writer=None`
        only).

    Raises:
      ValueError: both or neither of `writer` and `judgement` given.
    """

    def __init__(self, writer: SummaryWriter | None,
                 judgement: TrainingJudgement | None = None) -> None:
        if (writer is None) == (judgement is None):
            raise ValueError("LoggedStepWriter takes a writer, or a judgement without one")
        self._writer = writer
        self._judgement = writer.judgement if writer is not None else judgement
        # per description function, the last `_descriptions`: its layers' (tag, shape, dtype)
        # and the descriptions
        self._described: dict[Callable, tuple[list, dict[str, str]]] = {}

    @property
    def writer(self) -> SummaryWriter | None:
        return self._writer

    @property
    def judgement(self) -> TrainingJudgement:
        """The judgement of the logged steps (`flags`, `should_stop`)."""
        return self._judgement

    def write(self, logged: LoggedStep) -> None:
        """Write one logged step: its ratios with the skipped-step marker (`was_skipped`),
        its spectral ratios with the same marker, its histograms and its learning rate,
        each as one event, in that order, every series described as
        `metadata.ratio_description` (`spectral_description`, `histogram_description`) of
        the layer's tag, shape and dtype.

        Raises:
          TypeError, ValueError: as `SummaryWriter.add_ratios`, `add_histograms` and
            `add_learning_rate` (e.g. no layer, a reserved tag).
          RuntimeError: the writer is closed.
        """
        writer, layers, step = self._writer, logged.layers, logged.step
        skipped = logged.was_skipped
        if writer is None:
            self._judge(logged, skipped)
            return
        writer.add_ratios(
            {layer.tag: float(r) for layer, r in zip(layers, logged.ratios)},
            step,
            skipped=skipped,
            descriptions=self._descriptions(metadata.ratio_description, layers),
            shapes={layer.tag: layer.shape for layer in layers},
        )
        if logged.spectral:
            matrices = [layers[i] for i in logged.spectral]
            writer.add_ratios(
                {layer.tag: float(r) for layer, r in zip(matrices, logged.spectral.values())},
                step,
                skipped=skipped,
                descriptions=self._descriptions(metadata.spectral_description, matrices),
                shapes={layer.tag: layer.shape for layer in matrices},
                metric=metadata.METRIC_SPECTRAL,
            )
        if logged.histograms is not None:
            writer.add_histograms(
                {layer.tag: Counts(c) for layer, c in zip(layers, logged.histograms)},
                step,
                descriptions=self._descriptions(metadata.histogram_description, layers),
            )
        if logged.learning_rate is not None:
            writer.add_learning_rate(logged.learning_rate, step)

    def _descriptions(self, describe: Callable[[str, Any, str], str],
                      layers: Sequence[Layer]) -> dict[str, str]:
        """{tag: describe(tag, shape, dtype)} of `layers`: the last call's for `describe`
        again where its layers had the same tags, shapes and dtypes (a face logs the same
        layers at every step)."""
        signature = [(layer.tag, layer.shape, layer.dtype) for layer in layers]
        last = self._described.get(describe)
        if last is None or last[0] != signature:
            last = self._described[describe] = (
                signature, {tag: describe(tag, shape, dtype) for tag, shape, dtype in signature})
        return last[1]

    def _judge(self, logged: LoggedStep, skipped: bool) -> None:
        """Judge a logged step as `SummaryWriter.add_ratios` would judge it once written:
        the ratios as stored (float32), then the spectral ratios."""
        layers = logged.layers
        self._judgement.observe(
            logged.step, [layer.tag for layer in layers], [layer.shape for layer in layers],
            [to_stored_scalar(float(r)) for r in logged.ratios], skipped)
        if logged.spectral:
            matrices = [layers[i] for i in logged.spectral]
            self._judgement.observe(
                logged.step, [layer.tag for layer in matrices],
                [layer.shape for layer in matrices],
                [to_stored_scalar(float(r)) for r in logged.spectral.values()], skipped,
                metadata.METRIC_SPECTRAL)

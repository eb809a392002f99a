"""What a run's listing says, before any point is read: the kind of each wur series (from its
plugin content, parsed once per distinct content), a layer's model position and shape, and a
run's `RunListing` of one metric's ratios: its per-tag ratio series, its packed series and the
layers each holds, its skipped-step marker.

Model order: layers sorted by the first step they logged, then by the position `watch` gave
them (`index` in the plugin content), then by the time of their first write, then by tag
(the first and third are known only once the points are read: run_data).

Layouts: a layer's ratios come from per-tag scalar series (`wur_summary.scalar`, and every
writer before protocol version 3) and from packed series (all layers of a step in one tensor
per chunk, `metadata`'s protocol version 3), in any mix: a run written before and after an
upgrade, or whose set of layers changed midway (a new packed tag), lists each layer with all
the series that hold it (`RunListing.layers`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any

from tensorboard import errors

from tb_wur_plugin import metadata
from tb_wur_plugin.read.argument_values import shown

logger = logging.getLogger(__name__)

# A data provider's listing of one series (provider.ScalarTimeSeries or TensorTimeSeries).
Series = Any


# --- series classification ----------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _parse_content(content: bytes) -> dict | None:
    """Parsed once per distinct content: every request classifies and orders every series."""
    try:
        return metadata.parse_plugin_content(content)
    except ValueError as e:
        logger.warning("skipping a wur series: %s", e)
        return None


def kind(series: Series) -> str | None:
    """The series' kind (one of metadata.KINDS); None when its plugin content is unreadable
    (the series is then ignored, with a warning logged once per distinct content)."""
    content = _parse_content(series.plugin_content)
    return content["kind"] if content else None


def model_index(series: Series) -> float:
    """The position `watch` gave the layer among the variables written together; +inf when
    the series has none."""
    content = _parse_content(series.plugin_content)
    index = content.get("index") if content else None
    return math.inf if index is None else index


def layer_shape(series: Series) -> list[int] | None:
    """The shape of a ratio series' variable: the plugin content's ``shape``; for a series
    written without one, the shape its description names (metadata.shape_from_description);
    None when neither says."""
    content = _parse_content(series.plugin_content)
    shape = content.get("shape") if content else None
    if shape is not None:
        return shape
    return metadata.shape_from_description(getattr(series, "description", None))


def layer_kinds(listing: "RunListing", tags: tuple[str, ...] | list[str]) -> list[str]:
    """The layer kind (metadata.layer_kind: matrix, vector, unknown) of each of `tags`, the
    ratio tags of `listing` (a tag it does not list: unknown)."""
    return [metadata.layer_kind(listing.shape(tag)) for tag in tags]


def of_kind(series_by_tag: dict[str, Series], series_kind: str) -> dict[str, Series]:
    """The series of `series_by_tag` of kind `series_kind`, by tag."""
    return {tag: s for tag, s in series_by_tag.items() if kind(s) == series_kind}


def line_search_series(series_by_tag: dict[str, Series]) -> dict[str, str]:
    """The line-search series of `series_by_tag`: {series name (one of
    metadata.LINE_SEARCH_SERIES, from the plugin content): tag}."""
    found = {}
    for tag, series in series_by_tag.items():
        content = _parse_content(series.plugin_content)
        if content and content["kind"] == metadata.KIND_LINE_SEARCH:
            found[content["series"]] = tag
    return found


def marker_of(series_by_tag: dict[str, Series]) -> Series | None:
    """The run's skipped-step marker series, or None."""
    series = series_by_tag.get(metadata.SKIPPED_STEP_TAG)
    return series if series is not None and kind(series) == metadata.KIND_SKIPPED_STEP else None


def with_ratios(
    listing: "RunListing", run: str, metric: str = metadata.METRIC_FROBENIUS
) -> "RunListing":
    """`listing`, the listing of `run`'s `metric` ratios.

    Raises:
        errors.NotFoundError: the run lists no ratio series (per-tag or packed) of `metric`.
    """
    if not listing.has_ratios():
        what = "wur ratios" if metric == metadata.METRIC_FROBENIUS else f"{metric} wur ratios"
        raise errors.NotFoundError(f"no {what} in run {shown(run)}")
    return listing



@dataclasses.dataclass(frozen=True)
class PackedSource:
    """One packed series of a run: its listing, its layers (in the order of its values) and
    the model position of its first layer."""

    series: Series
    layers: tuple[metadata.PackedLayer, ...]
    offset: int


@dataclasses.dataclass(frozen=True)
class RunListing:
    """What a run's listing says of its ratios: the per-tag ratio series by tag, its
    skipped-step marker series (None: it has none), its packed ratio and histogram series by
    tag, and which of them hold each layer."""

    ratios: dict[str, Series]
    marker: Series | None
    packed: dict[str, PackedSource] = dataclasses.field(default_factory=dict)
    packed_histograms: dict[str, PackedSource] = dataclasses.field(default_factory=dict)
    metric: str = metadata.METRIC_FROBENIUS
    metrics: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, scalars: dict[str, Series], tensors: dict[str, Series] | None = None,
        metric: str = metadata.METRIC_FROBENIUS,
    ) -> "RunListing":
        """The listing of a run's wur scalar and tensor series, each by tag, holding the
        ratios of `metric` (one of metadata.METRICS): Frobenius ratios are the per-tag
        ratio series and the packed ratios, spectral ratios the packed spectral series.
        `metrics` names the metrics the run has ratios of, in metadata.METRICS order.

        Raises:
            ValueError: `metric` is not one of metadata.METRICS.
        """
        kind_wanted = metadata.packed_ratio_kind(metric)
        tensors = tensors or {}
        per_tag = of_kind(scalars, metadata.KIND_RATIO)
        frobenius = _packed_sources(tensors, metadata.KIND_PACKED_RATIOS)
        spectral = _packed_sources(tensors, metadata.KIND_PACKED_SPECTRAL)
        metrics = tuple(
            m for m, present in (
                (metadata.METRIC_FROBENIUS, bool(per_tag) or bool(frobenius)),
                (metadata.METRIC_SPECTRAL, bool(spectral)),
            ) if present
        )
        return cls(
            per_tag if metric == metadata.METRIC_FROBENIUS else {},
            marker_of(scalars),
            frobenius if kind_wanted == metadata.KIND_PACKED_RATIOS else spectral,
            _packed_sources(tensors, metadata.KIND_PACKED_HISTOGRAMS),
            metric,
            metrics,
        )

    @functools.cached_property
    def layers(self) -> dict[str, tuple[float, list[str]]]:
        """{layer tag: (its model position, [the tags of the series holding its ratios])}
        of every layer: the per-tag series first, then the packed series by tag."""
        found: dict[str, tuple[float, list[str]]] = {}
        for tag, series in self.ratios.items():
            found[tag] = (model_index(series), [tag])
        for packed_tag in sorted(self.packed):
            source = self.packed[packed_tag]
            for i, layer in enumerate(source.layers):
                entry = found.setdefault(layer.tag, (source.offset + i, []))
                entry[1].append(packed_tag)
        return found

    def has_ratios(self) -> bool:
        return bool(self.ratios) or bool(self.packed)

    def description(self, tag: str) -> str:
        """The description of layer `tag`'s ratios (of its per-tag series, else of the last
        packed series, by tag, that holds it)."""
        series = self.ratios.get(tag)
        if series is not None:
            return series.description
        for packed_tag in reversed(self.layers[tag][1]):
            for layer in self.packed[packed_tag].layers:
                if layer.tag == tag:
                    return layer.described()
        return ""

    def shape(self, tag: str) -> list[int] | None:
        """The shape of layer `tag`'s variable (None: not known), as `layer_shape`."""
        series = self.ratios.get(tag)
        if series is not None:
            shape = layer_shape(series)
            if shape is not None:
                return shape
        for packed_tag in self.layers.get(tag, (0, []))[1]:
            if packed_tag in self.packed:
                for layer in self.packed[packed_tag].layers:
                    if layer.tag == tag:
                        if layer.shape is not None:
                            return list(layer.shape)
                        described = metadata.shape_from_description(layer.description)
                        if described is not None:
                            return described
        return None

    def histogram_layers(self) -> dict[str, list[str]]:
        """{layer tag: [the packed histogram tags holding it]}."""
        found: dict[str, list[str]] = {}
        for packed_tag in sorted(self.packed_histograms):
            for layer in self.packed_histograms[packed_tag].layers:
                found.setdefault(layer.tag, []).append(packed_tag)
        return found

    @property
    def signature(self) -> tuple:
        """Changes whenever a series gains a later step or a later write."""
        marker = self.marker
        return tuple(
            sorted((tag, s.max_step, s.max_wall_time) for tag, s in self.ratios.items())
        ) + ((marker.max_step, marker.max_wall_time) if marker is not None else (None,)) + tuple(
            sorted((tag, p.series.max_step, p.series.max_wall_time) for tag, p in self.packed.items())
        )


def _packed_sources(tensors: dict[str, Series], kind_wanted: str) -> dict[str, PackedSource]:
    """The packed series of kind `kind_wanted` among a run's tensor series, by tag."""
    found = {}
    for tag, series in tensors.items():
        content = _parse_content(series.plugin_content)
        if content and content["kind"] == kind_wanted:
            found[tag] = PackedSource(
                series, tuple(metadata.packed_layers(content)), content["offset"]
            )
    return found

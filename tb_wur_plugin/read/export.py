"""The `/export` stream: every kept point of a run's ratio tags as CSV or JSON text, one tag
at a time, so that no more than one tag's points are held at once."""

from __future__ import annotations

import csv
import io
import itertools
from itertools import chain, repeat
import json
import math
import re
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tensorboard import errors

from tb_wur_plugin.read.argument_values import shown
from tb_wur_plugin.read.point_columns import PointColumns

FORMATS = ("csv", "json")
CSV_HEADER = "tag,step,wall_time,ratio\r\n"


def stream(
    run: str,
    tags: Sequence[str],
    read_tags: Callable[[list[str]], dict[str, PointColumns]],
    export_format: str,
) -> Iterator[str]:
    """The export of `run`, as text chunks.

    The first tags are read before this returns, so that a run already gone raises here (a
    clean 404); the others are read, TAGS_PER_READ at a time, when the stream reaches them.
    A tag gone by then (the run was deleted meanwhile) aborts the stream with an error: the
    client sees a failed transfer, never a silently incomplete export.

    Args:
        run: the run's name (for the error message).
        tags: the ratio tags, in the order they are exported; at least one.
        read_tags: some tags' kept points as columns (steps, wall times, values), in any
            order, by tag; a tag that is gone is absent.
        export_format: "csv" (header CSV_HEADER, one row per point) or "json" (one key per
            tag, [wall_time, step, ratio] per point, non-finite ratios as the strings
            "NaN", "Infinity", "-Infinity").

    Returns:
        The chunks; each tag's points in step order, a step written twice in the order
        written.

    Raises:
        errors.NotFoundError: the first tag is gone; later, from the stream, any other tag.
    """
    pairs = _points_by_tag(run, tags, read_tags)
    pairs = itertools.chain([next(pairs)], pairs)
    return _csv_chunks(pairs) if export_format == "csv" else _json_chunks(pairs)


def filename(run: str, export_format: str) -> str:
    """The attachment's file name: `wur-RUN.FORMAT`, the run's name cut to [A-Za-z0-9._-]."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._") or "run"
    return f"wur-{name}.{export_format}"


def _points_by_tag(
    run: str, tags: Sequence[str], read_tags: Callable[[list[str]], dict[str, PointColumns]]
) -> Iterator[tuple[str, PointColumns]]:
    """(tag, its columns by step) of each of `tags`, read TAGS_PER_READ at a time when the
    stream reaches them."""
    for start in range(0, len(tags), TAGS_PER_READ):
        batch = list(tags[start:start + TAGS_PER_READ])
        columns_by_tag = read_tags(batch)
        for tag in batch:
            columns = columns_by_tag.pop(tag, None)
            if columns is None:
                raise errors.NotFoundError(
                    f"run {shown(run)} was removed during its export; export aborted"
                )
            steps, wall_times, values = columns
            order = np.argsort(steps, kind="stable")  # a step written twice: in the order written
            yield tag, (steps[order], wall_times[order], values[order])


class _RepeatedTexts:
    """The texts of numbers that repeat from one tag to the next (the wall times of a run
    whose layers are written in one event per step), each formatted once: the previous
    tag's texts are reused or looked up, the others formatted with `format_number`."""

    def __init__(self, format_number: Callable[[Any], str]):
        self._format = format_number
        self._numbers = np.zeros(0)
        self._texts: list[str] = []
        self._by_number: dict = {}

    def of(self, numbers: np.ndarray) -> list[str]:
        """The text of each of `numbers`, in their order."""
        if not np.array_equal(numbers, self._numbers):
            distinct, position = np.unique(numbers, return_inverse=True)
            keys = distinct.tolist()
            texts = list(map(self._by_number.get, keys))
            if None in texts:
                texts = [self._format(k) if t is None else t for k, t in zip(keys, texts)]
            self._by_number = dict(zip(keys, texts))
            self._numbers = numbers
            self._texts = np.array(texts, dtype=object)[position].tolist()
        return self._texts


def _csv_field(text: str) -> str:
    """`text` as one CSV field, quoted as csv.writer quotes it."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow((text,))
    return buffer.getvalue()[:-2]  # without the row's "\r\n"


def _csv_chunks(points_by_tag: Iterable[tuple[str, PointColumns]]) -> Iterator[str]:
    yield CSV_HEADER
    step_texts, wall_time_texts = _RepeatedTexts(str), _RepeatedTexts(repr)
    for tag, (steps, wall_times, values) in points_by_tag:
        steps, wall_times = step_texts.of(steps), wall_time_texts.of(wall_times)
        # what csv.writer writes for (tag, step, repr(wall_time), repr(value)), in bulk: the
        # fields of every row joined at once (the values' reprs are most of the time)
        prefix = repeat(_csv_field(tag) + ",")
        for start in range(0, len(steps), _ROWS_PER_CHUNK):
            part = slice(start, start + _ROWS_PER_CHUNK)
            yield "".join(chain.from_iterable(zip(
                prefix, steps[part], _COMMA,
                wall_times[part], _COMMA,
                _ratio_texts(values[part]), repeat("\r\n"),
            )))


def _ratio_texts(values: np.ndarray) -> Iterator[str]:
    """The CSV texts of `values`: when every one is a float32 (as every writer stores
    ratios), each with 9 significant digits, which name its float32 exactly (and cost half
    of Python's repr of the float64, up to 17 digits); else each as Python's repr. NaN and
    infinities as Python writes them."""
    with np.errstate(over="ignore"):
        float32 = np.array_equal(values.astype(np.float32), values, equal_nan=True)
    return map(_FLOAT32_TEXT if float32 else repr, values.tolist())


_FLOAT32_TEXT = "{:.9g}".format


def _json_number(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(float(value))


def _json_chunks(points_by_tag: Iterable[tuple[str, PointColumns]]) -> Iterator[str]:
    yield "{"
    step_texts, wall_time_texts = _RepeatedTexts(str), _RepeatedTexts(repr)
    for position, (tag, (steps, wall_times, values)) in enumerate(points_by_tag):
        texts = (
            map(repr, values.tolist()) if np.isfinite(values).all()
            else map(_json_number, values.tolist())
        )
        rows = "".join(chain.from_iterable(zip(
            chain(["["], repeat("],[")), wall_time_texts.of(wall_times), _COMMA,
            step_texts.of(steps), _COMMA, texts,
        )))
        rows = rows + "]" if rows else rows
        yield f"{',' if position else ''}{json.dumps(tag)}:[{rows}]"
    yield "}"


# CSV rows formatted and sent at a time.
_ROWS_PER_CHUNK = 100_000
# Tags read per data-provider call (each call has a cost of its own in the data server).
TAGS_PER_READ = 32
_COMMA = repeat(",")

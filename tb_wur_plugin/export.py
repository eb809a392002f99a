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
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from tensorboard import errors

from tb_wur_plugin.http_args import shown
from tb_wur_plugin.tb_private import Columns

FORMATS = ("csv", "json")
CSV_HEADER = "tag,step,wall_time,ratio\r\n"


def stream(
    run: str,
    tags: Sequence[str],
    read_tag: Callable[[str], Columns | None],
    export_format: str,
) -> Iterator[str]:
    """The export of `run`, as text chunks.

    The first tag is read before this returns, so that a run already gone raises here (a
    clean 404); the others are read when the stream reaches them. A tag gone by then (the
    run was deleted meanwhile) aborts the stream with an error: the client sees a failed
    transfer, never a silently incomplete export.

    Args:
        run: the run's name (for the error message).
        tags: the ratio tags, in the order they are exported; at least one.
        read_tag: a tag's kept points as columns (steps, wall times, values), in any
            order; None when the tag is gone.
        export_format: "csv" (header CSV_HEADER, one row per point) or "json" (one key per
            tag, [wall_time, step, ratio] per point, non-finite ratios as the strings
            "NaN", "Infinity", "-Infinity").

    Returns:
        The chunks; each tag's points in step order, a step written twice in the order
        written.

    Raises:
        errors.NotFoundError: the first tag is gone; later, from the stream, any other tag.
    """
    pairs = _points_by_tag(run, tags, read_tag)
    pairs = itertools.chain([next(pairs)], pairs)
    return _csv_chunks(pairs) if export_format == "csv" else _json_chunks(pairs)


def filename(run: str, export_format: str) -> str:
    """The attachment's file name: `wur-RUN.FORMAT`, the run's name cut to [A-Za-z0-9._-]."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._") or "run"
    return f"wur-{name}.{export_format}"


def _points_by_tag(
    run: str, tags: Sequence[str], read_tag: Callable[[str], Columns | None]
) -> Iterator[tuple[str, Columns]]:
    """(tag, its columns by step) of each of `tags`, read when the stream reaches it."""
    for tag in tags:
        columns = read_tag(tag)
        if columns is None:
            raise errors.NotFoundError(
                f"run {shown(run)} was removed during its export; export aborted"
            )
        steps, wall_times, values = columns
        order = np.argsort(steps, kind="stable")  # a step written twice: in the order written
        yield tag, (steps[order], wall_times[order], values[order])


def _csv_field(text: str) -> str:
    """`text` as one CSV field, quoted as csv.writer quotes it."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow((text,))
    return buffer.getvalue()[:-2]  # without the row's "\r\n"


def _csv_chunks(points_by_tag: Iterable[tuple[str, Columns]]) -> Iterator[str]:
    yield CSV_HEADER
    for tag, (steps, wall_times, values) in points_by_tag:
        # what csv.writer writes for (tag, step, repr(wall_time), repr(value)), in bulk: the
        # fields of every row joined at once (the reprs are most of the time)
        prefix = repeat(_csv_field(tag) + ",")
        for start in range(0, len(steps), _ROWS_PER_CHUNK):
            part = slice(start, start + _ROWS_PER_CHUNK)
            yield "".join(chain.from_iterable(zip(
                prefix, map(str, steps[part].tolist()), _COMMA,
                map(repr, wall_times[part].tolist()), _COMMA,
                map(repr, values[part].tolist()), repeat("\r\n"),
            )))


def _json_number(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(float(value))


def _json_chunks(points_by_tag: Iterable[tuple[str, Columns]]) -> Iterator[str]:
    yield "{"
    for position, (tag, (steps, wall_times, values)) in enumerate(points_by_tag):
        texts = (
            map(repr, values.tolist()) if np.isfinite(values).all()
            else map(_json_number, values.tolist())
        )
        rows = "".join(chain.from_iterable(zip(
            chain(["["], repeat("],[")), map(repr, wall_times.tolist()), _COMMA,
            map(str, steps.tolist()), _COMMA, texts,
        )))
        rows = rows + "]" if rows else rows
        yield f"{',' if position else ''}{json.dumps(tag)}:[{rows}]"
    yield "}"


# CSV rows formatted and sent at a time.
_ROWS_PER_CHUNK = 100_000
_COMMA = repeat(",")

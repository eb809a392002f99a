"""The `/export` stream: every kept point of a run's ratio tags as CSV or JSON text, one tag
at a time, so that no more than one tag's points are held at once."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
from typing import Callable, Iterable, Iterator, Sequence

from tensorboard import errors
from tensorboard.data import provider

from tb_wur_plugin.http_args import shown
from tb_wur_plugin.run_data import by_step

FORMATS = ("csv", "json")
CSV_HEADER = "tag,step,wall_time,ratio\r\n"

Points = list[provider.ScalarDatum]


def stream(
    run: str,
    tags: Sequence[str],
    read_tag: Callable[[str], Points | None],
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
        read_tag: a tag's kept points, in any order; None when the tag is gone.
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
    run: str, tags: Sequence[str], read_tag: Callable[[str], Points | None]
) -> Iterator[tuple[str, Points]]:
    for tag in tags:
        points = read_tag(tag)
        if points is None:
            raise errors.NotFoundError(
                f"run {shown(run)} was removed during its export; export aborted"
            )
        yield tag, by_step(points)


def _csv_chunks(points_by_tag: Iterable[tuple[str, Points]]) -> Iterator[str]:
    yield CSV_HEADER
    for tag, points in points_by_tag:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        for p in points:
            writer.writerow((tag, p.step, repr(p.wall_time), repr(float(p.value))))
        yield buffer.getvalue()


def _json_number(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(float(value))


def _json_chunks(points_by_tag: Iterable[tuple[str, Points]]) -> Iterator[str]:
    yield "{"
    for position, (tag, points) in enumerate(points_by_tag):
        rows = ",".join(f"[{p.wall_time!r},{p.step},{_json_number(p.value)}]" for p in points)
        yield f"{',' if position else ''}{json.dumps(tag)}:[{rows}]"
    yield "}"

"""The flags fired while training, set against what `tb-wur report` says of the run written:
each as (metric, tag, reason, since), the report's flagged layers alike."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def fired(flags: Iterable[Any]) -> set[tuple[str, str, str, int]]:
    """(metric, tag, reason, since) of each fired flag (a `Flag`, or its fields as a dict)."""
    found = set()
    for flag in flags:
        fields = flag if isinstance(flag, dict) else vars(flag)
        found.add((fields["metric"], fields["tag"], fields["reason"], fields["since"]))
    return found


def reported(logdir: str, run: str, metrics: Iterable[str] = ("frobenius",),
             **settings: Any) -> set[tuple[str, str, str, int]]:
    """(metric, tag, reason, since) of each layer that `tb-wur report` (`settings`: its
    `Settings`, e.g. patience=) flags in `run` of `logdir`, for each of `metrics`."""
    from tb_wur_plugin.read import report

    found = set()
    for metric in metrics:
        with report.open_logdir(logdir, load_fast=False, metric=metric) as opened:
            answer = report.run_report(opened, run, report.Settings(**settings))
        found |= {(metric, layer["tag"], layer["reason"], layer["since"])
                  for layer in answer["layers"] if layer["reason"]}
    return found

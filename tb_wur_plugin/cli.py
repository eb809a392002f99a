"""The `tb-wur` command: `tb-wur report LOGDIR [...]` (docs/report.md).

Exit status: 0; 1 with --fail-on-flags when a selected layer is flagged or a selected run has
a damaged event file, and with --fail-on-damage when a selected run has a damaged event file; 2
when the logdir is missing, holds no wur data, --run selects no run, or an argument is bad (a
short reason on stderr, no traceback). Each damaged event file of a selected run: one line on
stderr, whatever the exit status.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import Any, Callable

from tb_wur_plugin.judgement import judge
from tb_wur_plugin.judgement.thresholds import DEFAULT_BAND, DEFAULT_PATIENCE
from tb_wur_plugin.read.settings import DEFAULT_SAMPLES_PER_TAG
from tb_wur_plugin.read import argument_values, suggest

EXIT_OK, EXIT_FLAGGED, EXIT_ERROR = 0, 1, 2


def _argument(parse: Callable[..., Any], *bounds: int) -> Callable[[str], Any]:
    """An argparse `type=` for `parse` (`argument_values`), its ValueError a usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text, *bounds)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return convert


_positive_float = _argument(argument_values.positive_number)
_positive_int = _argument(argument_values.integer, 1)
_samples = _argument(argument_values.integer, 0)  # 0: all


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({e})") from None
    return text


def _boolean(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tb-wur", description="Weight-update ratio tools.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "report", help="per-layer weight-update ratio report of a logdir",
        description="Per run and layer: logged and skipped steps, median and last ratio, steps "
        "above and below the band, non-finite steps, whether the layer is flagged (as in the "
        "tab: the default judgement, and the band rule with --low/--high), why in one line, "
        "and a suggested learning rate.",
    )
    p.add_argument("logdir", metavar="LOGDIR")
    p.add_argument("--run", type=_regex, default=None, metavar="REGEX",
                   help="only runs whose name re.search-es REGEX")
    p.add_argument("--low", type=_positive_float, default=None,
                   help="an explicit band's low edge: adds the band rule (below_band) to the "
                   f"default judgement (default with --high only: {DEFAULT_BAND[0]:g})")
    p.add_argument("--high", type=_positive_float, default=None,
                   help="an explicit band's high edge: adds the band rule (above_band) "
                   f"(default with --low only: {DEFAULT_BAND[1]:g})")
    p.add_argument("--patience", type=_positive_int, default=DEFAULT_PATIENCE,
                   help="judged steps in a row that make a finding flag a layer")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--fail-on-flags", action="store_true",
                   help="exit with status 1 when any selected layer is flagged, or any "
                   "selected run has a damaged event file")
    p.add_argument("--fail-on-damage", action="store_true",
                   help="exit with status 1 when any selected run has a damaged event file "
                   "(unreadable bytes, a last record cut short included)")
    p.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), default=None,
                   help="rank the common layers of two runs by median |log10(A/B)|")
    p.add_argument("--target", type=_positive_float, default=suggest.DEFAULT_TARGET,
                   help="the ratio the suggested learning rate aims at")
    p.add_argument("--last", type=_positive_int, default=suggest.DEFAULT_LAST, metavar="K",
                   help="logged steps per layer the suggestion is taken over")
    p.add_argument("--samples", type=_samples, default=DEFAULT_SAMPLES_PER_TAG, metavar="N",
                   help="steps kept per tag when loading (0: all; default as the tab's)")
    p.add_argument("--metric", choices=("frobenius", "spectral"), default="frobenius",
                   help="the ratios judged: frobenius (||dw||/||w||, default) or spectral "
                   "(operator norms ||dW||_2/||W||_2 of the parameters of two or more dimensions)")
    p.add_argument("--load_fast", type=_boolean, default=None, metavar="BOOL",
                   help="TensorBoard's fast loader (default: when installed) or the Python one")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # bad arguments: usage and reason on stderr, status 2
    try:
        judge.band_of(args.low, args.high)
    except ValueError as e:
        print(f"tb-wur report: --{e}", file=sys.stderr)  # "--low (..) must be below high (..)"
        return EXIT_ERROR
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    from tb_wur_plugin.read import report

    settings = report.Settings(args.low, args.high, args.patience, args.target, args.last)
    try:
        with report.open_logdir(
            args.logdir, args.samples, args.load_fast, args.metric
        ) as logdir:
            answer = report.report(
                logdir, args.run, settings, tuple(args.compare) if args.compare else None
            )
    except report.ReportError as e:
        for line in e.damage_lines:
            print(f"tb-wur report: {line}", file=sys.stderr)
        print(f"tb-wur report: {e}", file=sys.stderr)
        return EXIT_ERROR
    damaged = report.damage_lines(answer)
    for line in damaged:
        print(f"tb-wur report: {line}", file=sys.stderr)
    if report.unchecked(answer):
        print(f"tb-wur report: {args.logdir} is not a local directory: its event files were "
              "not checked for damage", file=sys.stderr)
    sys.stderr.flush()
    if args.format == "json":
        sys.stdout.write(json.dumps(report.to_json(answer), allow_nan=False) + "\n")
    else:
        sys.stdout.write(report.to_text(answer, settings))
    sys.stdout.flush()
    flagged = any(l["flagged"] for r in answer["runs"] for l in r["layers"])
    if (args.fail_on_flags and flagged) or ((args.fail_on_flags or args.fail_on_damage) and damaged):
        return EXIT_FLAGGED
    return EXIT_OK


def console_main() -> None:  # the console script
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)

"""The default judgement on the corpus of real training runs (tests/support/judgement_corpus.py): the
confusion table, per layer, of healthy/sick × flagged/not, per reason, as
benchmarks/RESULTS.md records it.

    .venv/bin/python benchmarks/judgement.py [--logdir DIR] [--verbose] [--metric spectral]

Without --logdir the corpus is generated into a temporary directory first (about a minute
of CPU; with `--metric spectral` its writers log spectral ratios too). The judgement is
`tb-wur report`'s (its JSON, through the Python loader); `--metric spectral` judges the
spectral update ratios, the matrices' layers only, against the corpus's expectations for
those layers.
--verbose also prints every run's flags, and per run and layer kind the median ratio.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "support"))

import judgement_corpus  # noqa: E402
from tb_wur_plugin import cli  # noqa: E402


def report(logdir: str, *args: str) -> tuple[int, dict]:
    """(exit status, JSON) of `tb-wur report LOGDIR --format json --fail-on-flags ARGS`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(["report", logdir, "--format", "json", "--fail-on-flags",
                           "--load_fast", "false", *args])
    return status, json.loads(out.getvalue())


def confusion(logdir: str, runs=None, metric: str = "frobenius") -> dict:
    """Per run the report's flags (of `metric`'s ratios) against the corpus's expectations
    for the layers the report judges, and the table."""
    runs = judgement_corpus.RUNS if runs is None else runs
    table = collections.Counter()
    by_run = []
    for run in runs:
        status, answer = report(logdir, "--run", f"^{run.name}$", "--metric", metric)
        (r,) = answer["runs"]
        judged = {l["tag"] for l in r["layers"]}
        expected = {t: why for t, why in run.expected.items() if t in judged}
        got = {l["tag"]: l["reason"] for l in r["layers"] if l["flagged"]}
        for layer in r["layers"]:
            want = expected.get(layer["tag"])
            truth = "sick" if want else "healthy"
            if layer["flagged"]:
                right = want == layer["reason"]
                table[(truth, "flagged", layer["reason"], right)] += 1
            else:
                table[(truth, "not flagged", want, None)] += 1
        by_run.append({
            "run": run.name, "framework": run.framework, "what": run.what,
            "layers": len(r["layers"]), "status": status, "flags": got,
            "expected": expected,
            "texts": {l["tag"]: l["text"] for l in r["layers"] if l["flagged"]},
            "ok": got == expected and status == (1 if expected else 0),
        })
    return {"runs": by_run, "table": table}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--metric", choices=("frobenius", "spectral"), default="frobenius")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wur_corpus_") as tmp:
        logdir = args.logdir or tmp
        if args.logdir is None:
            start = time.perf_counter()
            judgement_corpus.generate(logdir, spectral=args.metric == "spectral")
            print(f"corpus generated in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        result = confusion(logdir, metric=args.metric)
    healthy = [r for r in result["runs"] if not r["expected"]]
    sick = [r for r in result["runs"] if r["expected"]]
    print(f"runs: {len(healthy)} healthy, {len(sick)} sick; "
          f"{sum(r['ok'] for r in result['runs'])} of {len(result['runs'])} judged as expected")
    for r in result["runs"]:
        mark = "ok " if r["ok"] else "BAD"
        print(f"{mark} {r['run']:48s} {r['layers']:2d} layers, exit {r['status']}, "
              f"flagged {len(r['flags'])}, expected {len(r['expected'])}")
        if args.verbose or not r["ok"]:
            for tag, text in r["texts"].items():
                print(f"      {tag}: {text}")
            for tag, reason in r["expected"].items():
                if r["flags"].get(tag) != reason:
                    print(f"      MISSED {tag}: expected {reason}, got {r['flags'].get(tag)}")
    print()
    print("layers: truth × judgement (reason; right = the expected reason)")
    for (truth, judged, reason, right), n in sorted(
        result["table"].items(), key=lambda kv: tuple(str(x) for x in kv[0])
    ):
        detail = "" if judged == "not flagged" else f" as {reason}" + ("" if right else " (WRONG)")
        expect = f" (expected {reason})" if judged == "not flagged" and reason else ""
        print(f"  {truth:8s} {judged}{detail}{expect}: {n}")
    return 0 if all(r["ok"] for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

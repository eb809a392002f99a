"""Benchmark of `tb-wur report`: a logdir of LAYERS ratio series × STEPS logged steps (one
run, written once with the TF-free tb_wur_plugin.writer.SummaryWriter and cached under
benchmarks/.data), reported by the installed console script; wall time and peak memory.
With the fast loader, also the time TensorBoard's data server alone takes to load the
logdir (`load_cycle_s`: started and waited for as the report does, nothing read), the
part of the report's time that is TensorBoard's.

    python benchmarks/report.py                      # 300 layers x 10,000 steps, fast loader
    python benchmarks/report.py --load_fast false    # the Python loader
    python benchmarks/report.py --smoke              # tiny sizes, for CI
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_logdir(path: str, layers: int, steps: int) -> float:
    """Writes the run (if not there yet); returns the seconds it took (0 if cached)."""
    done = os.path.join(path, ".complete")
    if os.path.exists(done):
        return 0.0
    shutil.rmtree(path, ignore_errors=True)
    from tb_wur_plugin.writer import SummaryWriter

    rng = np.random.default_rng(0)
    tags = [f"model/block_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers)]
    base = 10 ** rng.uniform(-5, -1, layers)
    start = time.perf_counter()
    with SummaryWriter(os.path.join(path, "run")) as writer:
        for step in range(steps):
            values = base * np.exp(rng.normal(0, 0.1, layers))
            writer.add_ratios(dict(zip(tags, values.tolist())), step)
            if step % 10 == 0:
                writer.add_learning_rate(0.01, step)
    open(done, "w").close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--load_fast", default="true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps = 6, 50
    path = os.path.join(HERE, ".data", f"report_{args.layers}x{args.steps}")
    written = write_logdir(path, args.layers, args.steps)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    tb_wur = shutil.which("tb-wur") or os.path.join(os.path.dirname(sys.executable), "tb-wur")
    start = time.perf_counter()
    done = subprocess.run(
        [tb_wur, "report", path, "--format", "json", "--load_fast", args.load_fast],
        capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"tb-wur report failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    (run,) = report["runs"]
    assert len(run["layers"]) == args.layers
    assert all(l["logged_steps"] == args.steps for l in run["layers"])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load_cycle = None
    if args.load_fast == "true":
        from tb_wur_plugin.read import report as report_module

        start = time.perf_counter()
        with report_module.open_logdir(path, 0, True):
            load_cycle = round(time.perf_counter() - start, 2)
    print(json.dumps({
        "layers": args.layers, "steps": args.steps, "load_fast": args.load_fast,
        "event_bytes": size, "write_s": round(written, 2), "report_s": round(seconds, 2),
        "report_peak_rss_mib": round(peak), "load_cycle_s": load_cycle,
        "flagged": sum(l["flagged"] for l in run["layers"]),
    }))


if __name__ == "__main__":
    main()

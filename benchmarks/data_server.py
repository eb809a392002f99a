"""What a layout costs TensorBoard's data server (issue #24): the same LAYERS x STEPS ratios
written by `tb_wur_plugin.writer.SummaryWriter` in the packed layout (protocol version 3, one
tensor per step and chunk of layers) and in the per-tag layout of protocol version 2
(`packed=False`: one scalar per layer and step), each loaded by the bare data server
(`--reload=once`, every point kept) in interleaved rounds.

Per layout and round:
- bytes_per_point: the event files' size over LAYERS x STEPS;
- load_cycle_ms: the server's own "Finished load cycle" time;
- rss_mb: the server's resident memory once loaded.
The ratio packed / per_tag of the median load cycle is the issue's "load cycle, as a ratio to
the per-tag layout in the same run".

    python benchmarks/data_server.py                  # 300 x 10,000, 3 rounds
    python benchmarks/data_server.py --smoke          # 20 x 200, 1 round, for CI
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir))

LAYOUTS = ("packed", "per_tag")


def write(path: str, layers: int, steps: int, packed: bool) -> None:
    """The run `path/run` (once: kept under benchmarks/.data)."""
    if os.path.exists(os.path.join(path, "done")):
        return
    from tb_wur_plugin.writer import SummaryWriter

    rng = np.random.default_rng(0)
    level = rng.uniform(-5, -1, size=layers)
    names = [f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers)]
    with SummaryWriter(os.path.join(path, "run"), packed=packed) as writer:
        for step in range(steps):
            values = 10.0 ** (level + rng.normal(0, 0.15, size=layers))
            writer.add_ratios(dict(zip(names, values.tolist())), step)
    open(os.path.join(path, "done"), "w").close()


def load_once(binary: str, logdir: str) -> dict:
    """The data server loading `logdir` once: its load cycle and resident memory."""
    with tempfile.TemporaryDirectory() as tmp:
        process = subprocess.Popen(
            [binary, f"--logdir={logdir}", "--reload=once", "--samples-per-plugin=wur=all",
             "--port=0", f"--port-file={tmp}/port", "--die-after-stdin", "--verbose",
             "--host=localhost"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            cycle = None
            for line in process.stderr:  # e.g. "Finished load cycle (8.6123s)", Rust's Duration
                found = re.search(r"Finished load cycle \(([\d.]+)(ns|µs|us|ms|s)\)", line)
                if found:
                    scale = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
                    cycle = round(float(found.group(1)) * scale[found.group(2)], 1)
                    break
            if cycle is None:
                raise RuntimeError("the data server ended before a load cycle finished")
            time.sleep(0.5)
            with open(f"/proc/{process.pid}/status") as f:
                rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        finally:
            process.kill()
            process.wait()
    return {"load_cycle_ms": cycle, "rss_mb": round(rss / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.rounds = 20, 200, 1
    from tensorboard.data import server_ingester

    binary = server_ingester.get_server_binary().path
    paths = {}
    for layout in LAYOUTS:
        paths[layout] = os.path.join(
            HERE, ".data", f"data_server_{layout}_{args.layers}x{args.steps}")
        write(paths[layout], args.layers, args.steps, packed=layout == "packed")
    points = args.layers * args.steps
    results: dict[str, list[dict]] = {layout: [] for layout in LAYOUTS}
    for round_ in range(args.rounds):  # interleaved: this machine is noisy
        for layout in LAYOUTS:
            measured = load_once(binary, paths[layout])
            results[layout].append(measured)
            print(json.dumps({"round": round_, "layout": layout, **measured}), flush=True)
    summary = {"layers": args.layers, "steps": args.steps}
    for layout in LAYOUTS:
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(paths[layout], "run", "*")))
        summary[layout] = {
            "bytes_per_point": round(size / points, 2),
            "load_cycle_ms": statistics.median(r["load_cycle_ms"] for r in results[layout]),
            "rss_mb": statistics.median(r["rss_mb"] for r in results[layout]),
        }
    summary["load_cycle_ratio"] = round(
        summary["packed"]["load_cycle_ms"] / max(summary["per_tag"]["load_cycle_ms"], 1), 3)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

"""A large run through the real TensorBoard (issues #18, #24): LAYERS layers x STEPS steps,
written once with the TF-free `tb_wur_plugin.writer.SummaryWriter` (cached under
benchmarks/.data), in the packed layout (default) or the per-tag one (`--layout per_tag`),
served by `tensorboard` with the fast loader and the Python loader.

Per loader:
- serving_s: from starting `tensorboard` until it serves (its own start: it imports
  TensorFlow where installed, then starts its data server, whose load begins then);
- all_steps_s: from starting `tensorboard` until /runs shows every layer with STEPS logged
  steps (polled every 0.25 s, a tab left open polls on reload); after_serving_s: the same
  from the moment it serves;
- peak_rss_mb: the peak resident memory of tensorboard and its data server together (the
  process group, sampled every 0.2 s from /proc), over the whole run of requests;
- heatmap_cold_s / heatmap_warm_s: /heatmap?columns=COLUMNS of the run, the first request
  after loading and the median of 5 more (the same answer, kept); heatmap_new_range_s: the
  median of 3 ranges not asked before (computed anew over the cached matrix);
- flags_s: /flags of the run (the default judgement), the first request; flags_again_s: the
  median of 3 more (the same answer, kept while the run's data is current);
- export_s: /export?format=csv of the run, the whole body read (`--no-export`: not asked).

`--profile`: the same reads in-process (run_data.RunData over the data server's gRPC
provider, as `--load_fast=true`, and over the Python loader's MultiplexerDataProvider), each
step timed and the top of cProfile's cumulative listing printed, to see what is ours.

    python benchmarks/large_run.py                       # 300 x 10,000, both loaders
    python benchmarks/large_run.py --loaders fast
    python benchmarks/large_run.py --profile
    python benchmarks/large_run.py --smoke               # 20 x 200, for CI
    python benchmarks/large_run.py --layers 1000 --steps 100000 --loaders fast
    python benchmarks/large_run.py --layers 1000 --steps 100000 --loaders fast \
        --data /tmp/large_runs --no-export

`--data DIR`: where the runs are written and kept (default benchmarks/.data).
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import json
import os
import pstats
import statistics
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "support"))

from tb_server import TensorBoardServer  # noqa: E402


def tags(layers: int) -> list[str]:
    return [f"dense_{i // 2}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(layers)]


def write_run(path: str, layers: int, steps: int, packed: bool = True) -> float:
    """Writes the run `run` under `path` (once); the seconds it took (0 when cached)."""
    run = os.path.join(path, "run")
    if glob.glob(os.path.join(run, "events.out.tfevents.*")) and os.path.exists(
        os.path.join(path, "done")
    ):
        return 0.0
    from tb_wur_plugin.writer import SummaryWriter

    rng = np.random.default_rng(0)
    level = rng.uniform(-5, -1, size=layers)
    names = tags(layers)
    began = time.perf_counter()
    with SummaryWriter(run, packed=packed) as writer:
        for step in range(steps):
            values = 10.0 ** (level + rng.normal(0, 0.15, size=layers))
            writer.add_ratios(dict(zip(names, values.tolist())), step)
    open(os.path.join(path, "done"), "w").close()
    return time.perf_counter() - began


def event_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "run", "events.*")))


class GroupRSS:
    """Peak resident memory of a process group (tensorboard and its data server)."""

    def __init__(self, pgid: int):
        self.pgid, self.peak, self._stop = pgid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now(self) -> int:
        return sum(self.by_process().values())

    def by_process(self) -> dict[str, int]:
        """Resident bytes by process name (comm) in the group."""
        total: dict[str, int] = {}
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(stat) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[2]) != self.pgid:  # fields[2]: pgrp
                    continue
                name = open(stat[:-4] + "comm").read().strip()
                with open(stat[:-4] + "status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total[name] = total.get(name, 0) + int(line.split()[1]) * 1024
            except (OSError, IndexError, ValueError):
                pass
        return total

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def serve(
    logdir: str, load_fast: bool, layers: int, steps: int, columns: int, export: bool = True
) -> dict:
    began = time.perf_counter()
    with TensorBoardServer(logdir, load_fast) as server:
        serving = time.perf_counter() - began
        with GroupRSS(os.getpgid(server._process.pid)) as rss:
            polls = 0
            while True:
                status, _, body = server.get("/data/plugin/wur/runs", timeout=1200)
                polls += 1
                if status == 200:
                    runs = json.loads(body)["runs"]
                    if runs and len(runs[0]["layers"]) == layers and all(
                        layer["logged_steps"] == steps for layer in runs[0]["layers"]
                    ):
                        break
                if time.perf_counter() - began > 1800:
                    raise RuntimeError("timed out waiting for every step")
                time.sleep(0.25)
            all_steps = time.perf_counter() - began
            rss_loaded = rss.by_process()

            def timed(path, headers=None):
                t = time.perf_counter()
                status, _, body = server.get(path, headers, timeout=1200)
                assert status == 200, (path, status, body[:300])
                return time.perf_counter() - t, body

            heatmap = f"/data/plugin/wur/heatmap?run=run&columns={columns}"
            gzip = {"Accept-Encoding": "gzip"}
            cold, body = timed(heatmap, gzip)
            warm = statistics.median(timed(heatmap, gzip)[0] for _ in range(5))
            # the matrix cached, a range not asked before (a zoom): computed anew
            new_range = statistics.median(
                timed(f"{heatmap}&start={k}&end={steps - 1 - k}", gzip)[0] for k in (1, 2, 3))
            runs_warm = statistics.median(timed("/data/plugin/wur/runs")[0] for _ in range(3))
            flags_s, flags_body = timed("/data/plugin/wur/flags?run=run")
            flags_again = statistics.median(
                timed("/data/plugin/wur/flags?run=run")[0] for _ in range(3))
            export_s, csv_body = None, b""
            if export:
                export_s, csv_body = timed("/data/plugin/wur/export?run=run&format=csv")
                rows = csv_body.count(b"\n") - 1
                assert rows == layers * steps, rows
        return {
            "loader": "fast" if load_fast else "python",
            "serving_s": round(serving, 1),
            "all_steps_s": round(all_steps, 1),
            "after_serving_s": round(all_steps - serving, 1),
            "polls": polls,
            "rss_loaded_mb": {k: round(v / 2**20) for k, v in rss_loaded.items()},
            "peak_rss_mb": round(rss.peak / 2**20),
            "heatmap_cold_s": round(cold, 3),
            "heatmap_warm_s": round(warm, 3),
            "heatmap_new_range_s": round(new_range, 3),
            "heatmap_gzip_bytes": len(body),
            "runs_warm_s": round(runs_warm, 3),
            "flags_s": round(flags_s, 2),
            "flags_again_s": round(flags_again, 3),
            "flagged_layers": len(json.loads(flags_body)["layers"]),
            "export_s": None if export_s is None else round(export_s, 2),
            "export_bytes": len(csv_body),
        }


def profile(logdir: str, load_fast: bool, columns: int, top: int) -> None:
    """The plugin's reads in-process, each timed, with cProfile's top functions."""
    from tensorboard import context as tb_context
    from tb_wur_plugin import plugin
    from tb_wur_plugin.read import report
    from tensorboard.plugins import base_plugin

    loader = "fast" if load_fast else "python"
    began = time.perf_counter()
    with report.open_logdir(logdir, 0, load_fast) as opened:
        provider = opened.data._provider
        if load_fast:  # the data server loads in the background: wait for every point
            ctx = tb_context.RequestContext()
            while True:
                listing = {
                    **provider.list_scalars(ctx, experiment_id="", plugin_name="wur").get("run", {}),
                    **provider.list_tensors(ctx, experiment_id="", plugin_name="wur").get("run", {}),
                }
                if listing and all(s.max_step == STEPS - 1 for s in listing.values()):
                    break
                time.sleep(0.5)
        print(f"[{loader}] loaded in {time.perf_counter() - began:.1f} s", flush=True)
        context = base_plugin.TBContext(
            logdir=logdir, data_provider=provider, sampling_hints={"wur": 0}
        )
        wur = plugin.WURPlugin(context)
        ctx = tb_context.RequestContext()
        steps = [
            ("list_scalars", lambda: wur._data.list_scalars(ctx, "", ["run"])),
            ("runs (cold)", lambda: wur.answers.runs_impl(ctx, "")),
            ("runs (warm)", lambda: wur.answers.runs_impl(ctx, "")),
            ("heatmap (warm)", lambda: wur.answers.heatmap_impl(
                ctx, "", ["run"], columns, None, None, "mean_log10")),
            ("export csv", lambda: sum(
                len(c) for c in wur.answers.export_impl(ctx, "", "run", "csv"))),
        ]
        for name, call in steps:
            profiler = cProfile.Profile()
            t = time.perf_counter()
            profiler.enable()
            call()
            profiler.disable()
            print(f"[{loader}] {name}: {time.perf_counter() - t:.3f} s", flush=True)
            if top:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
                print("\n".join(out.getvalue().splitlines()[6:]), flush=True)


LAYERS, STEPS = 300, 10_000


def main() -> None:
    global LAYERS, STEPS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--columns", type=int, default=2000)
    parser.add_argument("--loaders", default="fast,python")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--layout", choices=("packed", "per_tag"), default="packed")
    parser.add_argument("--data", default=os.path.join(HERE, ".data"))
    parser.add_argument("--no-export", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.columns = 20, 200, 100
    LAYERS, STEPS = args.layers, args.steps
    path = os.path.join(args.data, f"large_run_{args.layout}_{args.layers}x{args.steps}")
    written = write_run(path, args.layers, args.steps, args.layout == "packed")
    size = event_bytes(path)
    print(json.dumps({
        "layers": args.layers, "steps": args.steps, "layout": args.layout, "event_bytes": size,
        "bytes_per_point": round(size / (args.layers * args.steps), 1),
        "write_s": round(written, 1),
    }), flush=True)
    for loader in args.loaders.split(","):
        load_fast = {"fast": True, "python": False}[loader]
        if args.profile:
            profile(path, load_fast, args.columns, args.top)
        else:
            print(json.dumps(serve(path, load_fast, args.layers, args.steps, args.columns,
                                   not args.no_export)), flush=True)


if __name__ == "__main__":
    main()

"""Backend benchmark: the heatmap, flags and export routes of a big run, real TensorBoard.

Writes (once, cached under benchmarks/.data) a run of LAYERS ratio series × STEPS logged
steps with the project's own summary API, serves it with the real `tensorboard` command
(fast loader by default), and reports:
- the latency of the first /runs and /heatmap once loaded (cold: the run not yet cached),
- warm latency of /runs, /heatmap (binned to COLUMNS columns) and /flags,
- the heatmap's size on the wire (gzip, as a browser receives it),
- the export's CSV size and the TensorBoard process's peak resident memory while streaming it.

    python benchmarks/backend.py                 # 500 layers x 10,000 steps -> 2,000 columns
    python benchmarks/backend.py --smoke         # tiny sizes, for CI
    python benchmarks/backend.py --load_fast false
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "support"))

from tb_server import TensorBoardServer  # noqa: E402


def tag_of(layer: int) -> str:
    """The tag of layer `layer` of the run `write_run` writes."""
    return f"model/block_{layer // 2}/{'kernel' if layer % 2 == 0 else 'bias'}"


def last_tag(layers: int) -> str:
    """The tag written last at each step."""
    return tag_of(layers - 1)


def write_run(logdir: str, layers: int, steps: int) -> None:
    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    rng = np.random.default_rng(0)
    # each layer: a random walk in log10 around its own level, step-to-step noise
    level = rng.uniform(-5, -1, size=layers)
    walk = np.cumsum(rng.normal(0, 0.02, size=(steps, layers)), axis=0)
    ratios = 10.0 ** (level + walk + rng.normal(0, 0.15, size=(steps, layers)))
    tags = [tag_of(i) for i in range(layers)]
    writer = tf.summary.create_file_writer(os.path.join(logdir, "big_run"), max_queue=10_000)

    @tf.function
    def log(step, values):
        for index, tag in enumerate(tags):
            wur_summary.scalar(tag, values[index], step=step)

    with writer.as_default():
        for step in range(steps):
            log(tf.constant(step * 10, tf.int64), tf.constant(ratios[step]))
    writer.close()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def timed(server: TensorBoardServer, path: str, gzip: bool = False) -> tuple[float, int]:
    headers = {"Accept-Encoding": "gzip"} if gzip else None
    start = time.perf_counter()
    status, _, body = server.get(path, headers)
    elapsed = time.perf_counter() - start
    assert status == 200, (path, status, body[:300])
    return elapsed, len(body)


def wait_until_loaded(server: TensorBoardServer, layers: int, steps: int) -> None:
    """Waits until the run `write_run` wrote is loaded: when the last point written is
    served, by /series, which leaves the plugin's caches cold."""
    started = time.perf_counter()
    while True:
        status, _, body = server.get(f"/data/plugin/wur/series?run=big_run&tag={last_tag(layers)}")
        if status == 200 and len(json.loads(body)["steps"]) == steps:
            break
        if time.perf_counter() - started > 1800:
            raise RuntimeError(f"not loaded:\n{server.output()}")
        time.sleep(0.5)
    print(f"loaded after {time.perf_counter() - started:.1f} s")


def time_cold(server: TensorBoardServer, layers: int, steps: int, heatmap_path: str) -> None:
    """Waits until the run is loaded, then prints the time of the first /runs and the first
    /heatmap (the run not yet in the plugin's cache)."""
    wait_until_loaded(server, layers, steps)
    cold_runs, _ = timed(server, "/data/plugin/wur/runs", gzip=True)
    cold_heatmap, _ = timed(server, heatmap_path, gzip=True)
    runs = server.get_json("/data/plugin/wur/runs")["runs"]
    assert len(runs[0]["layers"]) == layers, "not fully loaded"
    assert all(layer["logged_steps"] == steps for layer in runs[0]["layers"])
    print(f"cold (the run not yet cached): /runs {cold_runs:.3f} s, then /heatmap "
          f"{cold_heatmap:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=500)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--columns", type=int, default=2000)
    parser.add_argument("--load_fast", choices=["true", "false"], default="true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="20 layers x 300 steps")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.columns, args.repeats = 20, 300, 100, 2

    logdir = os.path.join(HERE, ".data", f"run_{args.layers}x{args.steps}")
    if not os.path.exists(os.path.join(logdir, "done")):
        started = time.perf_counter()
        write_run(logdir, args.layers, args.steps)
        open(os.path.join(logdir, "done"), "w").close()
        print(f"wrote {args.layers} x {args.steps} ratios in {time.perf_counter() - started:.0f} s")

    load_fast = args.load_fast == "true"
    with TensorBoardServer(logdir, load_fast) as server:
        heatmap_path = f"/data/plugin/wur/heatmap?run=big_run&columns={args.columns}"
        time_cold(server, args.layers, args.steps, heatmap_path)
        results = {}
        for name, path, gzip in [
            ("runs", "/data/plugin/wur/runs", True),
            ("heatmap", heatmap_path, True),
            ("heatmap max", heatmap_path + "&reduction=max", True),
            ("heatmap zoomed", heatmap_path + f"&start=0&end={args.steps * 5}", True),
            ("flags", "/data/plugin/wur/flags?run=big_run", True),
        ]:
            times, size = [], 0
            for _ in range(args.repeats):
                elapsed, size = timed(server, path, gzip)
                times.append(elapsed)
            results[name] = (statistics.median(times), min(times), max(times), size)

        tb_pid = server._process.pid
        baseline = rss_bytes(tb_pid)
        peak = [baseline]
        done = threading.Event()

        def watch_memory():
            while not done.is_set():
                peak[0] = max(peak[0], rss_bytes(tb_pid))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch_memory)
        watcher.start()
        export_time, export_size = timed(server, "/data/plugin/wur/export?run=big_run&format=csv")
        done.set()
        watcher.join()

    loader = "fast" if load_fast else "python"
    print(f"\n{args.layers} layers x {args.steps} steps, {args.columns} columns, {loader} loader, "
          f"warm, {args.repeats} requests each")
    print(f"{'route':<16}{'median s':>10}{'min s':>10}{'max s':>10}{'bytes on wire':>16}")
    for name, (median, low, high, size) in results.items():
        print(f"{name:<16}{median:>10.3f}{low:>10.3f}{high:>10.3f}{size:>16,}")
    points = args.layers * args.steps
    print(f"\nexport csv: {export_time:.1f} s, {export_size:,} bytes; TensorBoard process RSS "
          f"{baseline / 2**20:.0f} MiB before, peak {peak[0] / 2**20:.0f} MiB "
          f"(+{(peak[0] - baseline) / 2**20:.0f} MiB for {points:,} points; one copy of them as "
          f"Python floats and ints is about {points * 3 * 32 / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()

"""Concurrency benchmark: parallel clients on the heatmap route of a 200-layer run.

Writes (once, cached under benchmarks/.data, shared with backend.py) a run of LAYERS ratio
series × STEPS logged steps, serves it with the real `tensorboard` command (fast loader by
default), and reports the latency of /heatmap (binned to COLUMNS columns, gzip):
- cold: CLIENTS clients each send one request at the same moment, the run not yet cached;
- one client: REQUESTS sequential requests, warm;
- CLIENTS parallel clients, each sending REQUESTS requests back to back, warm:
  p50 / p99 / max latency over all requests, and requests per second.
Every answer must be a 200 with the same bytes.

    python benchmarks/concurrency.py             # 200 layers x 2,000 steps, 50 clients x 20
    python benchmarks/concurrency.py --smoke     # tiny sizes, for CI
    python benchmarks/concurrency.py --load_fast false
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import os
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "support"))

from tb_server import TensorBoardServer

_spec = importlib.util.spec_from_file_location("backend_benchmark", os.path.join(HERE, "backend.py"))
backend_benchmark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(backend_benchmark)


def burst(server: TensorBoardServer, path: str, clients: int, requests: int):
    """`clients` threads released together, each sending `requests` requests back to back:
    (latencies in seconds, distinct bodies, wall time of the whole burst)."""
    barrier = threading.Barrier(clients + 1)

    def client(_):
        barrier.wait()
        results = []
        for _ in range(requests):
            started = time.perf_counter()
            status, _, body = server.get(path, {"Accept-Encoding": "gzip"})
            elapsed = time.perf_counter() - started
            assert status == 200, (status, body[:300])
            results.append((elapsed, hashlib.sha256(body).hexdigest()))
        return results

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, i) for i in range(clients)]
        barrier.wait()
        started = time.perf_counter()
        results = [r for f in futures for r in f.result()]
        wall = time.perf_counter() - started
    return np.array([r[0] for r in results]), {r[1] for r in results}, wall


def row(name: str, latencies: np.ndarray, wall: float) -> str:
    p50, p99 = np.percentile(latencies, [50, 99])
    return (f"{name:<34}{len(latencies):>9}{p50:>9.3f}{p99:>9.3f}{latencies.max():>9.3f}"
            f"{len(latencies) / wall:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20, help="per client")
    parser.add_argument("--load_fast", choices=["true", "false"], default="true")
    parser.add_argument("--smoke", action="store_true", help="20 layers x 100 steps, 8 clients x 3")
    args = parser.parse_args()
    if args.smoke:
        args.layers, args.steps, args.columns, args.clients, args.requests = 20, 100, 50, 8, 3

    logdir = os.path.join(HERE, ".data", f"run_{args.layers}x{args.steps}")
    if not os.path.exists(os.path.join(logdir, "done")):
        started = time.perf_counter()
        backend_benchmark.write_run(logdir, args.layers, args.steps)
        open(os.path.join(logdir, "done"), "w").close()
        print(f"wrote {args.layers} x {args.steps} ratios in {time.perf_counter() - started:.0f} s")

    path = f"/data/plugin/wur/heatmap?run=big_run&columns={args.columns}"
    load_fast = args.load_fast == "true"
    with TensorBoardServer(logdir, load_fast) as server:
        backend_benchmark.wait_until_loaded(server, args.layers, args.steps)
        cold, cold_bodies, cold_wall = burst(server, path, args.clients, 1)
        single, single_bodies, single_wall = burst(server, path, 1, args.requests)
        warm, warm_bodies, warm_wall = burst(server, path, args.clients, args.requests)
        assert len(cold_bodies | single_bodies | warm_bodies) == 1, "answers differ"
        size = len(server.get(path, {"Accept-Encoding": "gzip"})[2])

    loader = "fast" if load_fast else "python"
    print(f"\n/heatmap of {args.layers} layers x {args.steps} steps -> {args.columns} columns "
          f"({size:,} bytes gzip), {loader} loader; every answer 200 and identical")
    print(f"{'':<34}{'requests':>9}{'p50 s':>9}{'p99 s':>9}{'max s':>9}{'req/s':>10}")
    print(row(f"cold, {args.clients} clients at once", cold, cold_wall))
    print(row("warm, 1 client", single, single_wall))
    print(row(f"warm, {args.clients} parallel clients", warm, warm_wall))


if __name__ == "__main__":
    main()

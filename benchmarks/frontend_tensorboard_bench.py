"""Click on the WUR tab -> heatmap drawn, in real Chromium against the real `tensorboard` (fast
loader) over a 5,000-step, 200-layer run written with wur_summary (issue 4: under 2 s).

    python benchmarks/frontend_tensorboard_bench.py [--steps 5000] [--layers 200] [--repeat 3]

Writing the event file takes a while (one traced tf.function per step); the file is kept in
/tmp/wur_bench_STEPSxLAYERS and reused by the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from tb_server import TensorBoardServer  # noqa: E402


def write(logdir: Path, steps: int, layers: int) -> None:
    import tensorflow as tf

    from tb_wur_plugin import wur_summary

    tags = [f"model/block_{i // 2}/{'bias' if i % 2 else 'kernel'}" for i in range(layers)]
    writer = tf.summary.create_file_writer(str(logdir / "run"), max_queue=10_000)

    @tf.function
    def log(step):
        s = tf.cast(step, tf.float32)
        for i, tag in enumerate(tags):
            wur_summary.scalar(tag, 1e-3 * (1.0 + 0.5 * tf.sin(s / 300.0 + i)), step=step)

    with writer.as_default():
        log.python_function(tf.constant(0, tf.int64))  # eagerly first: model order
        for step in range(1, steps):
            log(tf.constant(step, tf.int64))
    writer.close()
    (logdir / "complete").write_text("yes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logdir = Path(f"/tmp/wur_bench_{args.steps}x{args.layers}")
    if not (logdir / "complete").exists():
        t = time.monotonic()
        write(logdir, args.steps, args.layers)
        print(f"wrote {args.steps} steps x {args.layers} layers in {time.monotonic() - t:.0f} s")
    with TensorBoardServer(str(logdir), load_fast=True) as server:
        t = time.monotonic()
        server.wait_for(
            lambda d: d["runs"] and len(d["runs"][0]["layers"]) == args.layers
            and all(l["logged_steps"] == args.steps for l in d["runs"][0]["layers"]),
            "/data/plugin/wur/runs", timeout=600,
        )
        print(f"tensorboard (fast loader) loaded every step in {time.monotonic() - t:.0f} s")
        config = {"url": server.url, "repeat": args.repeat, "layers": args.layers}
        path = logdir / "bench-config.json"
        path.write_text(json.dumps(config))
        result = subprocess.run(
            ["node", str(ROOT / "benchmarks" / "frontend_tab_click.mjs"), str(path)],
            capture_output=True, text=True, timeout=600,
        )
        print(result.stdout + result.stderr, end="")
        sys.exit(result.returncode)


if __name__ == "__main__":
    main()

"""Training that dies: what was flushed to the event file is what TensorBoard shows.

A summary writer queues events and appends them to its event file when more than 10 are
queued (`max_queue`), when a write comes more than `flush_millis` (default 120,000) after the
last flush, on `flush()`/`close()`, and when a `with writer.as_default():` block is left
(eagerly). A process killed with SIGKILL loses the queue, never the file. The callback
enters the writer for each logged step, so each logged step is in the file once written.
These tests kill training processes and check that every intact record of their event
files reaches the export, with both loaders.
"""

import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from helpers import ratio_series
from suite_paths import ROOT, SUPPORT
from tb_server import TensorBoardServer
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.keras import WeightUpdateRatioCallback


def record_ends(data: bytes) -> list[int]:
    """End offsets of the leading complete records of TFRecord bytes, each with valid length
    and data CRCs (read independently of TensorFlow's and TensorBoard's readers)."""
    ends, position = [], 0
    while position + 12 <= len(data):
        header = data[position:position + 8]
        if struct.unpack("<I", data[position + 8:position + 12])[0] != masked_crc32c(header):
            break
        (length,) = struct.unpack("<Q", header)
        end = position + 12 + length + 4
        if end > len(data):
            break
        if struct.unpack("<I", data[end - 4:end])[0] != masked_crc32c(data[position + 12:end - 4]):
            break
        ends.append(position := end)
    return ends


def intact_prefix(path: str) -> bytes:
    """The leading complete records of a TFRecord file."""
    with open(path, "rb") as f:
        data = f.read()
    ends = record_ends(data)
    return data[:ends[-1] if ends else 0]


def tear_last_ratio_record(source: str, target_dir: str) -> None:
    """Copies event file `source` into `target_dir` cut halfway through its last record that
    holds ratios, as if the process had been killed while writing it."""
    with open(source, "rb") as f:
        data = f.read()
    ends = record_ends(data)
    starts = [0] + ends[:-1]
    events = [event_pb2.Event.FromString(data[start + 12:end - 4])
              for start, end in zip(starts, ends)]
    ratio_tags = {  # per tag or packed: their metadata is in their first event only
        v.tag for event in events for v in event.summary.value
        if v.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
        and metadata.parse_plugin_content(v.metadata.plugin_data.content)["kind"]
        in (metadata.KIND_RATIO, metadata.KIND_PACKED_RATIOS)
    }
    for start, end, event in reversed(list(zip(starts, ends, events))):
        if any(v.tag in ratio_tags for v in event.summary.value):
            break
    else:
        raise AssertionError(f"{source}: no record holds ratios")
    os.makedirs(target_dir)
    with open(os.path.join(target_dir, os.path.basename(source)), "wb") as f:
        f.write(data[:(start + end) // 2])


def intact_ratios(run_dir: str, scratch: str) -> dict[str, dict[int, float]]:
    """tag -> {step: ratio} of the intact records of the (single) event file in `run_dir`."""
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if not files:
        return {}
    assert len(files) == 1, files
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    with open(os.path.join(scratch, os.path.basename(files[0])), "wb") as f:
        f.write(intact_prefix(files[0]))
    return ratio_series(scratch)


def _steps(series: dict[str, dict[int, float]]) -> list[int]:
    return sorted({step for points in series.values() for step in points})


# --- when logged steps reach the file ------------------------------------------------------


class FileProbe(keras.callbacks.Callback):
    """Records which steps the event file holds when each batch begins and when training
    ends (runs after the callback, which writes a logged step's ratios when the next batch
    begins or its epoch ends)."""

    def __init__(self, run_dir):
        super().__init__()
        self.run_dir = run_dir
        self.seen = []

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append(_steps(ratio_series(self.run_dir)))

    def on_train_end(self, logs=None):
        self.seen.append(_steps(ratio_series(self.run_dir)))


def test_the_callback_flushes_each_logged_step_when_it_writes_it(logdir):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    probe = FileProbe(os.path.join(logdir, "train"))
    callback = WeightUpdateRatioCallback(logdir, update_freq=2)
    model.fit(np.ones((20, 3)), np.zeros((20, 2)), batch_size=4, epochs=1, verbose=0,
              callbacks=[callback, probe])
    # Within the epoch, with 2 events per logged step (of the writer's queue of 10) and
    # long before its 2 minute flush_millis: each logged step is in the file right away
    # (the file is empty when the first batch begins).
    assert probe.seen == [[], [0], [0], [0, 2], [0, 2], [0, 2, 4]]


def test_the_callback_with_flush_millis_buffers_logged_steps_until_the_epoch_ends(logdir):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    probe = FileProbe(os.path.join(logdir, "train"))
    callback = WeightUpdateRatioCallback(logdir, update_freq=2, flush_millis=600_000)
    model.fit(np.ones((20, 3)), np.zeros((20, 2)), batch_size=4, epochs=2, verbose=0,
              callbacks=[callback, probe])
    # Nothing reaches the file within the first epoch; its steps at its end, not before.
    assert probe.seen[:5] == [[]] * 5
    assert probe.seen[5] == [0, 2, 4]
    assert _steps(ratio_series(os.path.join(logdir, "train"))) == [0, 2, 4, 6, 8]
    with pytest.raises(ValueError, match="flush_millis"):
        WeightUpdateRatioCallback(logdir, flush_millis=0)


@pytest.mark.parametrize(
    "flush_millis,block_per_step,visible",
    [(None, False, []), (50, False, [0, 1]), (None, True, [0, 1])],
    ids=["one-block-default", "one-block-flush_millis", "block-per-logged-step"],
)
def test_watch_users_logged_steps_reach_the_file(logdir, flush_millis, block_per_step, visible):
    """What the README tells `watch` users: a writer entered once for the whole loop holds
    logged steps in its queue until 10 events or flush_millis; leaving `as_default()`
    flushes (the recommended pattern enters it for each logged step)."""
    variable = tf.Variable([1.0, 2.0])
    writer = tf.summary.create_file_writer(logdir, flush_millis=flush_millis)

    def logged_step(step):
        with wur_summary.watch([variable], step=step):
            variable.assign_add([0.1, 0.1])

    if block_per_step:
        for step in range(2):
            with writer.as_default():
                logged_step(step)
        assert _steps(ratio_series(logdir)) == visible
    else:
        with writer.as_default():
            for step in range(2):
                logged_step(step)
                if step == 0:
                    time.sleep(0.3)  # the next write comes more than flush_millis later
            assert _steps(ratio_series(logdir)) == visible
            writer.flush()
            assert _steps(ratio_series(logdir)) == [0, 1]
    writer.close()


# --- SIGKILL mid-run ----------------------------------------------------------------------

LOGGED_BEFORE_KILL = 20  # K: the test kills once the file holds at least this many steps
RUNS = {"callback": "callback/train", "watch": "watch"}  # mode -> TensorBoard run


@pytest.fixture(scope="module")
def killed_runs(tmp_path_factory):
    """Trains in two processes logging every step (the callback with its defaults; watch
    in one `with writer.as_default()` block, the writer with flush_millis=100) and SIGKILLs
    each once its event file holds K intact logged steps. Adds a run "torn": the callback's
    event file cut halfway through its last record with ratios. Returns the logdir and
    {run: intact ratios after the kill}."""
    root = tmp_path_factory.mktemp("killed")
    logdir, scratch = str(root / "logs"), str(root / "scratch")
    processes, outputs = {}, {}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT}
    intact = {}
    try:
        for mode in RUNS:
            outputs[mode] = open(root / f"{mode}.log", "w+")
            processes[mode] = subprocess.Popen(
                [sys.executable, os.path.join(SUPPORT, "train_until_killed.py"), mode,
                 os.path.join(logdir, mode)],
                stdout=outputs[mode], stderr=subprocess.STDOUT, env=env,
            )
        deadline = time.monotonic() + 120
        while len(intact) < len(RUNS):  # both train at once; each is killed at K steps
            for mode, run in RUNS.items():
                process, run_dir = processes[mode], os.path.join(logdir, run)
                if run in intact:
                    continue
                series = intact_ratios(run_dir, scratch)
                if not series or min(map(len, series.values())) < LOGGED_BEFORE_KILL:
                    outputs[mode].seek(0)
                    assert process.poll() is None, outputs[mode].read()[-3000:]
                    assert time.monotonic() < deadline, f"{mode}: only {series}"
                    continue
                assert process.poll() is None  # killed mid-run, not after it ended
                process.send_signal(signal.SIGKILL)
                process.wait(30)
                assert process.returncode == -signal.SIGKILL
                intact[run] = intact_ratios(run_dir, scratch)
            time.sleep(0.05)
    finally:
        for mode, process in processes.items():
            if process.poll() is None:
                process.kill()
                process.wait()
            outputs[mode].close()
    [source] = glob.glob(os.path.join(logdir, RUNS["callback"], "events.out.tfevents.*"))
    tear_last_ratio_record(source, os.path.join(logdir, "torn"))
    intact["torn"] = intact_ratios(os.path.join(logdir, "torn"), scratch)
    full = intact[RUNS["callback"]]
    assert {tag: len(points) for tag, points in intact["torn"].items()} == {
        tag: len(points) - 1 for tag, points in full.items()
    }
    return logdir, intact


def _exported(server, run):
    status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=json")
    if status != 200:
        return status, {}
    return status, {
        tag: {step: float(ratio) for _, step, ratio in rows}  # float("Infinity"), float("NaN")
        for tag, rows in json.loads(body).items()
    }


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_after_sigkill_every_flushed_step_is_exported(killed_runs, load_fast):
    logdir, intact = killed_runs
    for run, series in intact.items():
        assert len(series) == 4  # two Dense layers' kernels and biases
        steps = [sorted(points) for points in series.values()]
        assert all(s == list(range(len(s))) for s in steps), steps  # no gap in the file
        torn = run == "torn"  # the callback's file less its last record, cut in half
        assert min(len(s) for s in steps) >= LOGGED_BEFORE_KILL - torn
        assert max(len(s) for s in steps) < 10_000  # all kept by TensorBoard's sampling
    with TensorBoardServer(logdir, load_fast) as server:
        for run, series in intact.items():
            deadline = time.monotonic() + 60
            while True:
                status, exported = _exported(server, run)
                if exported == series or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert status == 200, server.output()[-3000:]
            assert set(exported) == set(series)
            for tag, points in series.items():
                missing = sorted(set(points) - set(exported[tag]))
                assert not missing, (run, tag, missing[:10], len(missing))
                assert exported[tag] == points, (run, tag)
        assert "Traceback" not in server.output()

"""The real `tensorboard` server, both loaders: damaged event files, a run deleted while it
is served, and 50 parallel clients on the heatmap of a 200-layer run."""

from __future__ import annotations

import collections
import concurrent.futures
import csv
import glob
import http.client
import io
import json
import os
import shutil
import struct
import threading
import time
import urllib.parse

import numpy as np
import pytest
import tensorflow as tf
from tensorboard import errors
from tensorboard.compat.proto import event_pb2

from backend import Backend
from tb_server import TensorBoardServer
from tb_wur_plugin.read import export
from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import wur_summary
from tb_wur_plugin.writer import SummaryWriter

LOADERS = pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
TAGS = ("model/dense/kernel", "model/dense/bias")
STEPS = 10
ROUTE = "/data/plugin/wur/"


def _ratio(tag_index: int, step: int) -> float:
    """The ratio written, as stored (float32)."""
    return float(np.float32(1e-3 * (tag_index + 1) * (step + 1)))


def _write_run(run_dir: str, steps: int = STEPS) -> str:
    """One event per (step, tag), eagerly, so the records are in step order; the file's path."""
    writer = tf.summary.create_file_writer(run_dir)
    with writer.as_default():
        for step in range(steps):
            for index, tag in enumerate(TAGS):
                wur_summary.scalar(tag, _ratio(index, step), step=step)
    writer.close()
    (path,) = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    return path


def _records(path: str) -> list[tuple[int, int, int, list[str]]]:
    """(start, end, step, tags) of each TFRecord of an event file: uint64 length, uint32
    masked CRC of the length, the Event, uint32 masked CRC of the Event."""
    with open(path, "rb") as f:
        data = f.read()
    records, position = [], 0
    while position < len(data):
        (length,) = struct.unpack("<Q", data[position:position + 8])
        end = position + 12 + length + 4
        event = event_pb2.Event.FromString(data[position + 12:end - 4])
        records.append((position, end, event.step, [v.tag for v in event.summary.value]))
        position = end
    assert position == len(data)
    return records


def _intact(records, size: int) -> dict[str, list[int]]:
    """tag -> the steps whose record lies wholly in the first `size` bytes."""
    steps = collections.defaultdict(list)
    for _, end, step, tags in records:
        for tag in tags:
            if end <= size:
                steps[tag].append(step)
    return dict(steps)


def _get_all(server, run: str) -> list[tuple[str, int, bytes]]:
    """Every route about `run`: (path, status, body)."""
    quoted = urllib.parse.quote(run)
    paths = [f"heatmap?run={quoted}", f"heatmap?run={quoted}&columns=3&reduction=max",
             f"flags?run={quoted}", f"export?run={quoted}&format=csv",
             f"export?run={quoted}&format=json", "runs"]
    for tag in TAGS:
        tag = urllib.parse.quote(tag)
        paths += [f"series?run={quoted}&tag={tag}", f"histograms?run={quoted}&tag={tag}"]
    return [(path, *_status_body(server, ROUTE + path)) for path in paths]


def _status_body(server, path: str) -> tuple[int, bytes]:
    status, _, body = server.get(path)
    return status, body


def _export_steps(server, run: str) -> dict[str, list[int]]:
    status, _, body = server.get(f"{ROUTE}export?run={urllib.parse.quote(run)}&format=json")
    assert status == 200, (run, status, body[:300])
    data = json.loads(body)
    for index, tag in enumerate(TAGS):
        assert [row[2] for row in data.get(tag, [])] == [_ratio(index, row[1]) for row in data.get(tag, [])]
    return {tag: [row[1] for row in rows] for tag, rows in data.items()}


# --- damaged event files ------------------------------------------------------------------

# run -> how its event file is damaged after writing
DAMAGE = {
    "intact": None,
    "cut_in_length": "the 8-byte length of a record",
    "cut_in_event": "the Event bytes of a record",
    "cut_in_crc": "the CRC after a record's Event",
    "random_bytes_appended": "4 KiB of random bytes",
    "zeros_appended": "64 zero bytes",
}


@pytest.fixture(scope="module")
def damaged_logdir(tmp_path_factory):
    """The runs of DAMAGE, and the steps per tag each keeps intact."""
    logdir = tmp_path_factory.mktemp("damaged")
    expected = {}
    for run in DAMAGE:
        path = _write_run(str(logdir / run))
        records = _records(path)
        size = os.path.getsize(path)
        # the victim: the record of step 6, second tag (so the two tags keep different steps)
        (start, end, _, _), = [r for r in records if r[2] == 6 and r[3] == [TAGS[1]]]
        cut = {"cut_in_length": start + 4, "cut_in_event": (start + 12 + end - 4) // 2,
               "cut_in_crc": end - 2}.get(run)
        if cut is not None:
            os.truncate(path, cut)
            size = cut
        elif run == "random_bytes_appended":
            with open(path, "ab") as f:
                f.write(np.random.default_rng(6).bytes(4096))
        elif run == "zeros_appended":
            with open(path, "ab") as f:
                f.write(bytes(64))
        expected[run] = _intact(records, size)
    assert expected["cut_in_event"] == {TAGS[0]: list(range(7)), TAGS[1]: list(range(6))}
    assert expected["random_bytes_appended"] == {tag: list(range(STEPS)) for tag in TAGS}
    return str(logdir), expected


@LOADERS
def test_damaged_event_files_keep_their_intact_prefix(damaged_logdir, load_fast):
    logdir, expected = damaged_logdir
    with TensorBoardServer(logdir, load_fast) as server:
        def loaded(data):
            runs = {r["run"]: {l["tag"]: l["logged_steps"] for l in r["layers"]} for r in data["runs"]}
            return runs == {run: {t: len(s) for t, s in steps.items()} for run, steps in expected.items()}

        server.wait_for(loaded, ROUTE + "runs", timeout=60)
        for run, steps in expected.items():
            # the export: exactly the intact steps, with the values written
            assert _export_steps(server, run) == steps, run
            # the heatmap: one column per step of the run; a cell where the tag kept the step
            header, arrays = heatmap_wire.unpack(server.get(f"{ROUTE}heatmap?run={run}&reduction=last")[2])
            (shown,) = header["runs"]
            assert shown["tags"] == list(TAGS)
            columns = sorted(set().union(*steps.values()))
            np.testing.assert_array_equal(arrays["column_first"], columns)
            codes = arrays[shown["codes"]].reshape(len(TAGS), len(columns))
            for row, tag in enumerate(TAGS):
                present = [c != heatmap_wire.CODE_MISSING for c in codes[row]]
                assert present == [s in steps[tag] for s in columns], (run, tag)
                cells = heatmap_wire.decode_cells(codes[row][np.array(present)])
                want = [_ratio(row, s) for s in steps[tag]]
                assert [f"{v:.2e}" for v in cells] == [f"{v:.2e}" for v in want]
            # every other route: an answer, never a server error
            for path, status, body in _get_all(server, run):
                assert status == 200 or (status == 404 and path.startswith("histograms")), (
                    run, path, status, body[:300])
        assert "Traceback" not in server.output()


# --- a run deleted while served -----------------------------------------------------------


def _check_answer(path: str, status: int, body: bytes, keep: bool) -> None:
    """An answer to a request about the kept run (200, correct) or the doomed one (200
    while it is still known, else a clean 404)."""
    assert status == 200 or (not keep and status == 404), (path, status, body[:300])
    if status == 404:
        assert body.startswith(b"Not found: ") and b"\n" not in body, (path, body[:300])
        return
    if path.startswith("heatmap"):
        header, _ = heatmap_wire.unpack(body)
        assert header["columns"] == STEPS, path
        for shown in header["runs"]:  # doomed, read between its deletion and the reload: no rows
            assert shown["tags"] == list(TAGS) or (shown["run"] == "doomed" and not shown["tags"])
    elif path.startswith("export"):
        rows = list(csv.reader(io.StringIO(body.decode())))
        assert rows[0] == ["tag", "step", "wall_time", "ratio"] and len(rows) == 1 + STEPS * len(TAGS)
    else:
        data = json.loads(body)
        if path == "runs":
            assert "keep" in [r["run"] for r in data["runs"]]
        elif path.startswith("flags"):
            assert data["run"] == "doomed" and isinstance(data["layers"], list)
        else:
            assert len(data["steps"]) == STEPS


@LOADERS
def test_a_run_deleted_while_served_gives_clean_404s(tmp_path, load_fast):
    logdir = tmp_path / "logs"
    for run in ("keep", "doomed"):
        _write_run(str(logdir / run))
    paths = {  # path -> about the kept run?
        "runs": True, "heatmap?run=keep": True, "series?run=keep&tag=model/dense/bias": True,
        "export?run=keep&format=csv": True, "heatmap?run=doomed": False,
        "heatmap?run=keep&run=doomed": False, "flags?run=doomed": False,
        "series?run=doomed&tag=model/dense/kernel": False, "export?run=doomed&format=csv": False,
    }
    reload_args = ("--reload_interval", "1", "--reload_task", "thread")
    with TensorBoardServer(str(logdir), load_fast, reload_args) as server:
        server.wait_for(
            lambda d: [(r["run"], [l["logged_steps"] for l in r["layers"]]) for r in d["runs"]]
            == [("doomed", [STEPS] * 2), ("keep", [STEPS] * 2)],
            ROUTE + "runs", timeout=60,
        )
        answers, aborted, failures, stop = [], [], [], threading.Event()

        def client():
            while not stop.is_set():
                for path in paths:
                    try:
                        answers.append((path, *_status_body(server, ROUTE + path)))
                    except http.client.IncompleteRead as e:  # an export aborted midway
                        (aborted if path == "export?run=doomed&format=csv" else failures).append((path, repr(e)))
                    except Exception as e:  # noqa: BLE001 (a dropped connection: a failure)
                        failures.append((path, repr(e)))

        clients = [threading.Thread(target=client) for _ in range(4)]
        for thread in clients:
            thread.start()
        time.sleep(1)
        shutil.rmtree(logdir / "doomed")
        deleted = time.monotonic()
        try:
            server.wait_for(lambda d: [r["run"] for r in d["runs"]] == ["keep"], ROUTE + "runs", 60)
            gone_after = time.monotonic() - deleted
            time.sleep(2)  # more requests after the run is gone
        finally:
            stop.set()
            for thread in clients:
                thread.join()
        print(f"\n{'fast' if load_fast else 'python'} loader: the run left /runs "
              f"{gone_after:.1f} s after its deletion; {len(answers)} requests meanwhile, "
              f"statuses {dict(collections.Counter(a[1] for a in answers))}, "
              f"{len(aborted)} exports aborted midway")
        assert not failures, failures[:5]
        assert len(answers) > 100
        for path, status, body in answers:
            _check_answer(path, status, body, paths[path])
        for path, keep in paths.items():  # after the reload
            status, body = _status_body(server, ROUTE + path)
            assert status == (200 if keep else 404), (path, status, body[:300])
            _check_answer(path, status, body, keep)
        assert _export_steps(server, "keep") == {tag: list(range(STEPS)) for tag in TAGS}
        # the only errors logged: exports aborted because their run vanished midway
        logged = server.output().split("Error on request:")
        assert server.output().count("Traceback") == len(logged) - 1 <= len(aborted), logged[1:]
        assert all("was removed during its export" in error for error in logged[1:]), logged[1:]


def test_an_export_whose_run_is_deleted_midway_is_aborted_not_truncated(tmp_path, monkeypatch):
    """In-process, deterministic: the run vanishes after the export's first read (of one
    tag here: the export reads export.TAGS_PER_READ tags at a time, more than this run has)."""
    monkeypatch.setattr(export, "TAGS_PER_READ", 1)
    logdir = tmp_path / "logs"
    _write_run(str(logdir / "doomed"))
    backend = Backend(str(logdir))
    response = backend.client.get(f"{ROUTE}export?run=doomed&format=csv")  # not read yet
    assert response.status_code == 200
    shutil.rmtree(logdir / "doomed")
    backend.multiplexer.Reload()  # as TensorBoard's reload loop does
    with pytest.raises(errors.NotFoundError, match="'doomed' was removed during its export"):
        response.get_data()
    response = backend.get("export", run="doomed", format="csv")
    assert response.status_code == 404
    assert response.get_data() == b"Not found: no wur ratios in run 'doomed'"


# --- 50 parallel clients --------------------------------------------------------------------

LAYERS = 200
WIDE_STEPS = 50
CLIENTS = 50


def _wide_ratios() -> np.ndarray:
    """float32[WIDE_STEPS, LAYERS]: each layer its own level, varying with the step."""
    rng = np.random.default_rng(50)
    level = rng.uniform(-6, 0, size=LAYERS)
    return (10.0 ** (level + rng.normal(0, 0.3, size=(WIDE_STEPS, LAYERS)))).astype(np.float32)


def _wide_tags() -> list[str]:
    return [f"net/layer_{i // 2:03d}/{'kernel' if i % 2 == 0 else 'bias'}" for i in range(LAYERS)]


@pytest.fixture(scope="module")
def wide_logdir(tmp_path_factory):
    """One scalar series per layer (`packed=False`: the layout `wur_summary.scalar` writes),
    every layer of a step in one event; written without TensorFlow, whose tf.function of 200
    summary ops took 20 s to trace."""
    logdir = tmp_path_factory.mktemp("wide")
    tags, ratios = _wide_tags(), _wide_ratios()
    with SummaryWriter(logdir / "wide", packed=False) as writer:
        for step in range(WIDE_STEPS):
            writer.add_ratios(dict(zip(tags, ratios[step])), step)
    return str(logdir)


@LOADERS
def test_fifty_parallel_clients_get_the_same_correct_heatmap(wide_logdir, load_fast):
    tags, ratios = _wide_tags(), _wide_ratios()
    path = f"{ROUTE}heatmap?run=wide&columns=1000&reduction=last"
    with TensorBoardServer(wide_logdir, load_fast) as server:
        # wait until the last record is loaded, without asking for the heatmap (cold cache)
        deadline = time.monotonic() + 90
        while True:
            status, _, body = server.get(f"{ROUTE}series?run=wide&tag={tags[-1]}")
            if status == 200 and len(json.loads(body)["steps"]) == WIDE_STEPS:
                break
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.5)

        barrier = threading.Barrier(CLIENTS)

        def client(_):
            barrier.wait()
            return server.get(path, {"Accept-Encoding": "gzip"})

        answers = []
        for _ in range(2):  # cold, then warm
            with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
                answers += list(pool.map(client, range(CLIENTS)))
        assert [status for status, _, _ in answers] == [200] * 2 * CLIENTS
        bodies = {body for _, _, body in answers}
        assert len(bodies) == 1
        header, arrays = heatmap_wire.unpack(bodies.pop())
        (run,) = header["runs"]
        assert run["tags"] == tags and header["columns"] == WIDE_STEPS  # in model order
        np.testing.assert_array_equal(arrays["column_first"], np.arange(WIDE_STEPS))
        got = heatmap_wire.decode_cells(arrays[run["codes"]]).reshape(LAYERS, WIDE_STEPS)
        want = ratios.T.astype(np.float64)[[tags.index(tag) for tag in run["tags"]]]
        assert [f"{v:.2e}" for v in got.ravel()] == [f"{v:.2e}" for v in want.ravel()]
        assert "Traceback" not in server.output()

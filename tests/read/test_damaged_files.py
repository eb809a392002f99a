"""Damaged event files (issue 34) are never dropped silently: files truncated at every record
boundary and inside every record, a byte flipped in a record's length, its length's checksum,
its data and its data's checksum, zero-filled blocks; each found where it is (tb_wur_plugin's
read/damage.py against an independent reading of the file's framing), said by `tb-wur report`
(a line on stderr per damaged file, `damaged` in its JSON, the exit status with
--fail-on-damage and --fail-on-flags) and by `/runs`, in both TensorBoard loaders, and the
steps after the damage still read. Event files are written by `writer.SummaryWriter`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

import suite_paths
from backend import Backend
from tb_server import TensorBoardServer
from tb_wur_plugin import cli, metadata, read_ratios
from tb_wur_plugin.read import damage
from tb_wur_plugin.writer import SummaryWriter

STEPS = 32
TAGS = ("net/dense/kernel", "net/dense/bias")
LOADERS = [pytest.param(True, id="fast"), pytest.param(False, id="python")]


def _ratio(tag: str, step: int) -> float:
    return float(np.float32((2e-3 if tag.endswith("kernel") else 5e-4) * (1 + step / 40)))


def _write(directory, packed: bool = True, steps=range(STEPS), learning_rate: bool = False) -> str:
    """A run of `steps` logged steps (one event each, the learning rate in one more); the
    event file's path."""
    os.makedirs(directory, exist_ok=True)
    before = set(os.listdir(directory))
    with SummaryWriter(directory, packed=packed) as writer:
        for step in steps:
            writer.add_ratios({tag: _ratio(tag, step) for tag in TAGS}, step)
            if learning_rate:
                writer.add_learning_rate(0.1, step)
    (name,) = set(os.listdir(directory)) - before
    return os.path.join(directory, name)


def _records(data: bytes) -> list[tuple[int, int, int | None]]:
    """(offset, end, step) of each record of a whole event file, read here without the
    package: step None for the file's version header."""
    found, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        event = event_pb2.Event.FromString(data[pos + 12:end - 4])
        found.append((pos, end, None if event.HasField("file_version") else event.step))
        pos = end
    assert pos == len(data)
    return found


def _expected_change(records, lo: int, hi: int, name: str):
    """(the stretch, the steps after it) for a file whose bytes [lo, hi) changed in place:
    every record the change touches is lost, from the first one's start to the next whole
    record (or the end of the file)."""
    lost = [i for i, (start, end, _) in enumerate(records) if start < hi and end > lo]
    if not lost:
        return None, []
    first, last = lost[0], lost[-1]
    after = records[first - 1][2] if first > 0 else None
    stretch = damage.Stretch(name, records[first][0], records[last][1] - records[first][0],
                             after, False)
    return stretch, [step for _, _, step in records[last + 1:] if step is not None]


def _expected_cut(records, cut: int, name: str) -> damage.Stretch | None:
    """The stretch of a file cut at byte `cut`: none at a record boundary, else the record
    the cut falls in, cut short."""
    for i, (start, end, _) in enumerate(records):
        if start < cut < end:
            after = records[i - 1][2] if i > 0 else None
            return damage.Stretch(name, start, cut - start, after, True)
    return None


def _scan(path: str) -> damage.RunDamage:
    return damage.DamageScanner(os.path.dirname(path)).scan(".")


def _recovered_steps(found: damage.RunDamage) -> list[int]:
    (series,) = found.recovered.values()  # the one packed series of the writer
    return series.steps.tolist()


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """The bytes and records of one whole event file, and its name."""
    path = _write(tmp_path_factory.mktemp("original") / "run")
    data = open(path, "rb").read()
    records = _records(data)
    assert len(records) == STEPS + 1  # the version header, then one record per step
    return data, records, os.path.basename(path)


def _damaged_copy(tmp_path, original, data: bytes) -> str:
    directory = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
    directory.mkdir()
    path = str(directory / original[2])
    with open(path, "wb") as f:
        f.write(data)
    return path


# --- the scan, against an independent reading of the framing ------------------------------


def test_a_whole_file_has_no_damage(original, tmp_path):
    found = _scan(_damaged_copy(tmp_path, original, original[0]))
    assert found.stretches == () and found.recovered == {}


def test_a_file_cut_at_a_record_boundary_reads_as_whole(original, tmp_path):
    data, records, _ = original
    for _, end, _ in records:
        found = _scan(_damaged_copy(tmp_path, original, data[:end]))
        assert found.stretches == () and found.recovered == {}, end


def test_a_file_cut_inside_a_record_has_that_record_cut_short(original, tmp_path):
    data, records, name = original
    for start, end, _ in records:
        for cut in sorted({start + 1, start + 8, start + 11, start + 12, (start + end) // 2, end - 1}):
            found = _scan(_damaged_copy(tmp_path, original, data[:cut]))
            expected = _expected_cut(records, cut, name)
            assert found.stretches == (expected,), cut
            assert expected.cut_short and expected.unread_bytes == cut - start
            assert found.recovered == {}


@pytest.mark.parametrize("where", ["length", "length_crc", "payload", "data_crc"])
def test_a_flipped_byte_loses_its_record_only(original, tmp_path, where):
    data, records, name = original
    for index, (start, end, _) in enumerate(records):
        at = {"length": start, "length_crc": start + 9, "payload": (start + 12 + end - 4) // 2,
              "data_crc": end - 2}[where]
        damaged = data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]
        found = _scan(_damaged_copy(tmp_path, original, damaged))
        expected, after = _expected_change(records, at, at + 1, name)
        assert found.stretches == (expected,), (where, index)
        assert expected.unread_bytes == end - start
        if after:
            assert _recovered_steps(found) == after  # every record after it is read
        else:
            assert found.recovered == {}


@pytest.mark.parametrize("start, length", [
    (1500, 40),  # inside a record
    (427, 40),  # from a record's first byte
    (700, 4096),  # over many records, to the end of the file
    (300, 700),  # over several records, from inside one to inside another
    (0, 100),  # the version header and into the first step
])
def test_zero_filled_blocks(original, tmp_path, start, length):
    data, records, name = original
    damaged = bytearray(data)
    damaged[start:start + length] = bytes(min(length, len(data) - start))
    changed = [i for i in range(len(data)) if damaged[i] != data[i]]
    found = _scan(_damaged_copy(tmp_path, original, bytes(damaged)))
    expected, after = _expected_change(records, changed[0], changed[-1] + 1, name)
    assert found.stretches == (expected,)
    if after:
        assert _recovered_steps(found) == after
    else:
        assert found.recovered == {}


def test_two_damaged_places_and_a_cut_end(original, tmp_path):
    data, records, name = original
    a, b = records[5][0] + 20, records[20][0] + 20
    cut = records[30][0] + 30
    damaged = bytearray(data[:cut])
    damaged[a] ^= 0xFF
    damaged[b] ^= 0xFF
    found = _scan(_damaged_copy(tmp_path, original, bytes(damaged)))
    first, _ = _expected_change(records, a, a + 1, name)
    second, _ = _expected_change(records, b, b + 1, name)
    assert found.stretches == (first, second, _expected_cut(records, cut, name))
    # the records between the places and before the cut, read
    assert _recovered_steps(found) == [records[i][2] for i in [*range(6, 20), *range(21, 30)]]


def test_a_file_grown_or_rewritten_is_scanned_again(original, tmp_path):
    data, records, name = original
    path = _damaged_copy(tmp_path, original, data[:records[10][0] + 50])
    scanner = damage.DamageScanner(os.path.dirname(path))
    assert scanner.scan(".").stretches == (_expected_cut(records, records[10][0] + 50, name),)
    with open(path, "ab") as f:  # the rest of the record, and more, written
        f.write(data[records[10][0] + 50:])
    assert scanner.scan(".").stretches == ()
    # rewritten in place by another writer, longer, damaged before where the scan ended
    other = _write(tmp_path / "other", steps=range(STEPS + 5))
    stretch, _ = _changed(other, _flipped(3, 20))
    with open(path, "wb") as f:
        f.write(open(other, "rb").read())
    assert scanner.scan(".").stretches == (dataclasses.replace(stretch, file=name),)


def test_names_that_leave_the_logdir_are_not_scanned(original, tmp_path):
    outside = _damaged_copy(tmp_path, original, original[0][:-3])
    inside = tmp_path / "logdir"
    inside.mkdir()
    scanner = damage.DamageScanner(str(inside))
    for run in (os.path.relpath(os.path.dirname(outside), inside), os.path.dirname(outside), "/"):
        assert scanner.scan(run) == damage.RunDamage((), {})


def test_the_wording():
    cut = damage.Stretch("events.out.tfevents.1.x", 3000, 37, 14, True)
    assert cut.describe().startswith("37 bytes unreadable from offset 3000 (after step 14): ")
    assert "cut short" in cut.describe() and "crash" in cut.describe()
    assert damage.Stretch("f", 0, 64, None, False).describe() == (
        "64 bytes unreadable from offset 0 (before any step)"
    )
    assert cut.as_json() == {"file": "events.out.tfevents.1.x", "unread_bytes": 37,
                             "after_step": 14, "offset": 3000, "cut_short": True}


# --- the report, in both loaders ------------------------------------------------------------


def _changed(path: str, change) -> tuple[damage.Stretch | None, set[int]]:
    """Applies `change` (bytes -> bytes) to the file; (the stretch it should make, the steps
    still read)."""
    data = open(path, "rb").read()
    records = _records(data)
    new = change(data)
    open(path, "wb").write(new)
    name = os.path.basename(path)
    if len(new) < len(data):
        stretch = _expected_cut(records, len(new), name)
        return stretch, {step for _, end, step in records if end <= len(new) and step is not None}
    changed = [i for i in range(len(data)) if new[i] != data[i]]
    stretch, _ = _expected_change(records, changed[0], changed[-1] + 1, name)
    lost = {step for start, end, step in records
            if start < stretch.offset + stretch.unread_bytes and end > stretch.offset}
    return stretch, {step for _, _, step in records if step is not None} - lost


def _zeros(at: int, length: int):
    return lambda data: data[:at] + bytes(length) + data[at + length:]


def _flipped(record: int, into: int):
    """A change flipping the byte `into` bytes into record number `record` (negative: from
    its end)."""
    def change(data):
        start, end, _ = _records(data)[record]
        at = (start if into >= 0 else end) + into
        return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]
    return change


@pytest.fixture(scope="module")
def damaged_logdir(tmp_path_factory):
    """Runs each damaged one way, with what each should report and read:
    {run: ([stretch, ...], steps read)}."""
    logdir = tmp_path_factory.mktemp("damaged")
    expected = {}
    path = _write(logdir / "whole")
    expected["whole"] = ([], set(range(STEPS)))
    for run, change in [
        ("cut_inside", lambda d: d[:len(d) // 2]),
        ("cut_at_boundary", lambda d: d[:_records(d)[17][0]]),
        ("length", _flipped(14, 3)),
        ("length_crc", _flipped(14, 10)),
        ("payload", _flipped(14, 40)),
        ("data_crc", _flipped(14, -1)),
        # the data's last byte (the skipped-step marker's): it still parses, and the fast
        # loader, which checks only data that does not parse, reads it
        ("value", _flipped(14, -5)),
        ("zeros_40", lambda d: _zeros(len(d) // 2, 40)(d)),
        ("zeros_block", lambda d: _zeros(_records(d)[3][0] + 5, 1024)(d)),
        ("version_header", _flipped(0, 20)),
    ]:
        path = _write(logdir / run)
        stretch, steps = _changed(path, change)
        expected[run] = ([stretch] if stretch else [], steps)
        if run == "value":  # the record still holds an event: the step, marked skipped
            data = open(path, "rb").read()
            event = event_pb2.Event.FromString(
                data[stretch.offset + 12:stretch.offset + stretch.unread_bytes - 4]
            )
            assert event.step == 13 and event.summary.value[0].tensor.tensor_content[-4:] != bytes(4)
    # one scalar per layer (the layout of protocol version 2) and the learning rate
    path = _write(logdir / "per_tag", packed=False, learning_rate=True)
    records = _records(open(path, "rb").read())
    # a step's ratios (its learning rate, the next record, and every other step read)
    stretch, _ = _changed(path, _flipped(21, 30))
    expected["per_tag"] = ([stretch], set(range(STEPS)) - {records[21][2]})
    # two files: the first damaged in its middle, the second (a restart) whole
    first = _write(logdir / "restarted", steps=range(16))
    stretch, steps = _changed(first, _flipped(8, 30))
    _write(logdir / "restarted", steps=range(16, STEPS))
    expected["restarted"] = ([stretch], steps | set(range(16, STEPS)))
    return str(logdir), expected


def _report(capsys, *args) -> tuple[int, str, str]:
    status = cli.main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _damage_lines(err: str) -> list[str]:
    return sorted(line for line in err.splitlines() if "bytes unreadable" in line)


@pytest.mark.parametrize("load_fast", LOADERS)
def test_the_report_says_what_is_damaged_and_reads_what_is_after(damaged_logdir, capsys, load_fast):
    logdir, expected = damaged_logdir
    status, out, err = _report(capsys, logdir, "--format", "json", f"--load_fast={load_fast}")
    assert status == 0, err
    answer = json.loads(out)
    runs = {r["run"]: r for r in answer["runs"]}
    assert sorted(runs) == sorted(expected)
    assert answer["damaged_runs_without_ratios"] == []
    lines = []
    for run, (stretches, steps) in expected.items():
        assert runs[run]["damaged"] == [s.as_json() for s in stretches], run
        assert {l["logged_steps"] for l in runs[run]["layers"]} == {len(steps)}, run
        assert not any(l["flagged"] for l in runs[run]["layers"]), run
        lines += [f"tb-wur report: {run}/{s.file}: {s.describe()}" for s in stretches]
    assert _damage_lines(err) == sorted(lines)
    # the steps read are exactly those whose records are whole, with the values written;
    # read_ratios warns of each damaged file
    with pytest.warns(RuntimeWarning) as warned:
        frame = read_ratios(logdir, load_fast=load_fast)
    assert sorted(str(w.message) for w in warned if "damaged event file" in str(w.message)) == sorted(
        line.replace("tb-wur report: ", "damaged event file ") for line in lines
    )
    for run, (_, steps) in expected.items():
        rows = frame[frame.run == run]
        for tag in TAGS:
            points = rows[rows.tag == tag]
            assert set(points.step) == steps, (run, tag)
            assert np.array_equal(points.ratio.to_numpy(), [_ratio(tag, s) for s in points.step])


@pytest.mark.parametrize("load_fast", LOADERS)
def test_damage_and_the_exit_status(damaged_logdir, capsys, load_fast):
    logdir, expected = damaged_logdir
    loader = f"--load_fast={load_fast}"
    assert _report(capsys, logdir, loader)[0] == 0
    assert _report(capsys, logdir, loader, "--fail-on-damage")[0] == 1
    assert _report(capsys, logdir, loader, "--fail-on-flags")[0] == 1  # nothing flagged
    status, _, err = _report(capsys, logdir, loader, "--run", "^whole$", "--fail-on-damage",
                             "--fail-on-flags")
    assert status == 0 and _damage_lines(err) == []
    status, out, err = _report(capsys, logdir, loader, "--run", "^cut_inside$", "--fail-on-damage")
    (stretch,), _ = expected["cut_inside"]
    assert status == 1 and _damage_lines(err) == [f"tb-wur report: cut_inside/{stretch.file}: "
                                                   f"{stretch.describe()}"]
    assert f"  damaged {stretch.file}: {stretch.describe()}" in out.splitlines()  # the text too


def test_a_run_whose_readable_records_hold_no_ratios_is_named(tmp_path, capsys):
    """The first step's record carries its series' metadata (once per file): garbled, the
    later records are read but cannot be told apart from other plugins' data; the loss is
    reported, for a run that then holds no ratios."""
    _write(tmp_path / "logs" / "kept")
    path = _write(tmp_path / "logs" / "lost_metadata")
    stretch, _ = _changed(path, _flipped(1, 40))
    line = f"tb-wur report: lost_metadata/{stretch.file}: {stretch.describe()}"
    status, out, err = _report(capsys, str(tmp_path / "logs"), "--format", "json",
                               "--load_fast=false", "--fail-on-damage")
    assert status == 1 and _damage_lines(err) == [line]
    assert json.loads(out)["damaged_runs_without_ratios"] == [
        {"run": "lost_metadata", "damaged": [stretch.as_json()]}
    ]
    shutil.rmtree(tmp_path / "logs" / "kept")
    status, _, err = _report(capsys, str(tmp_path / "logs"), "--load_fast=false")
    assert status == 2 and _damage_lines(err) == [line]
    assert err.splitlines()[-1] == "tb-wur report: the logdir holds no wur ratios"


# --- the plugin's routes ---------------------------------------------------------------------


def test_runs_and_the_data_routes(damaged_logdir):
    logdir, expected = damaged_logdir
    backend = Backend(logdir)
    runs = {r["run"]: r for r in backend.json("runs")["runs"]}
    for run, (stretches, steps) in expected.items():
        assert runs[run]["damaged"] == [s.as_json() for s in stretches], run
        assert {l["logged_steps"] for l in runs[run]["layers"]} == {len(steps)}, run
        exported = backend.json("export", run=run, format="json")
        assert {tag: {step for _, step, _ in rows} for tag, rows in exported.items()} == {
            tag: steps for tag in TAGS
        }, run
    _, arrays = backend.heatmap(run="payload")
    assert set(arrays["column_first"][arrays["column_count"] > 0]) == expected["payload"][1]
    rate = backend.json("series", run="per_tag", tag=metadata.LEARNING_RATE_TAG)
    assert rate["steps"] == list(range(STEPS))  # the record after the lost one, and on


def test_a_run_outside_the_logdir_is_never_read(original, tmp_path):
    """A request naming a directory beside the logdir reads nothing of it (its damaged
    file's readable records would be read)."""
    data, records, name = original
    _damaged_copy(tmp_path, original, data[:records[5][0] + 20] + b"\0" + data[records[5][0] + 21:])
    logdir = tmp_path / "logdir"
    _write(logdir / "run")
    backend = Backend(str(logdir))
    assert [r["run"] for r in backend.json("runs")["runs"]] == ["run"]
    for run in ("../copy0", str(tmp_path / "copy0")):
        assert backend.get("export", run=run, format="csv").status_code == 404


@pytest.mark.parametrize("load_fast", LOADERS)
def test_through_tensorboard(damaged_logdir, load_fast):
    logdir, expected = damaged_logdir
    with TensorBoardServer(logdir, load_fast=load_fast) as server:
        answer = server.wait_for(
            lambda d: len(d["runs"]) == len(expected), "/data/plugin/wur/runs"
        )
        runs = {r["run"]: r for r in answer["runs"]}
        for run in ("whole", "payload", "cut_inside", "zeros_block"):
            stretches, steps = expected[run]
            assert runs[run]["damaged"] == [s.as_json() for s in stretches], run
            exported = server.get_json(f"/data/plugin/wur/export?run={run}&format=json")
            assert {step for _, step, _ in exported[TAGS[0]]} == steps, run


def test_the_samples_kept_include_the_recovered_points(tmp_path):
    """With fewer steps kept per tag than a damaged run holds, the provider's and the
    recovered points are thinned together to the limit, the last step kept."""
    path = _write(tmp_path / "run", steps=range(200))
    _changed(path, _flipped(100, 30))
    backend = Backend(str(tmp_path), samples=50)
    (run,) = backend.json("runs")["runs"]
    assert run["damaged"] and all(l["logged_steps"] == 50 for l in run["layers"])
    assert all(l["last_step"] == 199 for l in run["layers"]) and len(run["layers"]) == len(TAGS)


def test_the_tab_shows_the_notice(tmp_path):
    """The tab (headless Chromium, the fast loader) shows each damaged run's stretches on its
    heatmap block, in the report's words, a file name as text, and nothing on a whole run."""
    node, chromium = shutil.which("node"), "/usr/bin/chromium"
    assert node and os.path.exists(chromium), "Node.js and chromium: scripts/frontend.sh"
    logdir = tmp_path / "logs"
    _write(logdir / "whole")
    damaged = {}
    for run, change in [("garbled", _flipped(14, 40)), ("cut", lambda d: d[:len(d) // 2])]:
        stretch, _ = _changed(_write(logdir / run), change)
        damaged[run] = [f"{stretch.file}: {stretch.describe()}"]
    with SummaryWriter(logdir / "named", filename_suffix=".<img src=x onerror=alert(1)>") as writer:
        for step in range(STEPS):
            writer.add_ratios({tag: _ratio(tag, step) for tag in TAGS}, step)
    (path,) = [str(p) for p in (logdir / "named").iterdir()]
    stretch, _ = _changed(path, _zeros(1000, 40))
    assert "<img" in stretch.file
    damaged["named"] = [f"{stretch.file}: {stretch.describe()}"]
    with TensorBoardServer(str(logdir), load_fast=True) as server:
        server.wait_for(lambda d: len(d["runs"]) == 4, "/data/plugin/wur/runs")
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"url": server.url, "label": "damage", "damaged": damaged,
                                      "whole": ["whole"]}))
        result = subprocess.run(
            [node, os.path.join(suite_paths.ROOT, "tests", "browser", "wur_damage.mjs"), str(config)],
            capture_output=True, text=True, timeout=150,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "damage notices shown" in result.stdout


def test_a_logdir_that_is_no_local_directory_is_said_unchecked(capsys):
    """TensorFlow's in-memory ram:// filesystem (read by the Python loader in this process),
    as gs:// would be: the files are not checked, and the report says so."""
    import uuid

    import tensorflow as tf

    logdir = f"ram://wur-damage-{uuid.uuid4().hex}/logs"
    try:
        with SummaryWriter(f"{logdir}/run") as writer:
            writer.add_ratios({tag: _ratio(tag, 0) for tag in TAGS}, 0)
        assert damage.DamageScanner.for_logdir(logdir) is None
        status, out, err = _report(capsys, logdir, "--format", "json", "--load_fast=false",
                                   "--fail-on-damage")
        assert status == 0 and json.loads(out)["runs"][0]["damaged"] is None
        assert f"tb-wur report: {logdir} is not a local directory: its event files were not " \
               "checked for damage" in err.splitlines()
        (run,) = Backend(logdir).json("runs")["runs"]
        assert run["damaged"] is None
    finally:
        tf.io.gfile.rmtree(logdir.rsplit("/", 1)[0])

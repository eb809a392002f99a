"""`watch` and `WeightUpdateRatioCallback` under `tf.distribute`.

`distribute_worker.py` trains in processes forked from the preloaded fork server
(support/forked.py): one with MirroredStrategy over two logical CPUs, two local workers of
MultiWorkerMirroredStrategy on 127.0.0.1. Each logged step must be written exactly once, by
the chief (the other worker writes no summary, and its callback creates no file), with the
numpy reference ratios of the weights before and after each step of that training, and with
the ratios that the same training logs on one device (in this process) from the same initial
weights and data. Judged while training, both workers' callbacks fire the same flags (those
of the report on the chief's run) and stop their `fit` at the same step.
"""

import json
import os
import socket

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader

import distribute_worker
import forked
from helpers import assert_ratios_close, ratio_series, read_events, read_packed
from training_flags import fired, reported
from tb_wur_plugin import metadata, wur_summary

WORKER = distribute_worker.__file__
TIMEOUT = 300

# Gradients summed over replicas may differ from one device's in their float32 rounding, and
# Adam's updates by as little (measured: 7e-8, the float32 storage of the ratios).
SINGLE_DEVICE_RTOL = 1e-6


def _start_workers(out, kind, environments):
    """The workers, forked from the preloaded fork server (support/forked.py)."""
    return out, [forked.start_script([WORKER, kind, str(out)], env) for env in environments]


def _finish_workers(out, processes):
    try:
        ended = [p.finish(TIMEOUT) for p in processes]
    finally:
        for p in processes:  # a worker whose peer failed would wait for it
            p.kill()
    for index, (code, stdout, stderr) in enumerate(ended):
        assert code == 0, f"worker {index}:\n{(stdout + stderr)[-5000:]}"
    results = []
    for task in range(len(processes)):
        with open(os.path.join(out, f"worker{task}.json")) as f:
            results.append(json.load(f))
    return results


def _environment(**extra):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both strategies' trainings, run at the same time (they mostly wait)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    started = {
        "multiworker": _start_workers(
            tmp_path_factory.mktemp("multiworker"),
            "multiworker",
            [
                _environment(TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ))
                for i in range(2)
            ],
        ),
        "mirrored": _start_workers(
            tmp_path_factory.mktemp("mirrored"), "mirrored", [_environment()]
        ),
    }
    finished, failures = {}, []
    for kind, (out, processes) in started.items():
        try:
            finished[kind] = out, _finish_workers(out, processes)
        except Exception as e:  # finish the other kind's processes all the same
            failures.append(f"{kind}: {e}")
    assert not failures, "\n".join(failures)
    return finished


@pytest.fixture
def mirrored(runs):
    out, results = runs["mirrored"]
    assert [(r["replicas"], r["chief"]) for r in results] == [(2, True)]
    return out, results


@pytest.fixture
def multiworker(runs):
    out, results = runs["multiworker"]
    assert [(r["replicas"], r["chief"]) for r in results] == [(2, True), (2, False)]
    return out, results


def _event_files(logdir):
    return sorted(name for name in os.listdir(logdir) if name.startswith("events.out.tfevents."))


def _pid_of(event_file):
    # events.out.tfevents.<time>.<host>.<pid>.<counter>.v2
    return int(event_file.split(".")[-3])


def _check_written_once_by_the_chief(logdir, results, steps):
    """Each wur series of `logdir` holds `steps` once each, and only the chief's event file
    holds summaries; returns the logged ratios {tag: {step: ratio}}."""
    for name in _event_files(logdir):
        if _pid_of(name) != results[0]["pid"]:
            events = event_file_loader.EventFileLoader(os.path.join(logdir, name)).Load()
            assert not [v.tag for e in events for v in e.summary.value], name
    for tag, points in read_events(logdir).items():
        assert [step for step, _, _ in points] == steps, tag
    run = read_packed(logdir)
    assert [step for step, _ in run.skipped] == steps
    logged = {}
    for tag, points in run.ratios.items():
        assert [step for step, _ in points] == steps, tag
        logged[tag] = {step: float(value) for step, value in points}
    return logged


def _reference(result, scenario):
    return {
        tag: {int(step): ratio for step, ratio in by_step.items()}
        for tag, by_step in result["scenarios"][scenario]["reference"].items()
    }


def _flat(series):
    return {(tag, step): r for tag, by_step in series.items() for step, r in by_step.items()}


def _initial_weights(result, scenario):
    return [np.asarray(w, np.float32) for w in result["scenarios"][scenario]["initial"]]


def _single_device(tmp_path, scenario, weights):
    """The same training on this process's one device, logged by the same code."""
    logdir = str(tmp_path / f"single_{scenario}")
    strategy = tf.distribute.get_strategy()
    if scenario == "fit":
        distribute_worker.train_fit(strategy, logdir, weights)
        logdir = os.path.join(logdir, "train")
    else:
        distribute_worker.train_custom(
            strategy, logdir, scenario, weights, histograms=scenario == "inside"
        )
    return ratio_series(logdir)


def _check_custom_loop(tmp_path, run, scenario):
    out, results = run
    steps = list(range(distribute_worker.CUSTOM_STEPS))
    logged = _check_written_once_by_the_chief(str(out / scenario), results, steps)
    assert len(logged) == 4  # every trainable variable, under its path
    for result in results:  # every worker saw the same updates
        assert_ratios_close(_flat(logged), _flat(_reference(result, scenario)), rtol=5e-7)
    single = _single_device(tmp_path, scenario, _initial_weights(results[0], scenario))
    assert_ratios_close(_flat(logged), _flat(single), rtol=SINGLE_DEVICE_RTOL)
    if scenario == "inside":  # histograms too: once per step (checked above), every element
        histograms = read_packed(str(out / scenario)).histograms
        sizes = [w.size for w in _initial_weights(results[0], scenario)]
        assert len(histograms) == len(sizes)
        for tag, size in zip(_reference(results[0], scenario), sizes):
            points = histograms[tag]
            assert [int(counts.sum()) for _, counts in points] == [size] * len(steps), tag


def _check_fit(tmp_path, run):
    out, results = run
    logdir = str(out / "fit" / "train")
    # the callback of a non-chief worker creates no file at all
    assert [_pid_of(name) for name in _event_files(logdir)] == [results[0]["pid"]]
    steps = list(range(0, 4, distribute_worker.FIT_UPDATE_FREQ))
    logged = _check_written_once_by_the_chief(logdir, results, steps)
    events = read_events(logdir)
    assert [s for s, _, _ in events[metadata.LEARNING_RATE_TAG]] == steps
    assert len(logged) == 4
    for result in results:
        assert_ratios_close(_flat(logged), _flat(_reference(result, "fit")), rtol=5e-7)
    single = _single_device(tmp_path, "fit", _initial_weights(results[0], "fit"))
    assert_ratios_close(_flat(logged), _flat(single), rtol=SINGLE_DEVICE_RTOL)


@pytest.mark.parametrize("scenario", ["inside", "around", "inside_eager"])
def test_mirrored_custom_loop(tmp_path, mirrored, scenario):
    _check_custom_loop(tmp_path, mirrored, scenario)


def test_mirrored_fit_callback(tmp_path, mirrored):
    _check_fit(tmp_path, mirrored)


@pytest.mark.parametrize("scenario", ["inside", "around"])
def test_multiworker_custom_loop(tmp_path, multiworker, scenario):
    _check_custom_loop(tmp_path, multiworker, scenario)


def test_multiworker_fit_callback(tmp_path, multiworker):
    _check_fit(tmp_path, multiworker)


def test_multiworker_fit_stops_on_every_worker_at_the_same_step(multiworker):
    """A NaN batch, stop_on={"nan"}: the worker that writes nothing computes and judges the
    same ratios, so both fire the same flags and end `fit` after the same step (a worker
    that went on alone would wait for the other in the next step's all-reduce)."""
    out, results = multiworker
    chief, other = (result["scenarios"]["fit_stop"] for result in results)
    assert chief == other
    logdir = str(out / "fit_stop")
    assert [_pid_of(name) for name in _event_files(os.path.join(logdir, "train"))] == [
        results[0]["pid"]]
    # the step whose update the NaN batch reaches (the strategy's input pipeline decides
    # which: measured, the step after the batch's index, STOP_NAN_STEP + 1)
    ratios = read_packed(os.path.join(logdir, "train")).ratios
    nan_step = min(step for points in ratios.values() for step, r in points if np.isnan(r))
    assert nan_step >= distribute_worker.STOP_NAN_STEP
    assert chief["iterations"] == nan_step + 2  # the flag fires at the next batch's begin
    flags = chief["flags"]
    assert len(flags) == 4  # every variable
    assert {(f["reason"], f["since"], f["step"]) for f in flags} == {("nan", nan_step, nan_step)}
    assert fired(flags) == reported(logdir, "train")


class _NonChiefStrategy:
    """What `tf.distribute.get_strategy()` says on a non-chief worker, in this process."""

    class extended:
        should_save_summary = False


def test_watch_does_nothing_on_a_non_chief_worker(logdir, writer, monkeypatch):
    monkeypatch.setattr(tf.distribute, "get_strategy", _NonChiefStrategy)
    variable = tf.Variable([1.0, 2.0])

    def step():
        with wur_summary.watch([variable], step=0):
            variable.assign_add([1.0, 1.0])

    graph_step = tf.function(step)
    with writer.as_default():
        step()
        graph_step()
    writer.flush()
    assert read_events(logdir) == {}
    ops = {op.type for op in graph_step.get_concrete_function().graph.get_operations()}
    assert not ops & {"WriteRawProtoSummary", "WriteSummary", "If", "StatelessIf"}


def test_parameter_server_strategy_is_a_clear_error(writer, monkeypatch):
    # an instance that is connected to no cluster: enough for isinstance
    strategy = object.__new__(tf.distribute.experimental.ParameterServerStrategy)
    monkeypatch.setattr(tf.distribute, "get_strategy", lambda: strategy)
    with writer.as_default(), pytest.raises(NotImplementedError, match="asynchronously"):
        with wur_summary.watch([tf.Variable(1.0)], step=0):
            pass


def test_sharded_variable_is_a_clear_error(writer):
    """A ParameterServerStrategy's partitioned variable: refused, naming it."""
    sharded = tf.__internal__.distribute.ShardedVariable(
        [tf.Variable([1.0, 2.0], name="w/part_0"), tf.Variable([3.0], name="w/part_1")])
    with writer.as_default(), pytest.raises(TypeError, match="ShardedVariable"):
        with wur_summary.watch([sharded], step=0):
            pass

"""PyTorch `watch` under sharding: two gloo ranks on CPU (tests/support/torch_sharded_worker.py, one
run of it for every setting) train under FSDP2, FSDP1 (either `use_orig_params`), DTensor
tensor parallel, FSDP x TP, HSDP, DDP and GradScaler; every ratio and histogram read back
through the real TensorBoard, in both loaders, is the one of the full parameters gathered
around each update."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from framework_servers import assert_ratios_match, both_loaders, export  # noqa: E402
import torch_sharded_worker as worker  # noqa: E402

WORKER_TIMEOUT_S = 240  # a hang (a collective one rank never joins) fails instead of stalling


def _steps(setting: str) -> list[int]:
    return list(range(0, worker.STEPS, worker.EVERY.get(setting, 1)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The worker's logdir, its per-rank results {setting: [rank 0, rank 1]}, two servers."""
    logdir = str(tmp_path_factory.mktemp("sharded_runs"))
    out = str(tmp_path_factory.mktemp("sharded_out"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        done = subprocess.run([sys.executable, worker.__file__, logdir, out], env=env,
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the sharded ranks did not finish in {WORKER_TIMEOUT_S} s "
                             f"(a hang):\n{(e.stderr or b'')[-3000:]!r}") from None
    assert done.returncode == 0, done.stderr[-5000:]
    results = {
        s: [json.load(open(os.path.join(out, f"{s}.rank_{r}.json"))) for r in (0, 1)]
        for s in worker.SETTINGS
    }
    with both_loaders(logdir, {s: _steps(s)[-1] for s in worker.SETTINGS}) as servers:
        yield logdir, results, servers


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("setting", worker.SETTINGS)
def test_ratios_are_those_of_the_full_parameters(runs, loader, setting):
    _, results, servers = runs
    reference = {t: {int(s): r for s, r in steps.items()}
                 for t, steps in results[setting][0]["ratios"].items()}
    assert list(reference) == worker.TAGS
    assert all(sorted(steps) == _steps(setting) for steps in reference.values())
    got = export(servers[loader], setting)
    assert list(got) == worker.TAGS  # no _fsdp_wrapped_module, module. or _orig_mod segment
    assert_ratios_match(got, reference, rtol=1e-5)
    split = worker.SCALER_INF_AT if setting == "scaler_disagree" else None  # partly moved
    assert all(v > 0 for t in worker.TAGS for s, v in reference[t].items()
               if s not in results[setting][0]["skipped"] and s != split)


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("setting", worker.SETTINGS)
def test_histograms_are_those_of_the_full_parameters(runs, loader, setting):
    _, results, servers = runs
    rank0 = results[setting][0]
    for tag in worker.TAGS:
        got = servers[loader].get_json(
            f"/data/plugin/wur/histograms?run={setting}&tag={tag.replace('/', '%2F')}")
        assert got["steps"] == _steps(setting), tag
        for step, counts in zip(got["steps"], got["counts"]):
            want = rank0["hists"][tag][str(step)]
            total = 1
            for n in rank0["shapes"][tag]:
                total *= n
            assert sum(counts) == sum(want) == total, (tag, step)
            # an element on a bucket edge may round to the other side on another CPU
            moved = sum(abs(a - b) for a, b in zip(counts, want)) // 2
            assert moved <= max(1, total // 50), (tag, step, counts, want)


@pytest.mark.parametrize("setting", worker.SETTINGS)
def test_every_rank_counts_steps_and_only_rank_0_writes(runs, setting):
    logdir, results, _ = runs
    # every rank takes part in every logged step (DDP: it receives rank 0's ratios)
    assert [(r["steps"], r["active"]) for r in results[setting]] == [(worker.STEPS, True)] * 2
    assert len(glob.glob(os.path.join(logdir, setting, "events.out.tfevents.*"))) == 1
    warned = results[setting][0]["warnings"]
    if setting == "scaler_disagree":  # the split is told, once, naming the cure
        assert len(warned) == 1 and "skipped the update on 1 of 2 ranks" in warned[0], warned
        assert "ShardedGradScaler" in warned[0]
    else:
        assert warned == []  # watch warns of nothing here


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_grad_scaler_skips_are_marked_without_a_hang(runs, loader):
    """ShardedGradScaler: rank 1 alone makes step SCALER_INF_AT's gradient infinite, every
    rank skips; the job ends (the worker's timeout fails a hang), the step is logged with
    ratio 0 on every tag and marked skipped, the other steps move."""
    _, results, servers = runs
    rank0 = results["scaler_agreed"][0]
    assert rank0["skipped"] == [worker.SCALER_INF_AT]
    run = next(r for r in servers[loader].get_json("/data/plugin/wur/runs")["runs"]
               if r["run"] == "scaler_agreed")
    assert run["skipped_at"] == [worker.SCALER_INF_AT]
    got = export(servers[loader], "scaler_agreed")
    assert all(got[t][worker.SCALER_INF_AT] == 0 for t in worker.TAGS)


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_ranks_whose_grad_scalers_disagree_do_not_hang(runs, loader):
    """A plain GradScaler over FSDP1's flat shards: rank 1 skips step SCALER_INF_AT, rank 0
    steps (a real split: rank 1's handle takes the skipped path, rank 0's the logged one,
    both join the step's all_reduce). The job ends; the step is the gathered truth, part
    of the parameters moved and part did not, and it is not marked skipped."""
    _, results, servers = runs
    rank0, rank1 = results["scaler_disagree"]
    assert rank0["skipped"] == [] and rank1["steps"] == rank0["steps"] == worker.STEPS
    at = str(worker.SCALER_INF_AT)
    truth = [rank0["ratios"][t][at] for t in worker.TAGS]
    assert min(truth) == 0 < max(truth), truth  # rank 1's shards did not move
    run = next(r for r in servers[loader].get_json("/data/plugin/wur/runs")["runs"]
               if r["run"] == "scaler_disagree")
    assert run["skipped_at"] == []
    got = export(servers[loader], "scaler_disagree")
    for tag, want in zip(worker.TAGS, truth):
        assert got[tag][worker.SCALER_INF_AT] == pytest.approx(want, rel=1e-5, abs=0), tag


def test_spectral_ratios_of_sharded_models_are_refused_on_every_rank(runs):
    _, results, _ = runs
    for rank in results["fsdp2"]:
        assert "does not support sharded models" in rank["spectral_refused"]

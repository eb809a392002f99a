"""tb_wur_plugin.torch.watch against a numpy reference (weights copied before and after each
step), read back through the plugin's export in both loaders of the real `tensorboard`."""

from __future__ import annotations

import glob
import json
import math
import os
import time
import urllib.parse

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from framework_servers import assert_ratios_match, both_loaders, export  # noqa: E402
from tb_wur_plugin import metadata  # noqa: E402
from tb_wur_plugin.arrays import numpy_math  # noqa: E402
from tb_wur_plugin import torch as wur_torch  # noqa: E402
from tb_wur_plugin.arrays import torch_math  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(5, 5)
        self.norm = torch.nn.LayerNorm(5)

    def forward(self, x):
        return self.norm(torch.tanh(self.linear(x)))


class Net(torch.nn.Module):
    """Nested submodules, and a frozen layer (not logged)."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(5, 3)
        self.frozen = torch.nn.Linear(3, 3)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.frozen(self.head(self.encoder(x)))


TAGS = [
    "encoder/0/linear/weight", "encoder/0/linear/bias", "encoder/0/norm/weight",
    "encoder/0/norm/bias", "encoder/1/linear/weight", "encoder/1/linear/bias",
    "encoder/1/norm/weight", "encoder/1/norm/bias", "head/weight", "head/bias",
]


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _reference(model, before, ratios, hists, step):
    """Ratios (float64) and histogram counts (elementwise ratios in float32) of the step."""
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        tag = name.replace(".", "/")
        old, new = before[name].numpy(), p.detach().numpy()
        delta = np.linalg.norm(new.astype(np.float64) - old.astype(np.float64))
        weight = np.linalg.norm(old.astype(np.float64))
        with np.errstate(divide="ignore"):
            ratios.setdefault(tag, {})[step] = float(delta / weight) if delta else 0.0
        if hists is not None:
            change = new - old
            with np.errstate(divide="ignore", invalid="ignore"):
                elementwise = np.abs(np.where(change == 0, 0, change / old))
            hists.setdefault(tag, {})[step] = numpy_math.bucket_counts(elementwise).tolist()


def _train(model, optimizer, steps, every, *, accumulate=1, scaler=None, overflow_at=(),
           histograms=False):
    """Steps of training that yield between steps; returns the reference."""
    generator = torch.Generator().manual_seed(1)
    ratios, hists, skipped = {}, ({} if histograms else None), []
    for step in range(steps):
        before = _snapshot(model)
        for _ in range(accumulate):  # gradient accumulation: one step, several backward
            loss = model(torch.randn(8, 5, generator=generator)).pow(2).mean()
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler is not None:
            if step in overflow_at:
                next(model.parameters()).grad.view(-1)[0] = math.inf
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()
        if step % every == 0:
            _reference(model, before, ratios, hists, step)
            if step in overflow_at:
                skipped.append(step)
    return ratios, hists, skipped


def _run_ddp(logdir: str, out: str, timeout: float) -> None:
    """torch_ddp_worker.train on two spawned ranks; a hang fails (the ranks killed) after
    `timeout` seconds instead of blocking."""
    import torch.multiprocessing as mp

    import torch_ddp_worker

    context = mp.start_processes(
        torch_ddp_worker.train, args=(logdir, out), nprocs=2, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                raise AssertionError(f"the DDP ranks did not finish in {timeout} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All runs of this module in one logdir, their references, and the two servers."""
    logdir = str(tmp_path_factory.mktemp("torch_runs"))
    expected, last_steps = {}, {}

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    handle = wur_torch.watch(optimizer, model, os.path.join(logdir, "sgd"), every=3,
                             histograms=True)
    expected["sgd"] = _train(model, optimizer, 10, 3, accumulate=2, histograms=True)
    assert handle.steps == 10
    handle.remove()
    last_steps["sgd"] = 9

    torch.manual_seed(1)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    with SummaryWriter(os.path.join(logdir, "adamw")) as writer:
        with wur_torch.watch(optimizer, model, writer, every=1):
            expected["adamw"] = _train(model, optimizer, 4, 1)
        assert not writer.closed  # flushed, left open
    last_steps["adamw"] = 3

    torch.manual_seed(2)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    handle = wur_torch.watch(optimizer, model, os.path.join(logdir, "scaler"), every=1)
    expected["scaler"] = _train(model, optimizer, 6, 1, scaler=scaler, overflow_at=(2, 4))
    assert handle.steps == 6  # the skipped steps count
    handle.remove()
    last_steps["scaler"] = 5

    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    torch.manual_seed(3)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch_writer = TorchWriter(os.path.join(logdir, "torch_writer"))
    torch_writer.add_scalar("loss", 1.0, 0)
    handle = wur_torch.watch(optimizer, model, torch_writer, every=2)
    expected["torch_writer"] = _train(model, optimizer, 5, 2)
    handle.remove()
    torch_writer.close()
    last_steps["torch_writer"] = 4

    out = tmp_path_factory.mktemp("ddp_out")
    _run_ddp(os.path.join(logdir, "ddp"), str(out), timeout=240)
    ranks = [json.load(open(out / f"rank_{r}.json")) for r in (0, 1)]
    expected["ddp"] = (ranks[0]["ratios"], None, [])
    last_steps["ddp"] = 3

    with both_loaders(logdir, last_steps) as servers:
        yield logdir, expected, ranks, servers


@pytest.mark.parametrize("loader", ["fast", "python"])
@pytest.mark.parametrize("run", ["sgd", "adamw", "scaler", "torch_writer"])
def test_ratios_read_back_as_the_reference(runs, loader, run):
    _, expected, _, servers = runs
    assert_ratios_match(export(servers[loader], run), expected[run][0])


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_ddp_rank_0_writes_once(runs, loader):
    logdir, _, ranks, servers = runs
    assert [r["active"] for r in ranks] == [True, True]  # rank 1 judges rank 0's ratios
    assert [r["steps"] for r in ranks] == [4, 4]
    assert ranks[0]["ratios"] == ranks[1]["ratios"]  # the ranks' weights are the same
    assert len(glob.glob(os.path.join(logdir, "ddp", "events.out.tfevents.*"))) == 1
    want = {t: {int(s): r for s, r in steps.items()} for t, steps in ranks[0]["ratios"].items()}
    assert_ratios_match(export(servers[loader], "ddp"), want)


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_grad_scaler_skipped_steps_are_marked(runs, loader):
    _, expected, _, servers = runs
    ratios, _, skipped = expected["scaler"]
    assert skipped == [2, 4]
    assert all(ratios[tag][s] == 0 for tag in TAGS for s in skipped)
    assert all(ratios[tag][1] > 0 for tag in TAGS)
    run = next(r for r in servers[loader].get_json("/data/plugin/wur/runs")["runs"]
               if r["run"] == "scaler")
    assert run["skipped_at"] == skipped and run["has_learning_rate"]
    series = servers[loader].get_json(
        f"/data/plugin/wur/series?run=scaler&tag={metadata.LEARNING_RATE_TAG}")
    assert series["steps"] == list(range(6)) and set(series["values"]) == {np.float32(0.1)}


@pytest.mark.parametrize("loader", ["fast", "python"])
def test_histograms_and_tags(runs, loader):
    _, expected, _, servers = runs
    server = servers[loader]
    run = next(r for r in server.get_json("/data/plugin/wur/runs")["runs"] if r["run"] == "sgd")
    assert [layer["tag"] for layer in run["layers"]] == TAGS  # model order, frozen left out
    assert run["layers"][0]["description"] == (
        "Weight-update ratio of encoder/0/linear/weight: shape [5, 5], float32")
    hists = expected["sgd"][1]
    for tag in ("encoder/0/linear/weight", "head/bias"):
        got = server.get_json(f"/data/plugin/wur/histograms?run=sgd&tag={tag}")
        assert got["steps"] == [0, 3, 6, 9]
        assert got["counts"] == [hists[tag][s] for s in got["steps"]]


# --- without servers ---------------------------------------------------------------------------


class Capture(SummaryWriter):
    """A writer that keeps what it is given."""

    def __init__(self, logdir):
        super().__init__(logdir)
        self.ratios, self.histograms = {}, {}

    def add_ratios(self, ratios, step, **kwargs):
        self.ratios[step] = dict(ratios)
        super().add_ratios(ratios, step, **kwargs)

    def add_histograms(self, histograms, step, **kwargs):
        self.histograms[step] = {t: c.counts.tolist() for t, c in histograms.items()}
        super().add_histograms(histograms, step, **kwargs)


def _one_step(before, after, dtype, tmp_path, histograms=False):
    """The ratio (and histogram) watch logs for one parameter moved from `before` to
    `after` (numpy arrays, taken as `dtype`)."""
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.from_numpy(np.asarray(before, np.float64)).to(dtype))
    target = torch.from_numpy(np.asarray(after, np.float64)).to(dtype)

    class Assign(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        @torch.no_grad()
        def step(self, closure=None):
            self.param_groups[0]["params"][0].copy_(target)

    optimizer = Assign(model.parameters())
    writer = Capture(str(tmp_path / "one"))
    with wur_torch.watch(optimizer, model, writer, every=1, histograms=histograms):
        optimizer.step()
    writer.close()
    return writer.ratios[0]["w"], writer.histograms.get(0, {}).get("w")


SCALES = {
    torch.float32: [1.0, 1e30, 1e-25],  # squares overflow, underflow in float32
    torch.float64: [1.0, 1e200, 1e-200],
    torch.bfloat16: [1.0, 1e30, 1e-25],
    torch.float16: [1.0, 1e3, 1e-2],
}


@pytest.mark.parametrize(
    "dtype,scale", [(d, s) for d, scales in SCALES.items() for s in scales],
    ids=lambda v: str(v).replace("torch.", ""),
)
def test_norms_neither_overflow_nor_underflow(tmp_path, dtype, scale):
    rng = np.random.default_rng(0)
    before = rng.normal(size=70_000) * scale  # more than one chunk
    after = before * (1 + rng.normal(size=before.size) * 1e-2)
    stored_b = torch.from_numpy(before).to(dtype).double().numpy() / scale
    stored_a = torch.from_numpy(after).to(dtype).double().numpy() / scale
    want = np.linalg.norm(stored_a - stored_b) / np.linalg.norm(stored_b)
    got, _ = _one_step(before, after, dtype, tmp_path)
    assert got == pytest.approx(want, rel=1e-5)


def test_conventions(tmp_path):
    assert _one_step([0.0, 0.0], [0.0, 1.0], torch.float32, tmp_path)[0] == math.inf
    assert _one_step([0.0, 0.0], [0.0, 0.0], torch.float32, tmp_path)[0] == 0.0
    assert math.isnan(_one_step([1.0, math.nan], [1.0, 2.0], torch.float32, tmp_path)[0])
    assert math.isnan(_one_step([1.0, 2.0], [1.0, math.inf], torch.float32, tmp_path)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_bucketing_is_numpy_bucketing(dtype):
    edges = metadata.HISTOGRAM_EDGES.astype(dtype)
    values = np.concatenate([
        edges, np.nextafter(edges, dtype(0)), np.nextafter(edges, dtype(np.inf)),
        [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, np.finfo(dtype).smallest_subnormal,
         np.finfo(dtype).max, 1e-12, 1e3],
        np.random.default_rng(0).lognormal(-7, 6, 10_000),
    ]).astype(dtype)
    got = torch_math.bucket_counts(torch.from_numpy(values)).numpy()
    np.testing.assert_array_equal(got, numpy_math.bucket_counts(values))
    if dtype == np.float32:  # any bits: NaN payloads, negative subnormals, ...
        bits = np.random.default_rng(1).integers(0, 2**32, 100_000, np.uint64)
        values = bits.astype(np.uint32).view(np.float32)
        got = torch_math.bucket_counts(torch.from_numpy(values)).numpy()
        np.testing.assert_array_equal(got, numpy_math.bucket_counts(values))


def test_histograms_of_one_step(tmp_path):
    before = np.float32([1.0, 2.0, 0.0, 0.0, 4.0, 1e-3])
    after = np.float32([1.001, 2.0, 0.0, 5.0, 3.0, 2e-3])
    _, counts = _one_step(before, after, torch.float32, tmp_path, True)
    change = after - before
    with np.errstate(divide="ignore", invalid="ignore"):
        want = numpy_math.bucket_counts(np.abs(np.where(change == 0, 0, change / before)))
    assert counts == want.tolist()
    assert counts[metadata.ZERO_BUCKET] == 2 and counts[metadata.INF_BUCKET] == 1


def test_steps_that_do_not_log_take_no_copy(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    copies = []
    original = torch_math.snapshot
    monkeypatch.setattr(torch_math, "snapshot", lambda *a: copies.append(1) or original(*a))
    handle = wur_torch.watch(optimizer, model, str(tmp_path / "run"), every=4)
    for _ in range(9):
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
    handle.remove()
    assert len(copies) == 3 and handle.steps == 9  # steps 0, 4, 8


def test_a_step_that_raises_is_not_logged_with_a_later_one(tmp_path):
    model = torch.nn.Linear(2, 1)
    fail = [True]

    class Flaky(torch.optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self, closure=None):
            if fail.pop() if fail else False:
                raise RuntimeError("boom")
            for p in self.param_groups[0]["params"]:
                p.add_(p.grad, alpha=-self.param_groups[0]["lr"])

    optimizer = Flaky(model.parameters(), lr=0.1)
    writer = Capture(str(tmp_path / "run"))
    handle = wur_torch.watch(optimizer, model, writer, every=2)
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(RuntimeError):
        optimizer.step()  # step 0: raises after the pre-hook
    optimizer.step()  # step 1: not logged, and not taken for step 0
    optimizer.step()  # step 2: logged
    handle.remove()
    assert sorted(writer.ratios) == [2] and handle.steps == 3


def test_remove_restores_everything(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    original = torch.amp.GradScaler.step
    handle = wur_torch.watch(optimizer, model, str(tmp_path / "run"), every=1)
    assert torch.amp.GradScaler.step is not original
    writer = handle._writer
    handle.remove()
    handle.remove()  # idempotent
    assert torch.amp.GradScaler.step is original
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
    assert writer.closed and not handle.active


def test_a_model_with_no_parameter_to_log_warns_once(tmp_path, recwarn):
    """All parameters frozen, or none: one UserWarning (at the `watch` call) instead of a
    silently empty run (issue 23); a parameter unfrozen later is logged."""
    model = torch.nn.Linear(2, 1)
    model.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = Capture(str(tmp_path / "run"))
    with pytest.warns(UserWarning, match="no parameter that requires grad") as caught:
        handle = wur_torch.watch(optimizer, model, writer, every=1)
    assert len(caught) == 1 and caught[0].filename == __file__
    for _ in range(3):
        optimizer.step()
    assert not writer.ratios and not recwarn.list  # once per handle
    model.weight.requires_grad_(True)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    handle.remove()
    assert list(writer.ratios) == [3] and list(writer.ratios[3]) == ["weight"]
    with pytest.warns(UserWarning, match="no parameter that requires grad"):
        wur_torch.watch(optimizer, torch.nn.ReLU(), str(tmp_path / "relu")).remove()


def test_bad_arguments(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="optimizer"):
        wur_torch.watch(model, model, str(tmp_path))
    with pytest.raises(TypeError, match="model"):
        wur_torch.watch(optimizer, optimizer, str(tmp_path))
    with pytest.raises(ValueError, match="every"):
        wur_torch.watch(optimizer, model, str(tmp_path), every=0)
    with pytest.raises(TypeError, match="log_dir_or_writer"):
        wur_torch.watch(optimizer, model, 3)
    reserved = torch.nn.Module()
    reserved.add_module("_wur", torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="reserved"):
        wur_torch.watch(torch.optim.SGD(reserved.parameters(), lr=1), reserved, str(tmp_path))


def test_a_fused_optimizer_skipping_under_grad_scaler_is_marked(tmp_path):
    from helpers import read_events

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    scaler = torch.amp.GradScaler("cpu")
    with wur_torch.watch(optimizer, model, str(tmp_path), every=1) as handle:
        for step in range(3):
            scaler.scale(model(torch.ones(2, 3)).sum()).backward()
            if step == 1:
                model.weight.grad[0, 0] = math.inf
            scaler.step(optimizer)  # always steps a fused optimizer, which skips itself
            scaler.update()
            optimizer.zero_grad()
    assert handle.steps == 3
    events = read_events(str(tmp_path))
    assert [float(v) for _, v, _ in events[metadata.SKIPPED_STEP_TAG]] == [0.0, 1.0, 0.0]
    assert [float(v) == 0 for _, v, _ in events["weight"]] == [False, True, False]


def test_several_optimizers_one_run_one_count(tmp_path):
    """A critic stepped every iteration and a generator every other one, watched together:
    one run, tags `optimizer_<i>/...` of the parameters each updates, one step count over
    both optimizers' steps, each logged at its first update at or after each multiple of
    `every`; the learning rate is optimizer 0's; values against numpy."""
    from helpers import read_packed

    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"critic": torch.nn.Linear(4, 3), "generator": torch.nn.Linear(3, 4)})
    critic = torch.optim.Adam(model["critic"].parameters(), lr=1e-2)
    generator = torch.optim.SGD(model["generator"].parameters(), lr=0.3)
    run = str(tmp_path / "gan")
    handle = wur_torch.watch([critic, generator], model, run, every=4)
    want: dict[str, dict[int, float]] = {}
    step, next_log = 0, {0: 0, 1: 0}
    for i in range(12):
        stepped = [(0, critic)] + ([(1, generator)] if i % 2 == 0 else [])
        for index, optimizer in stepped:
            optimizer.zero_grad()
            model["generator"](model["critic"](torch.randn(5, 4))).pow(2).mean().backward()
            name = "critic" if index == 0 else "generator"
            before = _snapshot(model[name])
            optimizer.step()
            if step >= next_log[index]:
                next_log[index] = (step // 4 + 1) * 4
                for n, p in model[name].named_parameters():
                    old, new = before[n].double().numpy(), p.detach().double().numpy()
                    want.setdefault(f"optimizer_{index}/{name}/{n}", {})[step] = (
                        np.linalg.norm(new - old) / np.linalg.norm(old))
            step += 1
    assert handle.steps == step == 18
    handle.remove()
    packed = read_packed(run)
    assert sorted(packed.ratios) == sorted(want)
    for tag, points in want.items():
        got = dict(packed.ratios[tag])
        assert sorted(got) == sorted(points), (tag, sorted(got), sorted(points))
        np.testing.assert_allclose([got[s] for s in sorted(points)],
                                   [points[s] for s in sorted(points)], rtol=1e-5, err_msg=tag)
    # steps: critic 0, 2, 3, 5, 6, 8, 9, 11, 12, ...; generator 1, 4, 7, 10, 13, 16
    assert sorted(want["optimizer_0/critic/weight"]) == [0, 5, 8, 12, 17]
    assert sorted(want["optimizer_1/generator/weight"]) == [1, 4, 10, 13, 16]
    with both_loaders(str(tmp_path), {"gan": 17}) as servers:
        for loader, server in servers.items():
            lr = server.get_json("/data/plugin/wur/series?run=gan&tag="
                                 + urllib.parse.quote(metadata.LEARNING_RATE_TAG))
            assert lr["steps"] == [0, 5, 8, 12, 17], loader
            np.testing.assert_allclose(lr["values"], 1e-2, rtol=1e-6, err_msg=loader)


def test_several_optimizers_bad_sequences(tmp_path):
    model = torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        wur_torch.watch([], model, str(tmp_path))
    with pytest.raises(ValueError, match="twice"):
        wur_torch.watch((sgd, sgd), model, str(tmp_path))
    with pytest.raises(TypeError, match="in the sequence"):
        wur_torch.watch([sgd, model], model, str(tmp_path))
    assert not os.listdir(tmp_path)  # no file opened
    with wur_torch.watch([sgd], model, str(tmp_path / "one")) as handle:  # one: as watch(sgd)
        model(torch.ones(1, 2)).sum().backward()
        sgd.step()
    from helpers import read_packed

    assert sorted(read_packed(str(tmp_path / "one")).ratios) == ["bias", "weight"]
    assert handle.steps == 1

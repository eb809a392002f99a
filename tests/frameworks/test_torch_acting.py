"""PyTorch `watch` acting while training (issue 33): a defect seeded into a small MLP at step
K fires its flag at the logged step at which `tb-wur report` on the steps so far first flags
it (a NaN, a +inf at that step; a frozen, a 1000x slow or a fast group once `patience`
judged steps complete the streak), with the report's `since`; at the end, the report of the
written logdir and the fired flags agree layer by layer. Each flag is logged once at WARNING
and passed to `on_flag` once; `stop_on` sets `should_stop` exactly at the fire step; spectral
ratios are judged too; a healthy transformer under AdamW with warm-up and cosine decay to
zero fires nothing; bad settings raise before anything is opened. The 2-rank agreement is in
test_torch_acting_ranks.py."""

from __future__ import annotations

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")

from tb_wur_plugin import cli  # noqa: E402
from tb_wur_plugin.judgement.thresholds import DEFAULT_PATIENCE  # noqa: E402
from tb_wur_plugin.torch import watch  # noqa: E402
from tb_wur_plugin.writer import SummaryWriter  # noqa: E402

K, STEPS, EVERY = 20, 60, 2  # the defect's step, the run's steps, the logging interval
STREAK_FIRES_AT = K + (DEFAULT_PATIENCE - 1) * EVERY  # the step completing the streak


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: PyTorch's spinning threads make these small steps many times
    slower on a machine whose cores other processes keep busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _mlp() -> torch.nn.Sequential:
    """Six tanh layers: six matrices and six biases, so that a layer has peers of its kind."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in [(8, 32), (32, 32), (32, 32), (32, 32), (32, 32), (32, 1)]:
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def _nan(model, optimizer):
    model[2].weight[0, 0] = math.nan


def _inf(model, optimizer):
    model[2].bias.zero_()  # ‖w‖ = 0 again, and its gradient moves it: +inf


def _scale_group(factor):
    def scale(model, optimizer):
        optimizer.param_groups[1]["lr"] *= factor  # group 1: model[2]'s weight and bias

    return scale


# defect: (seeded at step K, the flags fired first: (tag, reason, since, step))
DEFECTS = {
    "nan": (_nan, [("2/weight", "nan", K, K)]),
    "inf": (_inf, [("2/bias", "inf", K, K)]),
    "frozen": (_scale_group(0.0), [("2/weight", "not_moving", K, STREAK_FIRES_AT),
                                   ("2/bias", "not_moving", K, STREAK_FIRES_AT)]),
    "slow_1000x": (_scale_group(1e-3), [("2/weight", "slow_outlier", K, STREAK_FIRES_AT),
                                        ("2/bias", "slow_outlier", K, STREAK_FIRES_AT)]),
    "fast_100x": (_scale_group(100.0), [("2/weight", "fast_outlier", K, STREAK_FIRES_AT)]),
}


def _train(target, defect=None, steps=STEPS, **settings):
    """SGD on a fixed regression, one parameter group a layer, `defect` applied at step K
    (after the backward, before the update); returns the handle and `should_stop` after
    each step."""
    model = _mlp()
    optimizer = torch.optim.SGD(
        [{"params": m.parameters()} for m in model if isinstance(m, torch.nn.Linear)], lr=0.05)
    handle = watch(optimizer, model, target, every=EVERY, **settings)
    generator = torch.Generator().manual_seed(1)
    should_stop = []
    for step in range(steps):
        x = torch.randn(64, 8, generator=generator)
        torch.nn.functional.mse_loss(model(x), torch.sin(x.sum(1, keepdim=True))).backward()
        if step == K and defect is not None:
            with torch.no_grad():
                defect(model, optimizer)
        optimizer.step()
        optimizer.zero_grad()
        should_stop.append(handle.should_stop)
    handle.remove()
    return handle, should_stop


def _reported(logdir, capsys, metric="frobenius"):
    """{tag: (reason, since)} of the layers `tb-wur report` flags in the logdir's one run."""
    capsys.readouterr()
    assert cli.main(["report", str(logdir), "--format", "json", "--load_fast", "false",
                     "--metric", metric]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    return {layer["tag"]: (layer["reason"], layer["since"]) for layer in run["layers"]
            if layer["flagged"]}


def _assert_agrees_with_the_report(flags, reported, metric="frobenius"):
    """Every layer the report flags fired a flag with its reason and since; no other layer
    fired."""
    fired = {(f.tag, f.reason, f.since) for f in flags if f.metric == metric}
    for tag, (reason, since) in reported.items():
        assert (tag, reason, since) in fired, (tag, reason, since, fired)
    assert {tag for tag, _, _ in fired} <= set(reported), (fired, reported)


@pytest.mark.parametrize("name", list(DEFECTS))
def test_a_seeded_defect_fires_where_the_report_first_flags_it(tmp_path, capsys, caplog, name):
    defect, first = DEFECTS[name]
    reason = first[0][1]
    told = []
    with caplog.at_level("WARNING", logger="tb_wur_plugin"):
        handle, should_stop = _train(str(tmp_path), defect, stop_on={reason},
                                     on_flag=told.append)
    flags = handle.flags
    assert flags, "no flag fired"
    fire_step = flags[0].step
    assert [(f.tag, f.reason, f.since, f.step) for f in flags if f.step == fire_step] == first
    assert all(f.metric == "frobenius" for f in flags)
    _assert_agrees_with_the_report(flags, _reported(tmp_path, capsys))
    assert told == flags  # on_flag once per flag, in order
    assert len({(f.tag, f.reason, f.metric) for f in flags}) == len(flags)  # once each
    assert [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"] == [
        f"WUR step {f.step}: {f.tag}: {f.text}" for f in flags]
    assert all(r.levelname == "WARNING" for r in caplog.records if r.name == "tb_wur_plugin")
    assert should_stop == [step >= fire_step for step in range(STEPS)]


@pytest.mark.parametrize("name", ["nan", "frozen"])
def test_the_fire_step_is_the_first_prefix_the_report_flags(tmp_path, capsys, name):
    """Runs stopped one logged step before the fire step, and at it: the report flags the
    seeded layer only in the second (with the flag's since)."""
    defect, first = DEFECTS[name]
    tag, reason, since, fire_step = first[0]
    for steps, flagged in ((fire_step - EVERY + 1, False), (fire_step + 1, True)):
        logdir = tmp_path / str(steps)
        handle, _ = _train(str(logdir), defect, steps=steps)
        reported = _reported(logdir, capsys)
        assert (reported.get(tag) == (reason, since)) is flagged, (steps, reported)
        assert (any(f.tag == tag for f in handle.flags)) is flagged
        _assert_agrees_with_the_report(handle.flags, reported)


def test_spectral_ratios_are_judged_too(tmp_path, capsys, caplog):
    defect, _ = DEFECTS["frozen"]
    with caplog.at_level("WARNING", logger="tb_wur_plugin"):
        handle, _ = _train(str(tmp_path), defect, spectral=True)
    spectral = [f for f in handle.flags if f.metric == "spectral"]
    assert [(f.tag, f.reason, f.since, f.step) for f in spectral] == [
        ("2/weight", "not_moving", K, STREAK_FIRES_AT)]  # the matrices only
    for metric in ("frobenius", "spectral"):
        _assert_agrees_with_the_report(handle.flags, _reported(tmp_path, capsys, metric), metric)
    lines = [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"]
    assert f"WUR step {STREAK_FIRES_AT}: 2/weight: {spectral[0].text} (spectral ratios)" in lines


def test_a_torch_writer_gets_the_settings(tmp_path):
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    writer = TorchWriter(str(tmp_path))
    handle, should_stop = _train(writer, DEFECTS["frozen"][0], stop_on={"not_moving"})
    writer.close()
    assert should_stop.index(True) == STREAK_FIRES_AT
    assert {f.tag for f in handle.flags} == {"2/weight", "2/bias"}


def test_a_summary_writer_passed_in_judges_with_its_own_settings(tmp_path):
    told = []
    with SummaryWriter(str(tmp_path), stop_on={"not_moving"}, on_flag=told.append) as writer:
        handle, should_stop = _train(writer, DEFECTS["frozen"][0])
        assert handle.flags is writer.flags and writer.should_stop
    assert should_stop.index(True) == STREAK_FIRES_AT and told == handle.flags
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with SummaryWriter(str(tmp_path / "other")) as writer:
        for settings in ({"stop_on": {"nan"}}, {"on_flag": print}, {"patience": 3},
                         {"low": 1e-4}, {"high": 1e-2}):
            with pytest.raises(ValueError, match="give them to the writer"):
                watch(optimizer, model, writer, **settings)
        watch(optimizer, model, writer, stop_on=(), patience=DEFAULT_PATIENCE).remove()


def test_bad_settings_raise_before_anything_is_opened(tmp_path):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logdir = str(tmp_path / "run")
    for settings, error, match in [
        ({"stop_on": "nan"}, TypeError, "not a string"),
        ({"stop_on": {"nan", "exploding"}}, ValueError, "unknown reasons \\['exploding'\\]"),
        ({"stop_on": [3]}, TypeError, "strings"),
        ({"on_flag": "print"}, TypeError, "on_flag"),
        ({"patience": 0}, ValueError, "patience"),
        ({"low": 1e-2, "high": 1e-4}, ValueError, "low"),
    ]:
        with pytest.raises(error, match=match):
            watch(optimizer, model, logdir, **settings)
    assert not os.path.exists(logdir)
    assert not optimizer._optimizer_step_pre_hooks


def test_a_healthy_transformer_with_warm_up_and_cosine_decay_fires_nothing(tmp_path, capsys):
    """AdamW (weight decay 0.01), 30 steps of linear warm-up then cosine decay to 0 at step
    300, a 2-layer transformer encoder on a copy task, logged every 5 steps."""
    torch.manual_seed(0)
    steps, vocabulary, width = 300, 16, 32
    embed = torch.nn.Embedding(vocabulary, width)
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(width, 2, 64, dropout=0.0, batch_first=True), 2,
        enable_nested_tensor=False)
    model = torch.nn.ModuleDict({"embed": embed, "encoder": encoder,
                                 "head": torch.nn.Linear(width, vocabulary)})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warm_up = 30
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        (s + 1) / warm_up, 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    handle = watch(optimizer, model, str(tmp_path), every=5)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, vocabulary, (16, 8), generator=generator)
        logits = model["head"](model["encoder"](model["embed"](tokens)))
        torch.nn.functional.cross_entropy(logits.reshape(-1, vocabulary),
                                          tokens.reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
    handle.remove()
    assert optimizer.param_groups[0]["lr"] == 0.0
    assert handle.flags == [] and not handle.should_stop
    assert _reported(tmp_path, capsys) == {}

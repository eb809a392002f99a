"""The example scripts run and write what the README says they write: one per face (the
Keras callback, `wur_summary.watch`, PyTorch `watch`, JAX/optax, `writer.SummaryWriter`
alone, the Hugging Face and Lightning callbacks), each read back (examples/armijo_fit.py:
tests/armijo/test_armijo.py); a PyTorch run that stops itself at a flag."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

import tb_wur_plugin
import forked
from helpers import ratio_series, read_events
from tb_wur_plugin import cli, metadata

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")

# `python -c WITHOUT_TENSORFLOW SCRIPT ARGS...` runs SCRIPT as `python SCRIPT ARGS...` does,
# in an interpreter where TensorFlow looks not installed (importing it, or a submodule,
# raises ModuleNotFoundError; importlib.util.find_spec, with which torch and transformers
# probe for it, answers None), as after `pip install ".[torch]"` and the like.
WITHOUT_TENSORFLOW = """
import importlib.util, os, runpy, sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.partition(".")[0] == "tensorflow" else find_spec(name, package))
sys.meta_path.insert(0, NotInstalled())
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(sys.argv[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(script, *args, tensorflow=True, forked_from_preloaded=False):
    """Runs examples/SCRIPT with `args` in a new interpreter and returns its output; with
    `tensorflow=False` where TensorFlow is not installed (`WITHOUT_TENSORFLOW`), which also
    checks that the example needs none; with `forked_from_preloaded` as `python SCRIPT` in a
    process forked from an interpreter that has imported TensorFlow and Keras
    (support/forked.py: the five or so seconds of CPU of their imports saved; not where the
    console at start-up is checked). One OpenMP thread: PyTorch's spin-waiting threads make a
    step ~20x slower on two cores that other processes keep busy."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if forked_from_preloaded:
        code, out, err = forked.run_script([os.path.join(EXAMPLES, script), *args], 600, env)
    else:
        prefix = [] if tensorflow else ["-c", WITHOUT_TENSORFLOW]
        result = subprocess.run([sys.executable, *prefix, os.path.join(EXAMPLES, script), *args],
                                capture_output=True, text=True, timeout=600, env=env)
        code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 0, out + err
    return out + err


def _needs(*modules):
    """Skips the test where one of `modules` is not installed (found without importing it)."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")


def _read(logdir):
    """{run: {tag: {step: ratio}}} of `logdir` as `tb_wur_plugin.read_ratios` reads it
    (TensorBoard's loading code), runs and each run's tags in the order it gives."""
    frame = tb_wur_plugin.read_ratios(str(logdir))
    runs = {}
    for row in frame.itertuples():
        runs.setdefault(row.run, {}).setdefault(row.tag, {})[row.step] = row.ratio
    return runs


def _scalar_tags(run_dir):
    """The plain scalar tags (the trainers' own loss) of the event files in `run_dir`."""
    accumulator = event_accumulator.EventAccumulator(str(run_dir))
    accumulator.Reload()
    return accumulator.Tags()["scalars"]


def _assert_logged(series, tags, steps):
    """`series` ({tag: {step: ratio}}) holds exactly `tags`, in this order, each at exactly
    `steps`."""
    assert list(series) == tags, list(series)
    for tag, points in series.items():
        assert sorted(points) == steps, (tag, sorted(points))


def test_custom_loop_example_logs_every_nth_step(tmp_path):
    _run("custom_loop.py", "--logdir", str(tmp_path), "--steps", "25", "--log_every", "10",
         forked_from_preloaded=True)
    series = ratio_series(str(tmp_path))
    assert len(series) == 6 and all(sorted(s) == [0, 10, 20] for s in series.values())
    events = read_events(str(tmp_path))
    assert [s for s, _, _ in events[metadata.LEARNING_RATE_TAG]] == [0, 10, 20]
    assert metadata.histogram_tag("digits/conv/kernel") in events


def test_keras_fit_example(tmp_path):
    _run("keras_fit.py", "--logdir", str(tmp_path), "--epochs", "1", forked_from_preloaded=True)
    series = ratio_series(str(tmp_path / "train"))
    assert len(series) == 6 and all(sorted(s)[:2] == [0, 10] for s in series.values())


def test_demo_flags_the_defect_and_nothing_else_on_a_quiet_console(tmp_path, capsys):
    """The demo's two runs: healthy, and the same with layer `logits` at a learning rate
    1000x too small. Only `logits/kernel` of the second is flagged, as a slow outlier (its
    zero-initialised bias is the sum of its own updates: its ratio does not depend on the
    learning rate); the console has no line that reads like an error (issue 23)."""
    output = _run("demo.py", "--logdir", str(tmp_path), "--epochs", "1", "--no-serve")
    assert "error" not in output.lower(), output
    healthy, slow = (ratio_series(str(tmp_path / run)) for run in ("healthy", "slow_logits"))
    assert set(healthy) == set(slow) and len(healthy) == 10

    def median(series, tag):
        return np.median([r for r in series[tag].values() if np.isfinite(r)])

    kernels = sorted(t for t in healthy if t.endswith("kernel"))
    defect = "digits/logits/kernel"
    peers = [median(slow, t) for t in kernels if t != defect]
    assert median(slow, defect) * 1000 <= np.median(peers)
    assert 500 < median(healthy, defect) / median(slow, defect) < 2000  # Adam: ratio ∝ lr
    healthy_kernels = [median(healthy, t) for t in kernels]
    assert max(healthy_kernels) < 10 * min(healthy_kernels)

    capsys.readouterr()
    assert cli.main(["report", str(tmp_path), "--format", "json", "--fail-on-flags"]) == 1
    runs = {run["run"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    flagged = {
        name: {layer["tag"]: layer["reason"] for layer in run["layers"] if layer["flagged"]}
        for name, run in runs.items()
    }
    assert flagged == {"healthy": {}, "slow_logits": {defect: "slow_outlier"}}


def test_torch_watch_example(tmp_path):
    _needs("torch", "sklearn")
    _run("torch_watch.py", "--logdir", str(tmp_path), "--steps", "25", "--every", "10",
         tensorflow=False)
    (run, series), = _read(tmp_path).items()
    assert run == tmp_path.name  # straight into the logdir given: its run named after it
    layers = ["conv", "hidden", "logits"]
    _assert_logged(series, [f"{layer}/{kind}" for layer in layers for kind in ("weight", "bias")],
                   [0, 10, 20])
    # PyTorch initialises weights and biases at random: every ratio is finite, Adam's
    # first updates (lr 1e-3) move each parameter by far less than its norm
    assert all(0 < r < 1 for points in series.values() for r in points.values()), series
    events = read_events(str(tmp_path))
    assert [s for s, _, _ in events[metadata.LEARNING_RATE_TAG]] == [0, 10, 20]
    assert all(metadata.histogram_tag(tag) in events for tag in series)


def test_torch_stop_on_flag_example_stops_itself_at_the_flag(tmp_path, capsys):
    """The hidden layer's learning rate is 0 from step 60: its flags fire at step 80 (5
    logged steps, every 5), printed as WARNING lines; the loop ends after that step; the
    report of the logdir flags the same layers with the same reason and since, no other."""
    _needs("torch", "sklearn")
    output = _run("torch_stop_on_flag.py", "--logdir", str(tmp_path), tensorflow=False)
    for tag in ("hidden/weight", "hidden/bias"):
        assert (f"WARNING tb_wur_plugin: WUR step 80: {tag}: not moving: ratio 0 (did not "
                "move) at 5 judged steps in a row from step 60") in output, output
        assert f"  {tag}: not_moving since step 60" in output, output
    assert "stopped after step 80 " in output, output
    capsys.readouterr()
    assert cli.main(["report", str(tmp_path), "--format", "json", "--load_fast", "false"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert {layer["logged_steps"] for layer in run["layers"]} == {80 // 5 + 1}  # 0, 5, ..., 80
    assert {layer["tag"]: (layer["reason"], layer["since"]) for layer in run["layers"]
            if layer["flagged"]} == {"hidden/weight": ("not_moving", 60),
                                     "hidden/bias": ("not_moving", 60)}


def test_jax_optax_example(tmp_path):
    _needs("jax", "optax", "sklearn")
    output = _run("jax_optax.py", "--logdir", str(tmp_path), "--steps", "25", "--every", "10",
                  tensorflow=False)
    (series,) = _read(tmp_path).values()
    tags = ["hidden/bias", "hidden/kernel", "logits/bias", "logits/kernel"]  # pytree order
    _assert_logged(series, tags, [0, 10, 20])
    for tag, points in series.items():
        if tag.endswith("bias"):  # zero-initialised: +inf at its first update, then finite
            assert points[0] == np.inf and all(0 < points[s] < 1 for s in (10, 20)), points
        else:
            assert all(0 < r < 1 for r in points.values()), points
    events = read_events(str(tmp_path))
    assert [(s, float(v)) for s, v, _ in events[metadata.LEARNING_RATE_TAG]] == [
        (s, np.float32(1e-3)) for s in (0, 10, 20)]
    assert all(metadata.histogram_tag(tag) in events for tag in tags)
    assert all(f"{tag} " in output for tag in tags), output  # update_ratios' dict, printed


def test_numpy_writer_example(tmp_path, capsys):
    _needs("sklearn")
    _run("numpy_writer.py", "--logdir", str(tmp_path), "--steps", "401", "--every", "100",
         tensorflow=False)
    steps = [0, 100, 200, 300, 400]
    events = read_events(str(tmp_path))
    assert [(s, float(v)) for s, v, _ in events[metadata.LEARNING_RATE_TAG]] == [
        (s, np.float32(0.05 * 0.5 ** (s // 200))) for s in steps]  # halved every 200 steps
    tags = ["hidden/kernel", "hidden/bias", "logits/kernel", "logits/bias"]
    assert all(metadata.histogram_tag(tag) in events for tag in tags)

    capsys.readouterr()
    assert cli.main(["report", str(tmp_path), "--format", "json", "--fail-on-flags"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert [layer["tag"] for layer in run["layers"]] == tags
    for layer in run["layers"]:
        assert layer["logged_steps"] == len(steps) and not layer["flagged"], layer
        # zero-initialised biases: +inf at their first update, which is not a flag
        assert layer["nonfinite"] == (1 if layer["tag"].endswith("bias") else 0), layer
    _assert_logged(_read(tmp_path)[tmp_path.name], tags, steps)


def test_huggingface_trainer_example(tmp_path):
    _needs("torch", "transformers", "accelerate")
    _run("huggingface_trainer.py", "--output_dir", str(tmp_path), "--steps", "25",
         "--logging_steps", "10", tensorflow=False)
    (run,) = os.listdir(tmp_path / "runs")  # the Trainer's own TensorBoard run, no other
    series = _read(tmp_path / "runs")[run]
    block = [f"{part}/{kind}" for part in ("ln_1", "attn/c_attn", "attn/c_proj", "ln_2",
                                           "mlp/c_fc", "mlp/c_proj") for kind in ("weight", "bias")]
    tags = ["transformer/wte/weight", "transformer/wpe/weight",  # lm_head: tied to wte
            *(f"transformer/h/{i}/{name}" for i in range(2) for name in block),
            "transformer/ln_f/weight", "transformer/ln_f/bias"]
    _assert_logged(series, tags, [0, 10, 20])
    assert "train/loss" in _scalar_tags(tmp_path / "runs" / run)  # beside the Trainer's loss


def test_lightning_trainer_example(tmp_path):
    _needs("torch", "lightning", "sklearn")
    _run("lightning_trainer.py", "--logdir", str(tmp_path), "--steps", "25",
         "--log_every_n_steps", "10", tensorflow=False)
    run = "lightning_logs/version_0"  # the TensorBoardLogger's run directory
    (got, series), = _read(tmp_path).items()
    assert got == run
    _assert_logged(series, ["hidden/weight", "hidden/bias", "logits/weight", "logits/bias"],
                   [0, 10, 20])
    assert all(0 < r < 1 for points in series.values() for r in points.values()), series
    assert "train_loss" in _scalar_tags(tmp_path / run)  # beside the module's own loss

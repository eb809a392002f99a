"""The benchmarks run (tiny sizes); their numbers are read by people, never asserted."""

import os
import subprocess
import sys

import forked

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks")


def _output(argv, tensorflow=False, env=None):
    """The stdout of `python ARGV` with the environment `env` (default: this process's),
    asserting it exits 0; a script that imports TensorFlow (`tensorflow=True`) runs forked
    from an interpreter that has imported it (support/forked.py), the others in a new one."""
    if tensorflow:
        code, out, err = forked.run_script(argv, timeout=900, env=env)
    else:
        result = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                                timeout=900, env=env)
        code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 0, out[-3000:] + err[-3000:]
    return out


def _run(script, *args, tensorflow=False):
    """The output of `python benchmarks/SCRIPT --smoke ARGS` (`_output`)."""
    return _output([os.path.join(BENCHMARKS, script), "--smoke", *args], tensorflow)


def test_training_benchmark_smoke():
    out = _run("training.py", tensorflow=True)
    for line in ("recommended: logged step", "watch + record_if: idle", "MEM:",
                 "fit + WeightUpdateRatioCallback"):
        assert line in out


def test_backend_benchmark_smoke():
    out = _run("backend.py")
    assert "heatmap" in out and "export csv" in out


def test_concurrency_benchmark_smoke():
    out = _run("concurrency.py")
    assert "every answer 200 and identical" in out and "parallel clients" in out


def test_stacked_sums_benchmark_smoke():
    out = _run("stacked_sums.py", tensorflow=True)
    for line in ("project", "no sums", "float32 rows", "rows + cond", "rows + redo", "XLA float64"):
        assert line in out


def test_torch_watch_benchmark_smoke():
    out = _run("torch_watch.py", "--device", "cpu", "--workloads", "MLP", "P200", "GPT2")
    for line in ("watch: logged step", "wandb-style histc", "naive .item() loop", "GPT2 (cpu)"):
        assert line in out


def test_tf1_benchmark_smoke():
    out = _run("tf1.py", tensorflow=True)
    for line in ("summary step", "hook: logged step", "hook: other step"):
        assert line in out


def test_report_benchmark_smoke():
    out = _run("report.py")
    assert "report_s" in out and "flagged" in out


def test_data_server_benchmark_smoke():
    out = _run("data_server.py")
    assert '"load_cycle_ratio"' in out and '"bytes_per_point"' in out


def test_large_run_benchmark_smoke():
    out = _run("large_run.py")
    for key in ('"after_serving_s"', '"heatmap_new_range_s"', '"flags_s"', '"export_s"'):
        assert key in out


def test_read_side_benchmark_smoke():
    out = _run("read_side.py")
    assert '"what": "flags"' in out and '"what": "heatmap"' in out and '"median_s"' in out


def test_spectral_benchmark_smoke():
    out = _run("spectral.py", "--frameworks", "jax")
    for line in ("spectral: logged", "spectral: other step", "spectral / frobenius"):
        assert line in out


def test_spectral_benchmark_smoke_tensorflow():
    out = _run("spectral.py", "--frameworks", "tf", tensorflow=True)
    assert "tf (cpu)" in out
    for line in ("spectral: logged", "spectral: other step", "spectral / frobenius"):
        assert line in out


def test_torch_sharded_benchmark_smoke():
    out = _run("torch_sharded.py")
    assert "logged step" in out and "other step" in out
    for setting in ("none", "ddp", "fsdp2", "tp"):
        assert any(line.startswith(setting + " ") for line in out.splitlines()), out


def test_trainers_benchmark_smoke():
    out = _run("trainers.py")
    for trainer in ("hf", "lightning"):
        for kind in ("bare", "callback", "watch"):
            assert any(line.startswith(trainer) and f" {kind} " in line
                       for line in out.splitlines()), (trainer, kind, out)
        for pair in ("callback / watch, every=1 ", "bare / bare "):
            assert any(line.startswith(trainer) and pair in line
                       for line in out.splitlines()), (trainer, pair, out)


def test_online_judgement_benchmark_smoke():
    out = _run("online_judgement.py")
    assert "OnlineJudgement.observe" in out and "spectral" in out


def test_armijo_benchmark_train_part_smoke():
    """`armijo.py --parts train` (its other parts run in tests/armijo/test_armijo.py)."""
    out = _output([os.path.join(BENCHMARKS, "armijo.py"), "--quick", "--parts", "train",
                   "--problems", "mlp"], tensorflow=True)
    for line in ("the compiled train function", "plain SGD", "recommended variant / plain SGD"):
        assert line in out


def test_keras_fit_benchmark_smoke():
    """benchmarks/keras_fit.py on JAX (KERAS_BACKEND) with steps_per_execution=4, and
    training.py's fit part with it on TensorFlow."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    out = _output([os.path.join(BENCHMARKS, "keras_fit.py"), "--smoke", "--steps-per-execution", "4"],
                  env=env)
    assert "backend jax, steps_per_execution=4" in out
    assert "fit + callback(update_freq=10)" in out
    out = _run("training.py", "--parts", "fit", "--steps-per-execution", "4", tensorflow=True)
    assert "steps_per_execution=4" in out and "fit + WeightUpdateRatioCallback" in out


def test_keras_fit_hooks_benchmark_smoke():
    """benchmarks/keras_fit_hooks.py: its rounds, and its probe of traces and hook times."""
    out = _run("keras_fit_hooks.py", tensorflow=True)
    assert "no-op hooks (again)" in out and "callback(update_freq=100)" in out
    out = _run("keras_fit_hooks.py", "--probe", tensorflow=True)
    assert "traces" in out and "on_train_begin" in out and "on_train_end" in out


def test_jax_steps_benchmark_smoke():
    out = _run("jax_steps.py")
    for line in ("MLP:", "P200:", "updates returned, other step", "logged step, histograms"):
        assert line in out

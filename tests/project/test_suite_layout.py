"""The test suite's own rules (tests/README.md): the tests of the TensorFlow-free writers and of
the read side's pure functions import no TensorFlow, collected or run; the tables of
tests/conftest.py that schedule the parallel run name tests that exist; pytest's summary is
the last line of a parallel run's output."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from suite_paths import ROOT

# Test files that need no TensorFlow: collecting them, and running the tests of
# QUICK_TENSORFLOW_FREE_TESTS (which read event files back), must not import it (nor Keras).
TENSORFLOW_FREE_FILES = [
    "tests/frameworks/test_torch.py",
    "tests/frameworks/test_torch_spectral.py",
    "tests/frameworks/test_jax.py",
    "tests/write/test_spectral.py",
    "tests/read/test_heatmap.py",
]
QUICK_TENSORFLOW_FREE_TESTS = [
    "test_a_fused_optimizer_skipping_under_grad_scaler_is_marked",  # read_events
    "test_several_optimizers_one_run_one_count",  # read_packed
    "test_a_skipped_step_is_zero_and_marked_in_both_series",  # torch spectral, read_packed
    "test_log_update_ratios_spectral_off_and_bad_argument",  # jax
    "test_pack_round_trips_arrays_and_header",
]


def test_tensorflow_free_tests_import_no_tensorflow():
    code = (
        "import json, sys, pytest\n"
        f"collected = pytest.main(['-q', '-p', 'no:cacheprovider', '-n', '0', '--collect-only', "
        f"*{TENSORFLOW_FREE_FILES!r}])\n"
        "after_collection = sorted({'tensorflow', 'keras'} & set(sys.modules))\n"
        f"ran = pytest.main(['-q', '-p', 'no:cacheprovider', '-n', '0', "
        f"*{TENSORFLOW_FREE_FILES!r}, '-k', {' or '.join(QUICK_TENSORFLOW_FREE_TESTS)!r}])\n"
        "print(json.dumps([int(collected), after_collection, int(ran),\n"
        "                  sorted({'tensorflow', 'keras'} & set(sys.modules))]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
           "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected, after_collection, ran, after_running = json.loads(
        result.stdout.strip().splitlines()[-1])
    assert collected == 0 and ran == 0, result.stdout[-3000:]
    assert f"{len(QUICK_TENSORFLOW_FREE_TESTS)} passed" in result.stdout, result.stdout[-3000:]
    assert after_collection == [], "collecting them imported " + ", ".join(after_collection)
    assert after_running == [], "running them imported " + ", ".join(after_running)


def test_the_summary_is_the_last_line_of_a_parallel_run():
    """The xdist controller imports the conftest.py files of the arguments while pytest captures
    file descriptors 1 and 2, and pytest writes what it captured there to the terminal when it
    stops capturing, at exit: after the summary. A conftest that imports TensorFlow (as
    tests/conftest.py did) puts TensorFlow's start-up lines below the summary, which no log
    level silences (they come before absl's logging starts). Run as scripts/test.sh runs
    pytest (pytest.ini's two workers), over the root conftest and a folder's."""
    tests = ["tests/project/test_architecture.py::test_the_package_has_the_layout_the_docs_draw",
             "tests/judgement/test_reasons.py::test_the_table_is_well_formed"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *tests],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[-1].startswith("=") and " 2 passed in " in lines[-1], result.stdout[-3000:]


def _conftest_tables() -> dict[str, object]:
    """SPLIT, COST and START_ALONE of tests/conftest.py, read from its source."""
    tree = ast.parse(open(os.path.join(ROOT, "tests", "conftest.py"), encoding="utf-8").read())
    return {
        target.id: ast.literal_eval(node.value)
        for node in tree.body if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in ("SPLIT", "COST", "START_ALONE", "TOGETHER")
    }


def _test_functions(module: str) -> set[str]:
    tree = ast.parse(open(os.path.join(ROOT, module), encoding="utf-8").read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_the_scheduling_tables_name_existing_tests():
    tables = _conftest_tables()
    names = [*tables["SPLIT"], *tables["COST"], tables["START_ALONE"]]
    assert len(names) == len(tables["SPLIT"]) + len(tables["COST"]) + 1
    for name in names:
        module, _, function = name.partition("::")
        if module in tables["TOGETHER"]:
            assert os.path.isdir(os.path.join(ROOT, module)), f"tests/conftest.py: no {module}"
            continue
        assert os.path.isfile(os.path.join(ROOT, module)), f"tests/conftest.py: no {module}"
        assert not function or function in _test_functions(module), (
            f"tests/conftest.py: {module} has no test {function}")

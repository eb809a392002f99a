import contextlib
import fcntl
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# the workers and helpers (tests/support/) are imported by their module names
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))

import pytest  # noqa: E402


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "logs")


@pytest.fixture
def writer(logdir):
    """A TensorFlow summary writer on `logdir` (TensorFlow is imported by the tests that ask
    for it, not by every test)."""
    import tensorflow as tf

    w = tf.summary.create_file_writer(logdir)
    yield w
    w.close()


# --- parallel runs (pytest-xdist; pytest.ini runs `-n 2 --dist loadscope`) ------------------
#
# Work units: a module's tests go to one worker, so that its module-scoped fixtures (trained
# logdirs, servers) are made once, except in the modules of SPLIT, whose tests share no costly
# module fixture beyond one parametrized test's: there a unit is one test function (all its
# parameters). Units are handed out costliest first (COST: seconds measured on one core, a
# module not named counts DEFAULT_COST), so that no long unit starts last.

SPLIT = {"tests/browser/test_frontend.py", "tests/project/test_benchmarks_smoke.py",
         "tests/project/test_examples.py"}
# Folders whose modules are one unit: they share a session fixture too costly to make twice.
TOGETHER = ("tests/judgement/",)
COST = {  # seconds in a full parallel run (2026-12-04: a full run's, or a unit's alone, -n 0,
    # at a load average of 3 to 9, scaled to it); a unit that takes 30 s or more belongs here
    "tests/project/test_benchmarks_smoke.py::test_training_benchmark_smoke": 230,
    "tests/write/test_spectral_tf.py": 170,
    "tests/frameworks/test_transformers.py": 160,
    "tests/judgement/": 150,  # a folder of TOGETHER: one entry
    "tests/armijo/test_variants.py": 60,
    "tests/armijo/test_precision_distribution.py": 40,
    "tests/browser/test_frontend.py::test_tab_in_chromium": 140,
    "tests/write/test_ratios.py": 130,
    "tests/frameworks/test_resume.py": 120,
    "tests/frameworks/test_distribute.py": 105,
    "tests/frameworks/test_keras_callback.py": 95,
    "tests/frameworks/test_torch.py": 95,
    "tests/frameworks/test_jax_multiprocess.py": 90,  # three pairs of processes
    "tests/write/test_sparse.py": 90,
    "tests/frameworks/test_keras_backends.py": 90,  # two pairs of backend processes
    "tests/web/test_server_robustness.py": 80,
    "tests/frameworks/test_torch_sharded.py": 80,
    "tests/armijo/test_armijo.py": 80,
    "tests/write/test_layouts.py": 80,
    "tests/web/test_tensorboard_server.py": 75,
    "tests/frameworks/test_lightning.py": 70,
    "tests/web/test_fuzz.py": 65,
    "tests/frameworks/test_compat_v1.py": 60,
    "tests/read/test_spectral_read.py": 60,
    "tests/browser/test_frontend.py::test_step_axis_flags_and_run_filter_in_chromium": 55,
    "tests/project/test_benchmarks_smoke.py::test_trainers_benchmark_smoke": 50,
    "tests/write/test_killed_training.py": 50,
    "tests/browser/test_frontend.py::test_binned_columns_show_the_reduction_of_their_steps": 45,
    "tests/frameworks/test_jax.py": 40,
    "tests/frameworks/test_torch_acting_ranks.py": 40,
    "tests/project/test_benchmarks_smoke.py::test_large_run_benchmark_smoke": 40,
    "tests/write/test_metadata_once_and_varint_histograms.py": 40,
    "tests/write/test_captured_changes.py": 35,
    "tests/project/test_benchmarks_smoke.py::test_concurrency_benchmark_smoke": 35,
    "tests/project/test_benchmarks_smoke.py::test_backend_benchmark_smoke": 35,
    "tests/project/test_suite_layout.py": 30,
    "tests/read/test_large_run_and_histogram_versions.py": 30,
    "tests/project/test_examples.py::"
    "test_demo_flags_the_defect_and_nothing_else_on_a_quiet_console": 30,
    "tests/project/test_examples.py::test_keras_fit_example": 30,
    "tests/browser/test_frontend.py::test_keras_callback_run_in_chromium": 30,
    "tests/project/test_benchmarks_smoke.py::test_stacked_sums_benchmark_smoke": 27,
    "tests/project/test_examples.py::test_custom_loop_example_logs_every_nth_step": 25,
    "tests/read/test_report.py": 25,
    "tests/web/test_routes.py": 25,
    "tests/project/test_benchmarks_smoke.py::test_torch_sharded_benchmark_smoke": 25,
    "tests/project/test_benchmarks_smoke.py::test_tf1_benchmark_smoke": 24,
    "tests/write/test_writer.py": 20,
}
DEFAULT_COST = 10
# The test of `alone` below that a run starts with, on the first worker, before the others
# get work (waiting for it to start later could cost the length of any other test).
START_ALONE = ("tests/write/test_sparse.py::"
               "test_a_logged_sparse_step_holds_one_copy_beyond_the_bare_step")


def _unit(nodeid: str) -> str:
    module, _, rest = nodeid.partition("::")
    for folder in TOGETHER:
        if module.startswith(folder):
            return folder
    if module in SPLIT:
        return f"{module}::{rest.split('[')[0]}"
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class CostliestFirst(LoadScopeScheduling):
        runner = None  # the worker given START_ALONE's unit
        held = None  # the others, waiting for START_ALONE to end; None once it has

        def _split_scope(self, nodeid):
            return _unit(nodeid)

        def _assign_work_unit(self, node):
            if self.runner is None and START_ALONE in self.collection:
                self.runner, self.held = node, []
                self.workqueue.move_to_end(_unit(START_ALONE), last=False)
            elif self.held is not None and node is not self.runner:
                self.held.append(node)
                return
            else:
                costliest = max(self.workqueue, key=lambda unit: COST.get(unit, DEFAULT_COST))
                self.workqueue.move_to_end(costliest, last=False)
            super()._assign_work_unit(node)

        def _release(self):
            held, self.held = self.held or [], None
            for node in held:
                if node in self.assigned_work:
                    self._reschedule(node)

        def mark_test_complete(self, node, item_index, duration=0):
            super().mark_test_complete(node, item_index, duration)
            if self.held is not None and self.registered_collections[node][item_index] == START_ALONE:
                self._release()

        def remove_node(self, node):
            if node is self.runner:  # crashed (or done) before releasing the others
                self._release()
            return super().remove_node(node)

    return CostliestFirst(config, log)


def pytest_collection_modifyitems(items):
    """The tests marked `alone` first in their module (START_ALONE starts its unit)."""
    order = {}
    for index, item in enumerate(items):
        order.setdefault(item.nodeid.partition("::")[0], index)
    items.sort(key=lambda item: (order[item.nodeid.partition("::")[0]],
                                 item.get_closest_marker("alone") is None))


# --- tests that run alone -----------------------------------------------------------------
#
# A test marked `alone` (memory peaks, timing) runs while no other worker runs a test: every
# test holds a shared lock on one file for its setup, call and teardown, an `alone` one holds
# it exclusively. A second file is the turnstile that makes the `alone` one wait only for the
# tests already running, not for every later one.

_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")


@contextlib.contextmanager
def _locked(alone: bool):
    if _RUN is None:  # not under xdist: nothing else runs
        yield
        return
    base = os.path.join(tempfile.gettempdir(), f"tb-wur-tests-{_RUN}")
    with open(base + ".turnstile", "a") as turnstile, open(base + ".lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _locked(item.get_closest_marker("alone") is not None):
        yield

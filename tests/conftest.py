import contextlib
import fcntl
import gc
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
COST = {  # seconds in a full parallel run (2026-12-05 06:58 UTC, pytest --durations=0, at a
    # load of about twice the two workers'; the benchmark smoke runs of training.py and
    # trainers.py scaled to their CPU time since); a unit that takes 15 s or more belongs here
    "tests/judgement/": 180,  # a folder of TOGETHER: one entry
    "tests/browser/test_frontend.py::test_tab_in_chromium": 170,
    "tests/write/test_layouts.py": 145,
    "tests/frameworks/test_distribute.py": 100,
    "tests/frameworks/test_keras_callback.py": 80,
    "tests/frameworks/test_transformers.py": 80,
    "tests/write/test_spectral_tf.py": 75,
    "tests/armijo/test_armijo.py": 65,
    "tests/project/test_benchmarks_smoke.py::test_training_benchmark_smoke": 55,
    "tests/frameworks/test_compat_v1.py": 55,
    "tests/write/test_ratios.py": 50,
    "tests/frameworks/test_jax_multiprocess.py": 50,
    "tests/frameworks/test_keras_backends.py": 50,
    "tests/write/test_spectral.py": 50,
    "tests/frameworks/test_lightning.py": 50,
    "tests/project/test_suite_layout.py": 45,
    "tests/browser/test_frontend.py::"
    "test_step_axis_flags_and_run_filter_in_chromium": 45,
    "tests/project/test_benchmarks_smoke.py::test_trainers_benchmark_smoke": 45,
    "tests/project/test_benchmarks_smoke.py::test_keras_fit_hooks_benchmark_smoke": 25,
    "tests/project/test_benchmarks_smoke.py::test_keras_fit_benchmark_smoke": 25,
    "tests/web/test_fuzz.py": 45,
    "tests/write/test_tf_writers_match_summary_writer.py": 45,
    "tests/frameworks/test_resume.py": 40,
    "tests/project/test_benchmarks_smoke.py::"
    "test_concurrency_benchmark_smoke": 35,
    "tests/project/test_benchmarks_smoke.py::test_backend_benchmark_smoke": 35,
    "tests/write/test_killed_training.py": 30,
    "tests/browser/test_frontend.py::test_keras_callback_run_in_chromium": 30,
    "tests/frameworks/test_torch_sharded.py": 30,
    "tests/armijo/test_precision_distribution.py": 30,
    "tests/project/test_examples.py::"
    "test_demo_flags_the_defect_and_nothing_else_on_a_quiet_console": 25,
    "tests/write/test_metadata_once_and_varint_histograms.py": 25,
    "tests/project/test_examples.py::"
    "test_custom_loop_example_logs_every_nth_step": 25,
    "tests/write/test_sparse.py": 20,
    "tests/write/test_writer.py": 20,
    "tests/browser/test_frontend.py::"
    "test_binned_columns_show_the_reduction_of_their_steps": 20,
    "tests/armijo/test_variants.py": 20,
    "tests/write/test_captured_changes.py": 20,
    "tests/web/test_server_robustness.py": 20,
    "tests/frameworks/test_torch_acting_ranks.py": 20,
    "tests/project/test_benchmarks_smoke.py::test_large_run_benchmark_smoke": 20,
    "tests/project/test_benchmarks_smoke.py::"
    "test_stacked_sums_benchmark_smoke": 20,
    "tests/project/test_examples.py::test_lightning_trainer_example": 20,
    "tests/project/test_examples.py::test_huggingface_trainer_example": 20,
    "tests/project/test_benchmarks_smoke.py::"
    "test_torch_sharded_benchmark_smoke": 20,
    "tests/write/test_properties.py": 20,
    "tests/read/test_damaged_files.py": 20,
    "tests/project/test_examples.py::test_keras_fit_example": 15,
    "tests/project/test_tensorflow_free.py": 15,
    "tests/project/test_examples.py::"
    "test_torch_stop_on_flag_example_stops_itself_at_the_flag": 15,
    "tests/project/test_benchmarks_smoke.py::test_spectral_benchmark_smoke": 15,
    "tests/web/test_tensorboard_server.py": 15,
    "tests/read/test_spectral_read.py": 15,
    "tests/project/test_examples.py::test_jax_optax_example": 15,
    "tests/browser/test_frontend.py::"
    "test_metric_switch_shows_the_spectral_ratios": 15,
    "tests/read/test_report.py": 15,
    "tests/frameworks/test_torch.py": 15,
    "tests/frameworks/test_jax.py": 15,
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


# --- garbage, once per module ---------------------------------------------------------------
#
# TensorFlow and Keras leave a worker with hundreds of thousands of long-lived objects, which
# each full collection walks again; and a tf.data iterator left in a reference cycle waits in
# its destructor for its threads, longer the older it is (up to a minute, in whichever later
# test the collection happens to fall). So after a module's last test, its garbage is
# collected while young, and what survives is frozen (gc.freeze): later collections skip it.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()
        gc.freeze()

"""TF1 graph mode: `tb_wur_plugin.compat.v1.watch` and `WeightUpdateRatioHook`.

The classic pattern (placeholders, `compute_gradients`, `with watch() as wur:
train_op = opt.apply_gradients(...)`, summaries every N steps through
`tf.compat.v1.summary.FileWriter.add_summary`) for the six `tf.compat.v1.train` optimizers:
ratios against numpy from the variables read before and after each summary step, read back
through the export route of the real `tensorboard` in both loaders; a step that runs only
`train_op` executes the ops of the graph built without `watch`; both kinds of step make the
same update with the same optimizer state; reference variables in a subprocess.
"""

from __future__ import annotations

import csv
import io
import os
import pathlib
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

import forked
from helpers import read_packed, reference_buckets
from suite_paths import SUPPORT
from tb_server import TensorBoardServer
from tb_wur_plugin import metadata
from tb_wur_plugin.compat import v1 as wur_v1

v1 = tf.compat.v1
OPTIMIZERS = {
    "sgd": lambda: v1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: v1.train.MomentumOptimizer(0.05, 0.9),
    "adam": lambda: v1.train.AdamOptimizer(1e-2),
    "adagrad": lambda: v1.train.AdagradOptimizer(0.1),
    "rmsprop": lambda: v1.train.RMSPropOptimizer(1e-2),
    "ftrl": lambda: v1.train.FtrlOptimizer(0.1),
}
TAGS = ["mlp/hidden/kernel", "mlp/hidden/bias", "mlp/out/kernel", "mlp/out/bias"]
STEPS, EVERY = 10, 3  # summary steps 0, 3, 6, 9


class Mlp:
    """An MLP 5-8-3 in its own tf.compat.v1 graph: placeholders, compute_gradients,
    apply_gradients with a global_step (inside `watch` when `watched`)."""

    def __init__(self, optimizer: str, watched: bool, histograms: bool = False,
                 finalize: bool = True):
        self.graph = tf.Graph()
        rng = np.random.default_rng(1)
        with self.graph.as_default():
            self.x = v1.placeholder(tf.float32, [None, 5], name="x")
            self.y = v1.placeholder(tf.int64, [None], name="y")
            with v1.variable_scope("mlp"):
                hidden = self._dense(self.x, 8, "hidden", rng, tf.nn.relu)
                logits = self._dense(hidden, 3, "out", rng)
            self.loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=logits)
            )
            self.global_step = v1.train.get_or_create_global_step()
            self.optimizer = OPTIMIZERS[optimizer]()
            grads_and_vars = self.optimizer.compute_gradients(self.loss)
            if watched:
                with wur_v1.watch(histograms=histograms) as self.wur:
                    self.train_op = self.optimizer.apply_gradients(
                        grads_and_vars, global_step=self.global_step
                    )
            else:
                self.train_op = self.optimizer.apply_gradients(
                    grads_and_vars, global_step=self.global_step
                )
            self.variables = v1.trainable_variables()
            self.init = v1.global_variables_initializer()
        if finalize:  # the training loop adds no op
            self.graph.finalize()

    @staticmethod
    def _dense(x, units, name, rng, activation=None):
        with v1.variable_scope(name):
            kernel = v1.get_variable(
                "kernel", initializer=rng.normal(0, 0.5, (x.shape[1], units)).astype(np.float32))
            bias = v1.get_variable("bias", initializer=rng.normal(0, 0.1, units).astype(np.float32))
        out = tf.matmul(x, kernel) + bias
        return activation(out) if activation else out

    def session(self) -> v1.Session:
        session = v1.Session(graph=self.graph, config=v1.ConfigProto(
            intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
        session.run(self.init)
        return session

    def feed(self, step: int) -> dict:
        rng = np.random.default_rng(100 + step)
        return {self.x: rng.normal(size=(16, 5)).astype(np.float32),
                self.y: rng.integers(0, 3, 16)}


def numpy_ratio(before: np.ndarray, after: np.ndarray) -> float:
    old, new = before.astype(np.float64), after.astype(np.float64)
    return float(np.linalg.norm(new - old) / np.linalg.norm(old))


def train_classic(name: str, logdir: str | None = None, histograms: bool = False) -> dict:
    """STEPS steps of the classic pattern; returns what numpy expects and what was fetched."""
    mlp = Mlp(name, watched=True, histograms=histograms)
    assert [w.tag for w in mlp.wur.watched] == TAGS
    with mlp.graph.as_default():  # (a FileWriter is made in graph mode)
        writer = v1.summary.FileWriter(logdir) if logdir else None
    expected, fetched, summaries = {}, {}, {}
    with mlp.session() as session:
        for step in range(STEPS):
            assert session.run(mlp.global_step) == step
            if step % EVERY == 0:
                before = session.run(mlp.variables)
                _, summary, got = session.run([mlp.wur.train_op, mlp.wur.summary, mlp.wur.ratios],
                                              mlp.feed(step))
                after = session.run(mlp.variables)
                expected[step] = {t: numpy_ratio(b, a) for t, b, a in zip(TAGS, before, after)}
                expected[step]["_before_after"] = (before, after)
                fetched[step] = got
                summaries[step] = summary
                if writer:
                    writer.add_summary(summary, step)
            else:
                session.run(mlp.train_op, mlp.feed(step))
        assert session.run(mlp.global_step) == STEPS
    if writer:
        writer.close()
    return {"expected": expected, "fetched": fetched, "summaries": summaries}


@pytest.fixture(scope="module")
def six_runs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tf1")
    runs = {name: train_classic(name, str(logdir / name)) for name in OPTIMIZERS}
    return str(logdir), runs


def _ratios_only(expected_step: dict) -> dict:
    return {t: r for t, r in expected_step.items() if t in TAGS}


def test_summary_steps_give_the_ratios_numpy_computes(six_runs):
    _, runs = six_runs
    for name, run in runs.items():
        for step, want in run["expected"].items():
            got = run["fetched"][step]
            assert sorted(got) == sorted(TAGS)
            for tag in TAGS:  # Δw in float32, as the project takes it
                np.testing.assert_allclose(got[tag], want[tag], rtol=5e-7, err_msg=f"{name} {tag}")
                assert np.isfinite(want[tag]) and want[tag] > 0


def test_the_summary_is_what_watch_writes(six_runs):
    """One packed value (protocol version 3): its tag, kind, data class, the layers in
    order with their shapes and descriptions, the float32 ratios and the skipped-step
    marker."""
    _, runs = six_runs
    summary = summary_pb2.Summary.FromString(runs["adam"]["summaries"][3])
    (value,) = summary.value
    assert value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
    assert value.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    content = metadata.parse_plugin_content(value.metadata.plugin_data.content)
    assert content["kind"] == metadata.KIND_PACKED_RATIOS and content["offset"] == 0
    assert content["version"] == metadata.PACKED_VERSION
    layers = metadata.packed_layers(content)
    assert value.tag == metadata.packed_tag(metadata.KIND_PACKED_RATIOS, layers, 0)
    assert [layer.tag for layer in layers] == TAGS
    for index, layer in enumerate(layers):
        # the variable's shape (the reader's layer kind): kernels [in, out], biases [out]
        units = 8 if "hidden" in TAGS[index] else 3
        assert layer.shape[-1] == units
        assert len(layer.shape) == (2 if TAGS[index].endswith("kernel") else 1)
        assert layer.description == metadata.ratio_description(layer.tag, layer.shape, "float32")
    array = tensor_util.make_ndarray(value.tensor)
    assert array.dtype == np.float32 and array.shape == (len(TAGS) + 1,)
    ratios, skipped = metadata.decode_packed_ratios(array, len(TAGS))
    for index, tag in enumerate(TAGS):
        assert ratios[0, index] == np.float32(runs["adam"]["fetched"][3][tag])
    assert array[-1] == 0 and not skipped[0]


def _read_export(server: TensorBoardServer, run: str) -> dict:
    status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=csv")
    assert status == 200, body[:300]
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == ["tag", "step", "wall_time", "ratio"]
    series: dict = {}
    for tag, step, _, ratio in rows[1:]:
        series.setdefault(tag, {})[int(step)] = float(ratio)
    return series


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_the_export_route_reads_the_ratios_of_all_six_optimizers(six_runs, load_fast):
    logdir, runs = six_runs
    with TensorBoardServer(logdir, load_fast) as server:
        server.wait_for(
            lambda d: len(d["runs"]) == len(OPTIMIZERS)
            and all(r["layers"] and r["last_step"] == 9 for r in d["runs"]),
            "/data/plugin/wur/runs",
        )
        for name, run in runs.items():
            series = _read_export(server, name)
            assert sorted(series) == sorted(TAGS), name  # no reserved tag among the rows
            for tag in TAGS:
                assert sorted(series[tag]) == [0, 3, 6, 9]
                for step, ratio in series[tag].items():  # the float32 stored, 9 digits exact
                    assert np.float32(ratio) == np.float32(run["fetched"][step][tag]), (
                        name, tag, step)
        assert "Traceback" not in server.output()


def _executed_nodes(mlp: Mlp, session, fetch) -> list[str]:
    options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
    run_metadata = v1.RunMetadata()
    session.run(fetch, mlp.feed(0), options=options, run_metadata=run_metadata)
    return sorted(
        node.node_name for device in run_metadata.step_stats.dev_stats for node in device.node_stats
    )


def _closure(graph: tf.Graph, op: tf.Operation) -> list[bytes]:
    """The NodeDefs of `op` and everything it depends on (inputs and control inputs)."""
    sub = v1.graph_util.extract_sub_graph(graph.as_graph_def(), [op.name])
    return sorted(node.SerializeToString(deterministic=True) for node in sub.node)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_plain_step_runs_exactly_the_ops_of_the_graph_without_watch(name):
    bare, watched = Mlp(name, watched=False), Mlp(name, watched=True, histograms=True)
    assert watched.train_op.name == bare.train_op.name
    assert _closure(watched.graph, watched.train_op) == _closure(bare.graph, bare.train_op)
    with bare.session() as b, watched.session() as w:
        executed = _executed_nodes(bare, b, bare.train_op)
        assert _executed_nodes(watched, w, watched.train_op) == executed
        assert not any("weight_update_ratios" in node for node in executed)
        # the summary step runs the update built again, not the optimizer's own train op
        summary_step = _executed_nodes(watched, w, [watched.wur.train_op, watched.wur.summary])
        assert watched.train_op.name not in summary_step
    # the graph's collections name only the optimizer's train op; no summary was collected
    assert watched.graph.get_collection(v1.GraphKeys.TRAIN_OP) == [watched.train_op]
    assert watched.graph.get_collection(v1.GraphKeys.SUMMARIES) == []
    assert [v.name for v in watched.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)] == \
        [v.name for v in bare.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)]


def _state(mlp: Mlp, session) -> dict:
    """Every global variable (weights, slots, beta powers, global_step) by name."""
    variables = mlp.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)
    return dict(zip([v.name for v in variables], session.run(variables)))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_summary_steps_and_plain_steps_make_the_same_updates(name):
    """Both kinds of step advance every piece of optimizer state once: after mixed steps the
    watched graph holds what the bare graph holds after as many plain steps (Adam's beta
    powers included), and global_step counts one per step."""
    bare, watched = Mlp(name, watched=False), Mlp(name, watched=True)
    with bare.session() as b, watched.session() as w:
        for step in range(7):
            b.run(bare.train_op, bare.feed(step))
            w.run(watched.wur.train_op if step in (0, 2, 3, 6) else watched.train_op,
                  watched.feed(step))
            assert w.run(watched.global_step) == b.run(bare.global_step) == step + 1
        want, got = _state(bare, b), _state(watched, w)
    assert sorted(got) == sorted(want)
    if name == "adam":
        np.testing.assert_allclose(got["beta1_power:0"], 0.9 ** 8, rtol=1e-6)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-9, err_msg=key)


def test_histograms_are_the_projects_counts_of_the_elementwise_ratios():
    run = train_classic("momentum", histograms=True)
    summary = summary_pb2.Summary.FromString(run["summaries"][6])
    before, after = run["expected"][6]["_before_after"]
    (_, value) = summary.value  # after the ratios
    content = metadata.parse_plugin_content(value.metadata.plugin_data.content)
    assert content["kind"] == metadata.KIND_PACKED_HISTOGRAMS and content["offset"] == 0
    assert value.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    assert [layer.tag for layer in metadata.packed_layers(content)] == TAGS
    stored = tensor_util.make_ndarray(value.tensor)
    assert stored.dtype == np.uint8  # varints
    counts = metadata.decode_packed_histograms(stored, len(TAGS))
    assert counts.dtype == np.int64 and counts.shape == (len(TAGS), metadata.NUM_BUCKETS)
    for tag, row, old, new in zip(TAGS, counts, before, after):
        elementwise = np.abs((new - old) / old)  # float32, as the project computes them
        np.testing.assert_array_equal(row, reference_buckets(elementwise), err_msg=tag)


def _one_step(gradients: dict, histograms: bool = False) -> tuple[dict, float, dict, dict]:
    """One summary step of SGD (lr 1) on variables {name: (initial value, gradient)}:
    ({tag: ratio in the summary}, its skipped-step marker, {tag: histogram counts in it},
    {name: (before, after)})."""
    with tf.Graph().as_default():
        variables = {n: v1.get_variable(n, initializer=np.asarray(init, np.float32))
                     for n, (init, _) in gradients.items()}
        optimizer = v1.train.GradientDescentOptimizer(1.0)
        with wur_v1.watch(histograms=histograms) as wur:
            optimizer.apply_gradients(
                [(tf.constant(g, tf.float32), variables[n]) for n, (_, g) in gradients.items()])
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            before = session.run(variables)
            summary = summary_pb2.Summary.FromString(session.run(wur.summary))
            after = session.run(variables)
    ratios, marker, counts = {}, None, {}
    for value in summary.value:  # each with its metadata, as TF1 summary ops write them
        content = metadata.parse_plugin_content(value.metadata.plugin_data.content)
        layers = [layer.tag for layer in metadata.packed_layers(content)]
        stored = tensor_util.make_ndarray(value.tensor)
        if content["kind"] == metadata.KIND_PACKED_RATIOS:
            got, skipped = metadata.decode_packed_ratios(stored, len(layers))
            ratios.update(zip(layers, got[0]))
            marker = float(stored[-1])
            assert marker == float(skipped[0])
        else:
            assert content["kind"] == metadata.KIND_PACKED_HISTOGRAMS
            counts.update(zip(layers, metadata.decode_packed_histograms(stored, len(layers))))
    assert sorted(counts) == (sorted(ratios) if histograms else [])
    return ratios, marker, counts, {n: (before[n], after[n]) for n in gradients}


def test_skipped_step_marker_is_1_when_nothing_moved():
    """Zero weights that do not move have ratio 0 (not NaN), as the contract says."""
    ratios, marker, _, _ = _one_step(
        {"w": (np.ones(3), np.zeros(3)), "z": (np.zeros(3), np.zeros(3))})
    assert ratios == {"w": 0.0, "z": 0.0} and marker == 1.0


def test_special_ratios_and_their_histogram_buckets():
    """0 where nothing moved, +inf where a zero weight moved, in the ratio and in the
    histogram's zero and inf buckets (in TF1 graphs `==` does not compare elementwise)."""
    ratios, marker, counts_of, moved = _one_step({
        "zero_moves": (np.zeros(4), np.ones(4)),
        "part": ([0.0, 1.0, 2.0, 0.0, 3.0], [1.0, 0.0, 1.0, 0.0, 1e-3]),
        "still": (np.ones(2), np.zeros(2)),
    }, histograms=True)
    assert ratios["zero_moves"] == np.inf and ratios["still"] == 0.0
    assert marker == 0.0
    for name, (old, new) in moved.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            elementwise = np.abs(np.where(new == old, 0.0, (new - old) / old))
        np.testing.assert_array_equal(counts_of[name], reference_buckets(elementwise),
                                      err_msg=name)
    counts = counts_of["part"]
    assert counts[metadata.ZERO_BUCKET] == 2 and counts[metadata.INF_BUCKET] == 1
    assert counts[metadata.NAN_BUCKET] == 0


def test_a_ratio_below_float32s_range_is_not_stored_as_0():
    ratios, _, _, _ = _one_step({"big": ([3e38, 1e-8], [0.0, 1e-8])})  # ratio 3e-47
    assert ratios["big"] == np.finfo(np.float32).smallest_subnormal


def test_var_list_selects_and_orders_the_watched_variables():
    mlp_graph = tf.Graph()
    with mlp_graph.as_default():
        a = v1.get_variable("a", initializer=np.ones(2, np.float32))
        b = v1.get_variable("b", initializer=np.ones(2, np.float32))
        loss = tf.reduce_sum(a * b)
        optimizer = v1.train.AdamOptimizer(0.1)
        with wur_v1.watch(var_list=[b]) as wur:
            optimizer.minimize(loss)  # minimize calls apply_gradients
    assert list(wur.ratios) == ["b"]


# --- errors ---------------------------------------------------------------------------


def test_eagerly_it_says_to_use_wur_summary_watch():
    with pytest.raises(RuntimeError, match=r"wur_summary\.watch"):
        with wur_v1.watch():
            pass


def test_inside_tf_function_it_says_to_use_wur_summary_watch():
    @tf.function
    def step():
        with wur_v1.watch():
            pass

    with pytest.raises(RuntimeError, match=r"wur_summary\.watch"):
        step()


def test_a_block_without_apply_gradients_is_an_error():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="no apply_gradients"):
            with wur_v1.watch():
                v1.get_variable("w", initializer=1.0)


def test_its_tensors_exist_after_the_block_only_and_blocks_do_not_nest():
    with tf.Graph().as_default():
        w = v1.get_variable("w", initializer=np.ones(2, np.float32))
        optimizer = v1.train.GradientDescentOptimizer(0.1)
        with wur_v1.watch() as wur:
            with pytest.raises(RuntimeError, match="once the"):
                wur.train_op
            with pytest.raises(RuntimeError, match="nested"):
                with wur_v1.watch():
                    pass
            optimizer.apply_gradients([(tf.ones(2), w)])
        assert isinstance(wur.train_op, tf.Operation)


def test_an_error_in_the_block_propagates_and_unwraps_apply_gradients():
    original = v1.train.Optimizer.__dict__["apply_gradients"]
    with tf.Graph().as_default():
        with pytest.raises(KeyError):
            with wur_v1.watch():
                raise KeyError("mine")
    assert v1.train.Optimizer.__dict__["apply_gradients"] is original
    assert all(
        "apply_gradients" not in cls.__dict__ or not hasattr(cls.__dict__["apply_gradients"], "__wrapped__")
        for cls in [v1.train.Optimizer, *v1.train.Optimizer.__subclasses__()]
    )


# --- the hook -------------------------------------------------------------------------


def _reference_trajectory(name: str, steps: int) -> list[list[np.ndarray]]:
    """The variables before each of `steps` plain steps, and after the last."""
    mlp = Mlp(name, watched=False)
    states = []
    with mlp.session() as session:
        for step in range(steps):
            states.append(session.run(mlp.variables))
            session.run(mlp.train_op, mlp.feed(step))
        states.append(session.run(mlp.variables))
    return states


def test_the_hook_logs_the_ratios_of_the_users_own_train_op(tmp_path):
    """MonitoredTrainingSession with the hook, the user's loop unchanged (it runs train_op;
    one run that does not train comes at a due step and logs nothing)."""
    mlp = Mlp("adam", watched=True, histograms=True, finalize=False)
    logdir = str(tmp_path / "hook")
    hook = wur_v1.WeightUpdateRatioHook(mlp.wur, logdir, every_n_steps=4)
    with mlp.graph.as_default():
        with v1.train.MonitoredTrainingSession(
            hooks=[hook], save_summaries_steps=None, save_checkpoint_secs=None,
            log_step_count_steps=None,
            config=v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1),
        ) as session:
            for step in range(10):
                if step == 4:
                    session.run(mlp.loss, mlp.feed(step))  # not a training step
                session.run(mlp.train_op, mlp.feed(step))
    states = _reference_trajectory("adam", 10)
    series = read_packed(logdir)  # each tag's metadata kept in its first event only
    assert sorted(series.ratios) == sorted(series.histograms) == sorted(TAGS)
    for index, tag in enumerate(TAGS):
        points = series.ratios[tag]
        assert [step for step, _ in points] == [0, 4, 8]
        for step, value in points:
            want = numpy_ratio(states[step][index], states[step + 1][index])
            np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=f"{tag} {step}")
        assert [s for s, _ in series.histograms[tag]] == [0, 4, 8]
    assert [marker for _, marker in series.skipped] == [0.0, 0.0, 0.0]


# --- reference variables --------------------------------------------------------------


def check_reference_variables() -> None:
    """Run in a process where nothing has run on TensorFlow, after
    tf.compat.v1.disable_v2_behavior(): the variables are reference variables, and the
    ratios and updates are right for every optimizer."""
    assert not tf.executing_eagerly()
    for name in OPTIMIZERS:
        mlp = Mlp(name, watched=True, histograms=True)
        assert all(v.op.type == "VariableV2" for v in mlp.variables), name
        run = train_classic(name, histograms=True)
        for step, want in run["expected"].items():
            for tag in TAGS:
                np.testing.assert_allclose(run["fetched"][step][tag], want[tag], rtol=5e-7,
                                           err_msg=f"{name} {tag} {step}")
        test_summary_steps_and_plain_steps_make_the_same_updates(name)
        bare = Mlp(name, watched=False)
        assert _closure(mlp.graph, mlp.train_op) == _closure(bare.graph, bare.train_op)
    test_special_ratios_and_their_histogram_buckets()
    with tempfile.TemporaryDirectory() as logdir:
        test_the_hook_logs_the_ratios_of_the_users_own_train_op(pathlib.Path(logdir))
    print("reference variables OK")


def test_reference_variables_under_disable_v2_behavior(tmp_path):
    """In a process forked from the preloaded fork server (support/forked.py), in which
    nothing has run on TensorFlow yet."""
    script = tmp_path / "reference_variables.py"
    script.write_text(
        "import sys, tensorflow as tf; tf.compat.v1.disable_v2_behavior(); "
        f"sys.path[:0] = {[os.path.dirname(__file__), SUPPORT]!r}; "
        "import test_compat_v1; test_compat_v1.check_reference_variables()\n"
    )
    code, stdout, stderr = forked.run_script([str(script)], timeout=600)
    assert code == 0, stdout[-3000:] + stderr[-5000:]
    assert "reference variables OK" in stdout

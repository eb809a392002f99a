import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import (
    assert_ratios_close,
    ratio_series,
    read_events,
    read_packed,
    reference_buckets,
    reference_ratio,
)
from keras_helpers import OPTIMIZERS, mixed_model_and_data
from tb_wur_plugin import metadata, wur_summary
from tb_wur_plugin.tf_write import ratios, watch
from tb_wur_plugin.tf_write.variables import _variable_path, watched_variables


def _train_with_watch(model, optimizer, x, y, logdir, steps, use_function, histograms=False):
    """Train `steps` steps under watch; return {(path, step): reference ratio} and grads."""

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        with wur_summary.watch(
            model.trainable_variables, step=optimizer.iterations, histograms=histograms
        ):
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return [tf.convert_to_tensor(g) for g in grads]

    step_fn = tf.function(train_step) if use_function else train_step
    expected, gradients = {}, {}
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for step in range(steps):
            before = [v.numpy() for v in model.trainable_variables]
            grads = step_fn(x, y)
            for v, old, g in zip(model.trainable_variables, before, grads):
                expected[(v.path, step)] = reference_ratio(old, v.numpy())
                gradients[(v.path, step)] = (old, g.numpy(), v.numpy())
    writer.close()
    return expected, gradients


def _logged(logdir):
    return {(tag, step): r for tag, points in ratio_series(logdir).items() for step, r in points.items()}


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_watch_matches_numpy_reference(logdir, name, use_function):
    model, x, y = mixed_model_and_data()
    expected, gradients = _train_with_watch(
        model, OPTIMIZERS[name](), x, y, logdir, steps=3, use_function=use_function
    )
    logged = _logged(logdir)
    assert_ratios_close(logged, expected, rtol=5e-7)
    paths = {v.path for v in model.trainable_variables}
    assert {tag for tag, _ in logged} == paths  # tags are the variable paths
    assert any("embed" in p for p in paths) and any("lstm" in p for p in paths)
    assert not any("moving_mean" in p for p in paths)  # non-trainable: not watched
    if name == "sgd":  # Δw = -lr·g, so the ratio is lr·‖g‖/‖w‖ ...
        for key, (old, grad, new) in gradients.items():
            weight = np.linalg.norm(old.astype(np.float64))
            if weight == 0:
                assert logged[key] == np.inf
                continue
            lr = np.float32(0.1)
            want = float(lr) * np.linalg.norm(grad.astype(np.float64)) / weight
            # ... up to the float32 rounding of lr·g and of w - lr·g: an ulp each at most
            ulps = np.spacing(new).astype(np.float64) + np.spacing(lr * grad).astype(np.float64)
            rounding = np.linalg.norm(ulps) / weight
            # (and the float32 sums and storage of the ratio)
            assert abs(logged[key] - want) <= rounding + 5e-7 * want, (key, logged[key], want)


def test_zero_initialised_biases_start_at_inf(logdir):
    model, x, y = mixed_model_and_data()
    expected, _ = _train_with_watch(model, OPTIMIZERS["adam"](), x, y, logdir, 2, False)
    logged = _logged(logdir)
    assert logged[("head/bias", 0)] == np.inf
    assert np.isfinite(logged[("head/bias", 1)])


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "tf.function"])
def test_watch_marks_steps_where_nothing_changed(logdir, use_function):
    """A LossScaleOptimizer skips the update on non-finite gradients: ratios 0, marker 1."""
    variables = [tf.Variable(np.ones((3, 2), np.float32)), tf.Variable(np.ones(2, np.float32))]
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))

    def step(grads):
        with wur_summary.watch(variables, step=optimizer.iterations):
            optimizer.apply(grads, variables)

    step_fn = tf.function(step) if use_function else step
    finite = [tf.ones((3, 2)), tf.ones(2)]
    with tf.summary.create_file_writer(logdir).as_default():
        step_fn(finite)  # step 0: applied
        step_fn([tf.fill((3, 2), np.inf), tf.ones(2)])  # step 1: skipped, iterations stays 1
        step_fn(finite)  # step 1 again: applied
    run = read_packed(logdir)
    assert run.skipped == [(0, 0.0), (1, 1.0), (1, 0.0)]
    for points in ratio_series(logdir).values():
        assert points[0] > 0  # the last point written at step 1 is the applied retry
    logged = [[float(v) for s, v in run.ratios[tag]] for tag in run.ratios]
    assert len(logged) == 2
    assert [ratios_of_tag[1] for ratios_of_tag in logged] == [0.0, 0.0]


def test_watch_histograms_count_every_element(logdir):
    model, x, y = mixed_model_and_data()
    _train_with_watch(model, OPTIMIZERS["adam"](), x, y, logdir, 2, True, histograms=True)
    histograms = read_packed(logdir).histograms
    assert sorted(histograms) == sorted(v.path for v in model.trainable_variables)
    for v in model.trainable_variables:
        points = histograms[v.path]
        assert [step for step, _ in points] == [0, 1]
        for step, counts in points:
            assert counts.sum() == np.prod(v.shape)
    bias = histograms["head/bias"]
    assert bias[0][1][metadata.INF_BUCKET] == 3  # every element of a zero bias moved


def test_update_ratios_special_values():
    def ratio(before, after):
        return ratios.update_ratios([tf.constant(before)], [tf.constant(after)]).numpy()[0]

    assert ratio([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert ratio([0.0, 0.0], [0.0, 1e-3]) == np.inf
    assert np.isnan(ratio([np.nan, 1.0], [np.nan, 1.0]))
    assert np.isnan(ratio([1.0, 1.0], [np.inf, 1.0]))
    assert ratio([3.0, 4.0], [3.0, 4.0]) == 0.0
    assert ratio([3.0, 4.0], [3.0, 4.5]) == pytest.approx(0.1)
    # float32 extremes: squares overflow float32, not the float64 sums
    assert ratio(np.float32([3e30, 4e30]), np.float32([3e30, 4.5e30])) == pytest.approx(0.1)
    # ... and underflow them: both are taken again in float64
    assert ratio(np.float32([3e-25, 4e-25]), np.float32([3e-25, 4.5e-25])) == pytest.approx(0.1)
    assert ratio(np.float32([1.0, 1.0]), np.float32([1.0, 1.0 + 2**-23])) == pytest.approx(
        2**-23 / np.sqrt(2), rel=1e-6
    )
    assert ratio(np.float16([3.0, 4.0]), np.float16([3.0, 4.5])) == pytest.approx(0.1)


@pytest.mark.parametrize("shape", [(70_001,), (300, 700), (3, 5, 7, 1_000)])
def test_update_ratios_of_large_constant_variables(shape):
    """Equal elements are the worst case of a float32 sum of squares (its rounding errors
    add up: 3.5e-6 over 4e6 elements in one `tf.nn.l2_loss`)."""
    before = np.full(shape, 0.1, np.float32)
    after = np.full(shape, 0.1 + 3e-4, np.float32)
    expected = reference_ratio(before, after)
    (got,) = ratios.update_ratios([tf.constant(before)], [tf.constant(after)]).numpy()
    assert got == pytest.approx(expected, rel=2e-7)
    (got,) = ratios.update_ratios(
        [tf.constant(before)], [tf.constant(before)], [tf.constant(after - before)]
    ).numpy()
    assert got == pytest.approx(expected, rel=2e-7)


def test_update_ratios_keep_order_across_stacks_dtypes_and_large_variables():
    rng = np.random.default_rng(3)
    shapes = [(4, 3), (3,), (4, 3), (), (70_000,), (3,), (2, 2, 2), (4, 3)]
    dtypes = [np.float32, np.float32, np.float64, np.float32, np.float32, np.float16,
              np.float32, np.float32]
    before = [rng.normal(size=s).astype(d) for s, d in zip(shapes, dtypes)]
    after = [(b + rng.normal(size=b.shape) * 10.0 ** -rng.integers(1, 6)).astype(b.dtype)
             for b in before]
    got = ratios.update_ratios([tf.constant(b) for b in before], [tf.constant(a) for a in after])
    expected = [reference_ratio(b, a) for b, a in zip(before, after)]
    np.testing.assert_allclose(got.numpy(), expected, rtol=3e-7)


def test_many_variables_of_one_shape_make_bounded_stacks_in_order():
    """100 kernels of 64 × 64 (M3's): stacks of at most STACK_ELEMENTS elements, in the
    variables' order, each ratio its own; a variable larger than a stack alone."""
    rng = np.random.default_rng(5)
    shapes = [(64, 64)] * 100 + [(64,)] * 100 + [(200, 300)] * 3
    before = [rng.normal(size=s).astype(np.float32) for s in shapes]
    after = [b + (rng.normal(size=b.shape) * 1e-3).astype(np.float32) for b in before]
    stacks, large = ratios.partition([tf.constant(b) for b in before])
    assert stacks[:3] == [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]
    assert stacks[12] == [96, 97, 98, 99] and stacks[13] == list(range(100, 200))
    assert stacks[14:] == [[200], [201], [202]] and large == []
    assert all(len(stack) * before[stack[0]].size <= ratios.STACK_ELEMENTS
               for stack in stacks if len(stack) > 1)
    got = ratios.update_ratios([tf.constant(b) for b in before], [tf.constant(a) for a in after])
    expected = [reference_ratio(b, a) for b, a in zip(before, after)]
    np.testing.assert_allclose(got.numpy(), expected, rtol=3e-7)
    counts = ratios.histogram_counts(
        [tf.constant(b) for b in before], [tf.constant(a) for a in after]
    ).numpy()
    for b, a, got in zip(before, after, counts):
        want = reference_buckets(np.abs(a.astype(np.float64) - b) / np.abs(b))
        assert got.sum() == b.size and np.abs(got - want).sum() <= 2


@pytest.mark.parametrize("chunk", [1 << 20, 999], ids=["one-chunk", "chunks"])
def test_histogram_counts_keep_order_across_stacks_and_large_variables(monkeypatch, chunk):
    monkeypatch.setattr(ratios, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(4)
    shapes = [(4, 3), (70_000,), (3,), (4, 3), (3,)]
    before = [rng.normal(size=s).astype(np.float32) for s in shapes]
    after = [b + (rng.normal(size=b.shape) * 1e-3).astype(np.float32) for b in before]
    after[2] = before[2]  # nothing moved
    counts = ratios.histogram_counts(
        [tf.constant(b) for b in before], [tf.constant(a) for a in after]
    ).numpy()
    for b, a, got in zip(before, after, counts):
        want = reference_buckets(np.abs(a.astype(np.float64) - b) / np.abs(b))
        assert got.sum() == b.size
        assert np.abs(got - want).sum() <= 2  # float32 vs float64 ratios at an edge


def test_elementwise_ratios_conventions():
    got = ratios.elementwise_ratios(
        tf.constant([0.0, 0.0, 2.0, 2.0, np.nan]), tf.constant([0.0, 1.0, 2.0, 3.0, 1.0])
    ).numpy()
    np.testing.assert_array_equal(got[:4], [0.0, np.inf, 0.0, 0.5])
    assert np.isnan(got[4])


class TwoSameNames(keras.layers.Layer):
    def build(self, input_shape):
        self.first = self.add_weight(shape=(2,), name="w")
        self.second = self.add_weight(shape=(2,), name="w")
        self.count = self.add_weight(shape=(), name="n", dtype="int32", trainable=False)
        self.frozen = self.add_weight(shape=(2,), name="f", trainable=False)

    def call(self, x):
        return x * self.first + self.second


def test_tags_are_paths_and_duplicates_get_distinct_tags():
    layer = TwoSameNames(name="twin")
    layer.build((2,))
    assert [v.path for v in layer.weights[:2]] == ["twin/w", "twin/w"]
    watched = watched_variables(layer.weights)
    assert [w.tag for w in watched] == ["twin/w", "twin/w_1"]  # int and frozen skipped

    plain = [tf.Variable(1.0, name="v"), tf.Variable(2.0, name="v"), tf.Variable(3.0, name="v_1")]
    assert [w.tag for w in watched_variables(plain)] == ["v", "v_2", "v_1"]
    assert [w.tag for w in watched_variables(plain[0])] == ["v"]
    assert len(watched_variables(plain + plain)) == 3


def test_watch_rejects_what_is_not_a_variable(writer):
    with pytest.raises(TypeError, match="takes tf.Variable or keras.Variable"):
        with wur_summary.watch([tf.constant(1.0)], step=0):
            pass
    with pytest.raises(TypeError, match="iterable of variables"):
        with wur_summary.watch(3, step=0):
            pass
    with pytest.raises(ValueError, match="reserved"):
        watched_variables([tf.Variable(1.0, name="_wur/x")])
    with writer.as_default(), pytest.raises(ValueError, match="no step set"):
        with wur_summary.watch([tf.Variable(1.0)]):
            pass


def _counting(fn, counter):
    """`fn` plus a side effect that counts its executions, also inside graphs."""

    def wrapped(*args, **kwargs):
        result = fn(*args, **kwargs)
        tick = tf.py_function(lambda: counter.append(1) or 0, [], tf.int32)
        with tf.control_dependencies([tick]):
            return tf.nest.map_structure(tf.identity, result)

    return wrapped


def _sgd_setup():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    x, y = tf.ones([5, 4]), tf.zeros([5, 2])

    def train_step(watched):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        if watched:
            with wur_summary.watch(model.trainable_variables, step=optimizer.iterations):
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        else:
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    return optimizer, train_step


def test_not_recording_eagerly_runs_no_ratio_code(logdir, writer, monkeypatch):
    counter = []
    monkeypatch.setattr(watch, "snapshot", _counting(watch.snapshot, counter))
    monkeypatch.setattr(watch, "update_ratios", _counting(watch.update_ratios, counter))
    _, train_step = _sgd_setup()
    train_step(watched=True)  # no default writer
    with writer.as_default(), tf.summary.record_if(False):
        train_step(watched=True)
    writer.flush()
    assert counter == [] and read_events(logdir) == {}


def test_not_recording_in_graph_runs_no_ratio_code(logdir, writer, monkeypatch):
    counter = []
    monkeypatch.setattr(watch, "snapshot", _counting(watch.snapshot, counter))
    monkeypatch.setattr(watch, "update_ratios", _counting(watch.update_ratios, counter))
    optimizer, train_step = _sgd_setup()
    step_fn = tf.function(lambda: train_step(watched=True))
    with writer.as_default(), tf.summary.record_if(lambda: optimizer.iterations % 3 == 0):
        runs = []
        for _ in range(6):
            before = len(counter)
            step_fn()
            runs.append(len(counter) - before)
    writer.flush()
    assert runs == [2, 0, 0, 2, 0, 0]  # snapshot and ratios only at steps 0 and 3
    assert {s for series in ratio_series(logdir).values() for s in series} == {0, 3}


def test_watch_under_in_graph_record_if_matches_numpy_reference(logdir):
    """The conditional snapshot (stacked per shape, large variables as they are)."""
    model, x, y = mixed_model_and_data()
    large = tf.Variable(np.linspace(1.0, 2.0, 70_000, dtype=np.float32), name="large")
    variables = [*model.trainable_variables, large]
    optimizer = OPTIMIZERS["adam"]()

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            loss += tf.reduce_sum(tf.square(large - 3.0))
        grads = tape.gradient(loss, variables)
        with wur_summary.watch(variables, step=optimizer.iterations, histograms=True):
            optimizer.apply_gradients(zip(grads, variables))

    expected = {}
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default(), tf.summary.record_if(lambda: optimizer.iterations % 2 == 0):
        for step in range(4):
            before = [v.numpy() for v in variables]
            train_step()
            if step % 2 == 0:
                for v, old in zip(variables, before):
                    expected[(_variable_path(v), step)] = reference_ratio(old, v.numpy())
    writer.close()
    assert_ratios_close(_logged(logdir), expected, rtol=5e-7)
    large_counts = read_packed(logdir).histograms["large"]
    assert [s for s, _ in large_counts] == [0, 2]
    assert all(c.sum() == 70_000 for _, c in large_counts)


def test_eager_watch_writes_to_each_default_writer_with_one_trace(tmp_path):
    variables = [tf.Variable(np.ones((3, 2), np.float32), name="w")]
    optimizer = keras.optimizers.SGD(0.1)
    dirs = [str(tmp_path / name) for name in ("a", "b", "c")]
    traces = watch._write_ratios_traced.experimental_get_tracing_count()
    for step, logdir in enumerate(dirs + dirs[:1]):
        writer = tf.summary.create_file_writer(logdir)
        with writer.as_default(), wur_summary.watch(variables, step=step):
            optimizer.apply([tf.ones((3, 2))], variables)
        writer.close()
    assert watch._write_ratios_traced.experimental_get_tracing_count() - traces <= 1
    assert [sorted(ratio_series(d)["w"]) for d in dirs] == [[0, 3], [1], [2]]


def test_eager_watch_of_variables_alike_writes_each_ones_own_ratios(tmp_path):
    # Variables of the same names, shapes and dtypes, watched in turn, some of them freed
    # and made again in between: each record, through the concrete function it calls,
    # computes the ratios of its own variables.
    def make(seed):
        rng = np.random.default_rng(seed)
        return [tf.Variable(rng.normal(size=(4, 3)).astype(np.float32), name="w"),
                tf.Variable(rng.normal(size=(3,)).astype(np.float32), name="b")]

    sets = {"a": make(0), "b": make(1)}
    writer = tf.summary.create_file_writer(str(tmp_path))
    expected = {}
    with writer.as_default():
        for step, name in enumerate(["a", "b", "a", "c", "b", "c", "a"]):
            if name == "c":  # a fresh set each time, the previous one freed
                sets["c"] = make(10 + step)
            variables = sets[name]
            update = [np.full(v.shape, 0.01 * (step + 1), np.float32) for v in variables]
            before = [v.numpy() for v in variables]
            with wur_summary.watch(variables, step=step):
                for v, u in zip(variables, update):
                    v.assign_add(u)
            for path, old, v in zip(("w", "b"), before, variables):
                expected[(path, step)] = reference_ratio(old, v.numpy())
    writer.close()
    assert_ratios_close(_logged(str(tmp_path)), expected, rtol=5e-7)


def _graph_structure(concrete_function) -> list[tuple]:
    """Each op's type, inputs and control inputs (by position), in creation order: equal for
    two graphs that differ only in names."""
    ops = concrete_function.graph.get_operations()
    position = {op.name: i for i, op in enumerate(ops)}
    return [
        (
            op.type,
            [(position[t.op.name], t.value_index) for t in op.inputs],
            sorted(position[c.name] for c in op.control_inputs),
        )
        for op in ops
    ]


def test_recommended_pattern_non_logged_steps_are_the_bare_step(logdir):
    """Two tf.functions of one step body: one traced and called under the writer on the
    logged steps, one traced without a writer for all other steps, where watch adds no op."""
    optimizer, train_step = _sgd_setup()
    bare = tf.function(lambda: train_step(watched=False))
    plain_step = tf.function(lambda: train_step(watched=True))
    logged_step = tf.function(lambda: train_step(watched=True))
    writer = tf.summary.create_file_writer(logdir)
    every = 4
    for step in range(10):
        if step % every == 0:
            with writer.as_default():
                logged_step()
        else:
            plain_step()
    writer.close()
    assert _graph_structure(plain_step.get_concrete_function()) == _graph_structure(
        bare.get_concrete_function()
    )
    assert plain_step.experimental_get_tracing_count() == 1
    logged = ratio_series(logdir)
    assert len(logged) == 4 and all(sorted(s) == [0, 4, 8] for s in logged.values())


def test_watch_writes_model_order_and_shapes_in_metadata(logdir, writer):
    variables = [tf.Variable(tf.ones([2, 3]), name="b"), tf.Variable(tf.ones([4]), name="a")]
    with writer.as_default(), wur_summary.watch(variables, step=0):
        for v in variables:
            v.assign_add(tf.ones_like(v))
    writer.flush()
    layers = read_packed(logdir).layers
    assert [layers[t][0] for t in ("b", "a")] == [0, 1]
    assert [layers[t][1].shape for t in ("b", "a")] == [(2, 3), (4,)]


def test_watch_of_nothing_trainable_warns_and_writes_no_ratio(logdir, writer, recwarn):
    """A model whose layers are all frozen, no variable, or only integer variables: a
    `UserWarning` naming the problem instead of a silently empty run (issue 23); no warning
    when nothing would be recorded anyway."""
    frozen = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    frozen.trainable = False
    counter = tf.Variable(0, dtype=tf.int64)
    with wur_summary.watch(frozen.trainable_variables, step=0):  # no default writer
        pass
    assert not recwarn.list
    for variables in (frozen.trainable_variables, [], [counter], frozen.weights):
        with pytest.warns(UserWarning, match="none of the variables is a trainable") as caught:
            with writer.as_default(), wur_summary.watch(variables, step=0):
                counter.assign_add(1)
        assert len(caught) == 1

    @tf.function
    def step():
        with wur_summary.watch(frozen.trainable_variables, step=counter):
            counter.assign_add(1)

    with writer.as_default(), pytest.warns(UserWarning, match="trainable") as caught:
        step()
        step()  # traced once: warned once
    assert len(caught) == 1
    writer.flush()
    assert ratio_series(logdir) == {}

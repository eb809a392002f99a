import os
import threading
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import (
    assert_ratios_close,
    ratio_series,
    read_events,
    read_packed,
    read_raw_events,
    reference_ratio,
)
from keras_helpers import (
    OPTIMIZERS,
    ReferenceRatios,
    mixed_model_and_data,
    record_every_step,
)
from tb_wur_plugin import metadata
from tb_wur_plugin.keras import WeightUpdateRatioCallback


def _logged(logdir):
    return {
        (tag, step): r
        for tag, points in ratio_series(os.path.join(logdir, "train")).items()
        for step, r in points.items()
    }


def _fit(model, x, y, logdir, every, epochs=2, batch_size=4, **callback_args):
    reference = ReferenceRatios(every)
    callback = WeightUpdateRatioCallback(logdir, update_freq=every, **callback_args)
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[reference, callback])
    return reference


@pytest.mark.parametrize(
    "name,run_eagerly",
    [("sgd", False), ("momentum", False), ("adam", False), ("adamw", False),
     ("sgd", True), ("adamw", True)],
)
def test_callback_matches_numpy_reference(logdir, name, run_eagerly):
    model, x, y = mixed_model_and_data()
    model.compile(optimizer=OPTIMIZERS[name](), loss="mse", run_eagerly=run_eagerly)
    reference = _fit(model, x, y, logdir, every=3)  # 16 samples / 4 = 4 steps per epoch
    logged = _logged(logdir)
    assert_ratios_close(logged, reference.expected, rtol=5e-7)
    assert {step for _, step in logged} == {0, 3, 6}
    assert {tag for tag, _ in logged} == {v.path for v in model.trainable_variables}


def test_callback_logs_learning_rate_and_histograms_at_logged_steps(logdir):
    model, x, y = mixed_model_and_data()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    _fit(model, x, y, logdir, every=2, histograms=True)
    events = read_events(os.path.join(logdir, "train"))
    rates = {step: float(v) for step, v, _ in events[metadata.LEARNING_RATE_TAG]}
    assert rates == pytest.approx({0: 0.1, 2: 0.025, 4: 0.00625, 6: 0.0015625})
    run = read_packed(os.path.join(logdir, "train"))
    # the ratios and histograms as packed series (one tag each), the learning rate per tag
    assert set(read_raw_events(os.path.join(logdir, "train"))) == {
        metadata.LEARNING_RATE_TAG, *run.contents}
    assert sorted(c["kind"] for c in run.contents.values()) == sorted(
        [metadata.KIND_PACKED_RATIOS, metadata.KIND_PACKED_HISTOGRAMS])
    assert sorted(run.histograms) == sorted(v.path for v in model.trainable_variables)
    for v in model.trainable_variables:
        points = run.histograms[v.path]
        assert [s for s, _ in points] == [0, 2, 4, 6]
        assert all(counts.sum() == np.prod(v.shape) for _, counts in points)


def test_steps_continue_across_fit_calls(logdir):
    model, x, y = mixed_model_and_data()
    model.compile(optimizer="adam", loss="mse")
    _fit(model, x, y, logdir, every=3, epochs=1)
    _fit(model, x, y, logdir, every=3, epochs=1)
    assert {step for _, step in _logged(logdir)} == {0, 3, 6}


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_loss_scale_optimizer_logs_float32_weights_and_marks_skipped_steps(
    logdir, mixed_float16
):
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1, dtype="float32")]
    )
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2))
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    x[:4] = np.inf  # the first batch has non-finite gradients: the update is skipped
    x[12:16] = np.inf  # so is the fourth, at step 2 (a logged step)
    y = np.ones((32, 1), "float32")
    reference = _fit(model, x, y, logdir, every=2, epochs=1)
    assert reference.skipped == [0, 2]
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    # Steps 0 and 2 are logged as skipped: ratio 0 for every variable and the marker set.
    # Their retries (the next updates, again steps 0 and 2) are not logged; step 4 is.
    marker = dict(read_packed(os.path.join(logdir, "train")).skipped)
    assert marker == {0: 1.0, 2: 1.0, 4: 0.0}
    logged = _logged(logdir)
    assert {step for _, step in logged} == {0, 2, 4}
    assert all(r == 0 for (_, step), r in logged.items() if step < 4)
    at_4 = {key: r for key, r in reference.expected.items() if key[1] == 4}
    assert len(at_4) == len(model.trainable_variables)
    assert_ratios_close({k: r for k, r in logged.items() if k[1] == 4}, at_4, rtol=5e-7)


class LazyNet(keras.Model):
    """Creates its variables at its first call."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(5, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


def test_variables_created_at_the_first_step_are_logged_from_the_next_logged_step(logdir):
    model = LazyNet()
    assert not model.trainable_variables
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    with pytest.warns(UserWarning, match="no trainable weights before step 0"):
        reference = _fit(model, x, np.zeros((16, 1), "float32"), logdir, every=2, epochs=1)
    logged = _logged(logdir)
    assert {(v.path, 2) for v in model.trainable_variables} == set(logged)
    assert_ratios_close(logged, reference.expected, rtol=5e-7)


def test_a_subclassed_model_built_before_fit_is_logged_from_step_0(logdir):
    model = LazyNet()
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    model(x[:1])
    reference = _fit(model, x, np.zeros((16, 1), "float32"), logdir, every=2, epochs=1)
    logged = _logged(logdir)
    assert {step for _, step in logged} == {0, 2} and len(logged) == 8
    assert_ratios_close(logged, reference.expected, rtol=5e-7)


def test_a_model_with_no_trainable_weights_warns_once_and_logs_no_ratio(logdir):
    """All layers frozen: one UserWarning saying so (not the unbuilt model's advice) over
    every logged step of the fit, instead of a silently empty run (issue 23)."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.trainable = False
    model.compile(optimizer="sgd", loss="mse")
    callback = WeightUpdateRatioCallback(logdir, update_freq=1)
    with pytest.warns(UserWarning) as caught:
        model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), batch_size=4,
                  epochs=2, verbose=0, callbacks=[callback])
    ours = [str(w.message) for w in caught if "WeightUpdateRatioCallback" in str(w.message)]
    assert len(ours) == 1 and "no trainable weights (all its layers are frozen" in ours[0]
    assert ratio_series(os.path.join(logdir, "train")) == {}


@pytest.mark.parametrize("every,run_eagerly", [
    (1, False), (2, False), (3, False), (4, False), (7, False), (2, True)])
def test_steps_per_execution_logs_the_single_update_of_each_logged_step(
    logdir, every, run_eagerly
):
    """steps_per_execution=3: Keras runs 3 steps per call (and per batch begin); each logged
    step's ratios are those of its own update, against numpy on the weights copied inside
    the train function around every step; every `every`-th step is logged, wherever it
    falls in a call; the learning rate is the one of that step."""
    model, x, y = mixed_model_and_data()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1, decay_rate=0.9)
    model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse",
                  steps_per_execution=3, jit_compile=False, run_eagerly=run_eagerly)
    records = record_every_step(model)
    callback = WeightUpdateRatioCallback(logdir, update_freq=every, histograms=True)
    # 16 samples / 2 = 8 steps per epoch, calls of 3, 3 and 2 steps; 24 steps in all
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert int(model.optimizer.iterations.numpy()) == 24 and sorted(records) == list(range(24))
    logged_steps = list(range(0, 24, every))
    expected = {
        (path, step): reference_ratio(records[step][0][path], records[step][1][path])
        for step in logged_steps for path in records[step][0]
    }
    assert_ratios_close(_logged(logdir), expected, rtol=5e-7)
    events = read_events(os.path.join(logdir, "train"))
    rates = {step: float(v) for step, v, _ in events[metadata.LEARNING_RATE_TAG]}
    assert rates == pytest.approx({s: 0.05 * 0.9 ** s for s in logged_steps}, rel=1e-6)
    for path in records[0][0]:
        counts = {s: np.asarray(c).tolist() for s, c, _ in events[metadata.histogram_tag(path)]}
        assert counts == {
            step: _bucket_counts(records[step][0][path], records[step][1][path])
            for step in logged_steps
        }, path


def _bucket_counts(before, after):
    """numpy's histogram counts of the elementwise ratios |Δw / w| (0 where w did not move)."""
    from tb_wur_plugin.arrays import numpy_math

    delta = after - before  # in the variable's dtype, as on the device
    with np.errstate(divide="ignore", invalid="ignore"):
        elementwise = np.abs(np.where(delta == 0, 0, delta / before))
    return numpy_math.bucket_counts(elementwise.astype(before.dtype)).tolist()


def test_steps_per_execution_under_xla_writes_the_ratios_of_one_step_per_execution(tmp_path):
    """jit_compile=True, a LossScaleOptimizer, every step logged (3 slots), spectral: the
    ratios written with steps_per_execution=3 are those written with 1, to the bit (XLA
    computes the same training either way); the spectral ratios within 1e-5."""
    runs = {}
    for k in (1, 3):
        keras.backend.clear_session()  # the same layer names, hence tags, in both
        model, x, y = _small_model_and_data()
        model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-2)),
                      loss="mse", steps_per_execution=k, jit_compile=True)
        logdir = str(tmp_path / f"spe{k}")
        model.fit(x, y, batch_size=2, epochs=2, verbose=0, shuffle=False,
                  callbacks=[WeightUpdateRatioCallback(logdir, update_freq=1, spectral=True)])
        runs[k] = read_events(os.path.join(logdir, "train"))
    assert sorted(runs[1]) == sorted(runs[3])
    for tag, points in runs[1].items():
        other = runs[3][tag]
        assert [s for s, _, _ in points] == [s for s, _, _ in other] == list(range(16)), tag
        if tag.startswith("_wur/spectral/"):
            # Lanczos warm-started from another logged step (each slot keeps its own vectors)
            np.testing.assert_allclose([v for _, v, _ in points], [v for _, v, _ in other],
                                       rtol=1e-5, err_msg=tag)
        else:
            assert [np.asarray(v).tolist() for _, v, _ in points] == [
                np.asarray(v).tolist() for _, v, _ in other], tag


def test_steps_per_execution_writes_what_one_step_per_execution_writes(tmp_path):
    """The same training with steps_per_execution=1 and 4 writes the same logged steps in
    the same layout: the same packed tags, chunks, metadata and histograms."""
    runs = {}
    for k in (1, 4):
        model, x, y = mixed_model_and_data()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=k)
        logdir = str(tmp_path / f"spe{k}")
        model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False,
                  callbacks=[WeightUpdateRatioCallback(logdir, update_freq=3, histograms=True)])
        runs[k] = read_raw_events(os.path.join(logdir, "train"))
    assert sorted(runs[1]) == sorted(runs[4])
    for tag, points in runs[1].items():
        other = runs[4][tag]
        assert [s for s, _, _ in points] == [s for s, _, _ in other] == [0, 3, 6], tag
        assert [c for _, _, c in points] == [c for _, _, c in other], tag
        for (_, a, _), (_, b, _) in zip(points, other):
            assert np.asarray(a).shape == np.asarray(b).shape, tag


def test_steps_per_execution_fits_reuse_the_traced_function_until_another_fit(logdir):
    """The callback's next `fit` of the model runs the function traced for its first (no
    new trace) and logs its own steps; a `fit` without the callback gets Keras's own."""
    model, x, y = _small_model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=3)
    callback = WeightUpdateRatioCallback(logdir, update_freq=2)
    records = record_every_step(model)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    function = model.train_function
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert model.train_function is function and sorted(records) == list(range(8))
    logged = _logged(logdir)
    assert {step for _, step in logged} == {0, 2, 4, 6}
    assert_ratios_close(logged, {
        (path, step): reference_ratio(records[step][0][path], records[step][1][path])
        for step in (0, 2, 4, 6) for path in records[step][0]
    }, rtol=5e-7)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # no callback: Keras's own function
    assert model.train_function is not function
    assert model.__dict__["train_step"].__name__ == "train_step"  # the reference's own
    assert sorted(records) == list(range(12))
    assert {step for _, step in _logged(logdir)} == {0, 2, 4, 6}


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(log_dir=None), TypeError, "log_dir must be a path"),
        (dict(log_dir="l", update_freq=0), ValueError, "update_freq must be >= 1"),
        (dict(log_dir="l", update_freq="10"), TypeError, "update_freq must be an int"),
        (dict(log_dir="l", update_freq=True), TypeError, "update_freq must be an int"),
        (dict(log_dir="l", update_freq="epoch"), TypeError, "update_freq must be an int"),
        (dict(log_dir=3), TypeError, "log_dir must be a path"),
        (dict(log_dir=""), ValueError, "log_dir must not be empty"),
        (dict(log_dir="l", update_freq=-3), ValueError, "update_freq must be >= 1"),
        (dict(log_dir="l", update_freq=2.0), TypeError, "update_freq must be an int"),
        (dict(log_dir="l", histograms="yes"), TypeError, "histograms must be a bool"),
        (dict(log_dir="l", histograms=1), TypeError, "histograms must be a bool"),
        (dict(log_dir="l", flush_millis=0), ValueError, "flush_millis must be >= 1"),
        (dict(log_dir="l", flush_millis=-5), ValueError, "flush_millis must be >= 1"),
        (dict(log_dir="l", flush_millis="60000"), TypeError, "flush_millis must be an int"),
        (dict(log_dir="l", flush_millis=1.5), TypeError, "flush_millis must be an int"),
        (dict(log_dir="l", flush_millis=True), TypeError, "flush_millis must be an int"),
        (dict(log_dir="l", stop_on="nan"), TypeError, "collection of reasons"),
        (dict(log_dir="l", stop_on={"nans"}), ValueError, r"unknown reasons \['nans'\]"),
        (dict(log_dir="l", on_flag="print"), TypeError, "on_flag must be callable"),
        (dict(log_dir="l", patience=0), ValueError, "patience must be an integer"),
        (dict(log_dir="l", low=1e-2, high=1e-4), ValueError, "must be below high"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        WeightUpdateRatioCallback(**kwargs)


def test_no_work_in_init(tmp_path):
    WeightUpdateRatioCallback(tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


def test_iterations_are_read_only_around_logged_steps(logdir, monkeypatch):
    reads = []
    original = WeightUpdateRatioCallback._read_step
    monkeypatch.setattr(WeightUpdateRatioCallback, "_read_step",
                        lambda self: reads.append(1) or original(self))
    model, x, y = mixed_model_and_data()
    model.compile(optimizer="adam", loss="mse")
    x = [np.concatenate([a] * 4) for a in x]  # 64 samples: 16 steps of 4
    y = np.concatenate([y] * 4)
    reference = _fit(model, x, y, logdir, every=8, epochs=2)  # 32 steps, logs 0, 8, 16, 24
    assert {step for _, step in _logged(logdir)} == {0, 8, 16, 24}
    assert_ratios_close(_logged(logdir), reference.expected, rtol=5e-7)
    assert len(reads) == 1 + 4  # at train begin, and before each logged step


def test_good_arguments_are_kept(tmp_path):
    callback = WeightUpdateRatioCallback(tmp_path, update_freq=np.int64(5), flush_millis=10)
    assert (callback.log_dir, callback.update_freq, callback.flush_millis) == (
        str(tmp_path), 5, 10)
    assert type(callback.update_freq) is int and callback.histograms is False


class BatchBeginReference(keras.callbacks.Callback):
    """numpy ratios of the updates at steps 0, N, 2N, ..., from the weights read at each
    batch's beginning and at each epoch's end only: it overrides no batch-end hook, so it
    does not make Keras dispatch batch ends synchronously. Updates that do not advance the
    iterations are not expected."""

    def __init__(self, every):
        super().__init__()
        self.every = every
        self.expected = {}

    def on_train_begin(self, logs=None):
        self.last = None

    def on_train_batch_begin(self, batch, logs=None):
        self._observe()

    def on_epoch_end(self, epoch, logs=None):
        self._observe()

    def _observe(self):
        step = int(self.model.optimizer.iterations.numpy())
        weights = {v.path: v.numpy() for v in self.model.trainable_variables}
        if self.last is not None:
            last_step, last_weights = self.last
            if step == last_step + 1 and last_step % self.every == 0:
                for path, before in last_weights.items():
                    self.expected[(path, last_step)] = reference_ratio(before, weights[path])
        self.last = (step, weights)


class ThreadProbe(keras.callbacks.Callback):
    """Records the thread each train batch end runs on; safe for asynchronous dispatch."""

    async_safe = True

    def __init__(self):
        super().__init__()
        self.threads = set()

    def on_train_batch_end(self, batch, logs=None):
        self.threads.add(threading.get_ident())


def _small_model_and_data(samples=16):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, name="hidden"),
                              keras.layers.Dense(1, name="out")])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, 4)).astype("float32")
    y = rng.normal(size=(samples, 1)).astype("float32")
    return model, x, y


@pytest.fixture
def thread_safe_backend(monkeypatch):
    """Keras's backend declared thread-safe, as the JAX and PyTorch backends are: Keras
    then dispatches train batch ends to a thread pool unless a callback prevents it."""
    import keras.src.backend

    monkeypatch.setattr(keras.src.backend, "IS_THREAD_SAFE", True)


def test_the_callback_keeps_keras_asynchronous_batch_end_dispatch(logdir, thread_safe_backend):
    model, _, _ = _small_model_and_data()
    model.compile(optimizer="sgd", loss="mse")
    ours = keras.callbacks.CallbackList([WeightUpdateRatioCallback(logdir)], model=model)
    assert ours._async_train
    # the check is the one that decides: a callback overriding on_train_batch_end stops it
    other = keras.callbacks.CallbackList(
        [WeightUpdateRatioCallback(logdir), ReferenceRatios(1)], model=model
    )
    assert not other._async_train


@pytest.mark.parametrize("every", [1, 3])
def test_fit_with_asynchronous_batch_ends_logs_the_exact_ratios(
    logdir, thread_safe_backend, every
):
    model, x, y = _small_model_and_data()
    model.compile(optimizer=OPTIMIZERS["adam"](), loss="mse")
    reference, probe = BatchBeginReference(every), ThreadProbe()
    callback = WeightUpdateRatioCallback(logdir, update_freq=every, histograms=True)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False,
              callbacks=[reference, callback, probe])
    assert probe.threads and threading.get_ident() not in probe.threads  # a thread pool's
    logged = _logged(logdir)
    assert {step for _, step in logged} == set(range(0, 8, every))
    assert_ratios_close(logged, reference.expected, rtol=5e-7)
    assert len(logged) == 4 * len(range(0, 8, every))


class InterruptAfter(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the end of the batch of step `step` (after its update)."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step + 1:
            raise KeyboardInterrupt


def test_a_fit_interrupted_after_a_logged_update_leaves_nothing_to_the_next(logdir):
    model, x, y = _small_model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    callback = WeightUpdateRatioCallback(logdir, update_freq=3)
    first = BatchBeginReference(3)
    with pytest.raises(KeyboardInterrupt):  # at step 3, logged, after its update
        model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False,
                  callbacks=[first, callback, InterruptAfter(3)])
    model.train_on_batch(x[:4], y[:4])  # step 4, outside fit
    assert int(model.optimizer.iterations.numpy()) == 5
    second = BatchBeginReference(3)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False,
              callbacks=[second, callback])  # steps 5 to 12
    logged = _logged(logdir)
    # step 3's ratio was never taken (the interruption came first); 6, 9 and 12 are the
    # second fit's own, each of one update
    assert {step for _, step in logged} == {0, 6, 9, 12}
    assert_ratios_close(logged, {**first.expected, **second.expected}, rtol=5e-7)


def test_a_batch_begun_when_the_data_runs_out_is_logged_when_it_runs(logdir):
    model, x, y = _small_model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    # a dataset of unknown length: Keras finds its end in a batch it has begun
    data = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda *_: True).batch(4)
    reference = BatchBeginReference(2)
    model.fit(data, epochs=2, verbose=0,
              callbacks=[reference, WeightUpdateRatioCallback(logdir, update_freq=2)])
    steps = range(0, int(model.optimizer.iterations.numpy()), 2)
    logged = _logged(logdir)
    assert {step for _, step in logged} == set(steps)
    # (Keras 3.15 may count that batch as an update that changes nothing: then its step is
    # logged as such, else the step is the next epoch's first)
    assert_ratios_close(logged, reference.expected, rtol=5e-7)


def test_a_batch_that_makes_no_update_before_its_epoch_ends_is_logged_when_it_runs(logdir):
    """Keras's TensorFlow trainer may find the data exhausted in a batch whose
    on_train_batch_begin has run (its train function raises StopIteration): no update."""
    model, x, y = _small_model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.train_on_batch(x[:4], y[:4])  # step 0, unlogged
    callback = WeightUpdateRatioCallback(logdir, update_freq=1)
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)  # step 1: no data, no update
    callback.on_epoch_end(0)
    before = [v.numpy() for v in model.trainable_variables]
    callback.on_train_batch_begin(0)  # step 1 again, which runs
    model.train_on_batch(x[4:8], y[4:8])
    callback.on_epoch_end(1)
    callback.on_train_end()
    expected = {(v.path, 1): reference_ratio(old, v.numpy())
                for v, old in zip(model.trainable_variables, before)}
    assert_ratios_close(_logged(logdir), expected, rtol=5e-7)


# --- a LineSearchModel: the line search's series of every step ----------------------------


def _line_search_setup(seed=0, samples=48):
    """A LineSearchModel on a small logistic problem, and an identical model and search
    (same weights) for a custom loop of `minimize` calls on the same batches."""
    from tb_wur_plugin import armijo

    def net():
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                                 keras.layers.Dense(1)])

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, 5)).astype("float32")
    y = (x[:, :1] + 0.5 * rng.normal(size=(samples, 1)) > 0).astype("float32")
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    kwargs = dict(n_batches_per_epoch=6, initial_step_size=8.0, c=0.3)
    inner = net()
    trainer = armijo.LineSearchModel(inner, armijo.StochasticArmijo(**kwargs))
    trainer.compile(loss=bce)
    twin = net()
    twin.set_weights(inner.get_weights())
    search = armijo.StochasticArmijo(**kwargs)

    @tf.function
    def step(xb, yb):
        return search.minimize(lambda: bce(yb, twin(xb, training=True)),
                               twin.trainable_variables)

    def loop(batches):
        results = [step(tf.constant(xb), tf.constant(yb)) for xb, yb in batches]
        return [{
            metadata.LINE_SEARCH_STEP_SIZE_TAG: np.float32(r.step_size.numpy()),
            metadata.LINE_SEARCH_BACKTRACKS_TAG: np.float32(r.backtracks.numpy()),
            metadata.LINE_SEARCH_LOSS_TAG: np.float32(r.loss.numpy()),
            metadata.LINE_SEARCH_NEW_LOSS_TAG: np.float32(r.new_loss.numpy()),
        } for r in results]

    return trainer, x, y, loop


def _line_search_series(logdir):
    """{tag: [(step, value)]} of the line-search series, in file order."""
    events = read_events(os.path.join(logdir, "train"))
    series = {tag: [(step, np.float32(v)) for step, v, content in events.get(tag, [])]
              for tag in metadata.LINE_SEARCH_TAGS}
    for tag, points in series.items():
        assert all(c["kind"] == metadata.KIND_LINE_SEARCH and metadata.line_search_tag(
            c["series"]) == tag for _, _, c in events.get(tag, []))
    return series


def _assert_line_search(series, expected):
    """Every step of `expected` ({step: {tag: value}}) once, in step order, with its values
    (the losses to float32 rounding, the rest exactly)."""
    for tag in metadata.LINE_SEARCH_TAGS:
        steps = [step for step, _ in series[tag]]
        assert sorted(steps) == sorted(expected), (tag, steps)
        got = dict(series[tag])
        want = {step: values[tag] for step, values in expected.items()}
        if tag in (metadata.LINE_SEARCH_LOSS_TAG, metadata.LINE_SEARCH_NEW_LOSS_TAG):
            np.testing.assert_allclose([got[s] for s in sorted(want)],
                                       [want[s] for s in sorted(want)], rtol=2e-6)
        else:
            assert got == want, tag


def _batches(x, y, size=8):
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def test_line_search_series_of_every_step_across_two_fits(logdir):
    trainer, x, y, loop = _line_search_setup()
    callback = WeightUpdateRatioCallback(logdir, update_freq=4)
    reference = BatchBeginReference(4)
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False,
                callbacks=[reference, callback])
    second = BatchBeginReference(4)
    trainer.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False,
                callbacks=[second, callback])
    assert int(trainer.optimizer.iterations.numpy()) == 18
    expected = dict(enumerate(loop(_batches(x, y) * 3)))
    assert sum(v[metadata.LINE_SEARCH_BACKTRACKS_TAG] for v in expected.values()) > 0
    _assert_line_search(_line_search_series(logdir), expected)
    # the ratios of the logged steps beside them, in the same run
    logged = _logged(logdir)
    assert {step for _, step in logged} == {0, 4, 8, 12, 16}
    assert_ratios_close(logged, {**reference.expected, **second.expected}, rtol=5e-7)


def test_line_search_of_an_interrupted_fit_is_written_at_the_next_fit(logdir):
    trainer, x, y, loop = _line_search_setup()
    callback = WeightUpdateRatioCallback(logdir, update_freq=3)
    with pytest.raises(KeyboardInterrupt):  # after step 4's update, not a logged step
        trainer.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False,
                    callbacks=[callback, InterruptAfter(4)])
    trainer.train_on_batch(x[:8], y[:8])  # step 5, outside fit: not written
    trainer.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False,
                callbacks=[callback])  # steps 6 to 11
    batches = _batches(x, y)
    results = loop(batches[:5] + batches[:1] + batches)
    expected = {step: results[step] for step in range(12) if step != 5}
    _assert_line_search(_line_search_series(logdir), expected)


def test_line_search_rows_are_read_before_the_step_log_wraps(logdir, monkeypatch):
    """Steps beyond the step log's capacity between logged steps are read in time."""
    from tb_wur_plugin.armijo import line_search_log

    monkeypatch.setattr(line_search_log, "CAPACITY", 4)
    trainer, x, y, loop = _line_search_setup()  # its step log holds 4 steps
    assert trainer._step_log.capacity == 4
    callback = WeightUpdateRatioCallback(logdir, update_freq=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing lost
        trainer.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False,
                    callbacks=[callback])
    _assert_line_search(_line_search_series(logdir), dict(enumerate(loop(_batches(x, y) * 2))))


def test_a_model_without_line_search_writes_no_line_search_series(logdir):
    model, x, y = _small_model_and_data()
    model.compile(optimizer="sgd", loss="mse")
    _fit(model, x, y, logdir, every=2, epochs=1)
    events = read_events(os.path.join(logdir, "train"))
    assert events and not set(events) & set(metadata.LINE_SEARCH_TAGS)


def _dead_input_model_and_data(dead_from: int):
    """Three tanh Dense layers trained by plain SGD on 16 batches of 4 a epoch, whose
    inputs are all zeros from batch `dead_from` on (a data pipeline gone dead): from then on
    the first kernel's gradient is 0, and it stops moving while the other layers move."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(8, activation="tanh", name="hidden"),
        keras.layers.Dense(8, activation="tanh", name="middle"),
        keras.layers.Dense(1, name="out"),
    ], name="dead_input")
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    x[4 * dead_from:] = 0
    return model, x, y


@pytest.mark.parametrize("dead_from,fire_step,steps_made", [
    (6, 10, 12),  # read at batch 11's begin: fit ends at batch 11's end
    (11, 15, 16),  # the epoch's last batch, read at the epoch's end: fit ends there
])
def test_stop_on_ends_fit_after_the_fire_step_with_the_reports_flags(
    logdir, caplog, dead_from, fire_step, steps_made
):
    """not_moving of the dead input's kernel fires at the step completing 5 judged steps
    (patience) from `dead_from`, on the Frobenius and the spectral ratios; stop_on ends
    `fit` there; the flags are those `tb-wur report` gives the written run."""
    from training_flags import fired, reported

    model, x, y = _dead_input_model_and_data(dead_from)
    seen = []
    callback = WeightUpdateRatioCallback(
        logdir, update_freq=1, spectral=True, stop_on={"not_moving"}, on_flag=seen.append)
    assert callback.flags == []
    with caplog.at_level("WARNING", logger="tb_wur_plugin"):
        model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert int(model.optimizer.iterations.numpy()) == steps_made
    assert seen == callback.flags
    assert [(f.tag, f.reason, f.since, f.step, f.metric) for f in callback.flags] == [
        ("dead_input/hidden/kernel", "not_moving", dead_from, fire_step, metric)
        for metric in ("frobenius", "spectral")
    ]
    assert fired(callback.flags) == reported(logdir, "train", ("frobenius", "spectral"))
    told = [r.getMessage() for r in caplog.records if r.name == "tb_wur_plugin"]
    assert len(told) == 2 and all(
        m.startswith(f"WUR step {fire_step}: dead_input/hidden/kernel: not moving") for m in told)
    assert told[1].endswith("(spectral ratios)")


def test_stop_on_with_steps_per_execution_ends_fit_after_the_next_execution(logdir):
    """steps_per_execution=4 (calls of steps 0-3, 4-7, 8-11, 12-15 in an epoch): the step
    that fires (10) is read at the next call's begin, and `fit` ends at that call's end."""
    model, x, y = _dead_input_model_and_data(6)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", steps_per_execution=4)
    callback = WeightUpdateRatioCallback(logdir, update_freq=1, stop_on={"not_moving"})
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False, callbacks=[callback])
    assert int(model.optimizer.iterations.numpy()) == 16
    assert [(f.tag, f.reason, f.since, f.step) for f in callback.flags] == [
        ("dead_input/hidden/kernel", "not_moving", 6, 10)]
    assert set(ratio_series(os.path.join(logdir, "train"))["dead_input/hidden/kernel"]) == set(
        range(16))


class RaiseAtBatch(keras.callbacks.Callback):
    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_begin(self, batch, logs=None):
        if batch >= self.batch:
            raise RuntimeError("stop here")


def test_a_fit_with_steps_per_execution_that_raised_leaves_the_model_its_own_step(logdir):
    """A `fit` that raises leaves the callback's train step on the model: the next `fit`
    without the callback puts Keras's own back; the callback's next `fit` logs its steps."""
    model, x, y = _small_model_and_data()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", steps_per_execution=3)
    callback = WeightUpdateRatioCallback(logdir, update_freq=2)
    with pytest.raises(RuntimeError, match="stop here"):  # after the call of steps 0-2
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False,
                  callbacks=[callback, RaiseAtBatch(3)])
    assert "train_step" in model.__dict__
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)  # steps 3 to 6
    assert "train_step" not in model.__dict__
    assert int(model.optimizer.iterations.numpy()) == 7
    records = record_every_step(model)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert sorted(records) == list(range(7, 11))
    expected = {
        (path, step): reference_ratio(records[step][0][path], records[step][1][path])
        for step in (8, 10) for path in records[step][0]
    }
    logged = _logged(logdir)
    assert {step for _, step in logged} == {0, 2, 8, 10}
    assert_ratios_close({k: v for k, v in logged.items() if k[1] >= 8}, expected, rtol=5e-7)


def test_without_stop_on_the_flags_fire_and_fit_runs_to_its_end(logdir):
    model, x, y = _dead_input_model_and_data(6)
    callback = WeightUpdateRatioCallback(logdir, update_freq=1)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False, callbacks=[callback])
    assert int(model.optimizer.iterations.numpy()) == 32
    assert [(f.tag, f.reason, f.since, f.step) for f in callback.flags] == [
        ("dead_input/hidden/kernel", "not_moving", 6, 10)]
    # a second fit judges its own logged steps from the first
    model.fit(x[:8], y[:8], batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    assert callback.flags == []

"""The TensorFlow private API the package uses (`tb_wur_plugin.tf_write.tf_private`) still behaves as
it expects. Each failure names the private API and the TensorFlow version, so that a
TensorFlow release that changes one of them is found here, not as an obscure error
elsewhere."""

import contextlib
import glob

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from tb_wur_plugin.tf_write import tf_private

STATE = "tensorflow.python.ops.summary_ops_v2._summary_state"


@contextlib.contextmanager
def private(api):
    """Turns any error inside into a failure naming `api` and the TensorFlow version."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - any change of the API is reported
        pytest.fail(
            f"TensorFlow {tf.__version__} changed the private API {api}: "
            f"{type(error).__name__}: {error}",
            pytrace=True,
        )


def check(condition, api, what):
    assert condition, f"TensorFlow {tf.__version__} changed the private API {api}: {what}"


def _summary_events(logdir):
    return [
        event
        for path in sorted(glob.glob(f"{logdir}/events.out.tfevents.*"))
        for event in event_file_loader.EventFileLoader(path).Load()
        if event.HasField("summary")
    ]


def test_summary_state_has_the_attributes_used():
    from tensorflow.python.ops import summary_ops_v2  # the test may look at the source

    state = getattr(summary_ops_v2, "_summary_state", None)
    check(state is not None, STATE, "summary_ops_v2 has no _summary_state")
    for name in ("writer", "is_recording", "is_recording_distribution_strategy"):
        check(hasattr(state, name), STATE, f"the state has no attribute {name!r}")


def test_default_writer_is_the_one_as_default_sets(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with private(f"{STATE}.writer"):
        check(tf_private.default_writer() is None, f"{STATE}.writer", "not None outside")
        with writer.as_default():
            check(tf_private.default_writer() is writer, f"{STATE}.writer",
                  "is not the writer of writer.as_default()")
        check(tf_private.default_writer() is None, f"{STATE}.writer", "not reset on exit")
    writer.close()


def test_setting_the_default_writer_writes_to_it_without_flushing(tmp_path):
    api = f"{STATE}.writer (set)"
    writer = tf.summary.create_file_writer(str(tmp_path), max_queue=1000, flush_millis=10**9)
    with private(api):
        tf_private.set_default_writer(writer)
        try:
            check(tf.summary.scalar("x", 1.5, step=3), api, "a scalar was not written")
        finally:
            tf_private.set_default_writer(None)
        check(tf_private.default_writer() is None, api, "setting None does not clear it")
    check(_summary_events(tmp_path) == [], api, "setting or clearing it flushed the writer")
    writer.flush()
    events = _summary_events(tmp_path)
    check([(e.step, e.summary.value[0].tag) for e in events] == [(3, "x")], api,
          f"the scalar did not reach the writer: {events}")
    writer.close()


def test_recording_conditions_are_those_record_if_sets():
    api = f"{STATE}.is_recording, .is_recording_distribution_strategy"
    with private(api):
        conditions = tf_private.recording_conditions()
        check(len(conditions) == 2, api, f"{conditions!r}")
        with tf.summary.record_if(False):
            check(tf_private.recording_conditions()[0] is False, api, "record_if(False)")
        condition = lambda: True  # noqa: E731
        with tf.summary.record_if(condition):
            check(tf_private.recording_conditions()[0] is condition, api, "record_if(callable)")
        flag = tf.constant(True)
        with tf.summary.record_if(flag):
            check(tf_private.recording_conditions()[0] is flag, api, "record_if(tensor)")
        check(tf_private.recording_conditions() == conditions, api, "not restored")


def test_a_file_writer_has_a_resource_and_is_closed_by_close(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with private("SummaryWriter._resource"):
        resource = tf_private.writer_resource(writer)
    check(resource is not None and resource.dtype == tf.resource, "SummaryWriter._resource",
          f"a file writer's resource is {resource!r}")
    with private("SummaryWriter._closed"):
        check(tf_private.writer_closed(writer) is False, "SummaryWriter._closed",
              "an open writer reads as closed")
        writer.close()
        check(tf_private.writer_closed(writer) is True, "SummaryWriter._closed",
              "a closed writer reads as open")


def test_a_noop_writer_and_no_writer_have_no_resource():
    noop = tf.summary.create_noop_writer()
    check(tf_private.writer_resource(noop) is None, "SummaryWriter._resource",
          "a no-op writer has a _resource")
    check(tf_private.writer_closed(noop) is False, "SummaryWriter._closed",
          "a no-op writer reads as closed")
    check(tf_private.writer_resource(None) is None and not tf_private.writer_closed(None),
          "SummaryWriter._resource, _closed", "of no writer")


@pytest.mark.parametrize("in_function", [False, True])
def test_write_raw_proto_summary_writes_a_summary_event_readers_read_back(
    tmp_path, in_function
):
    api = "tensorflow.python.ops.gen_summary_ops.write_raw_proto_summary"
    message = summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag="a", simple_value=0.25),
        summary_pb2.Summary.Value(tag="b", simple_value=-3.0),
    ])
    writer = tf.summary.create_file_writer(str(tmp_path))

    def write():
        tf_private.write_raw_proto_summary(
            tf_private.writer_resource(writer), tf.constant(11, tf.int64),
            tf.constant(message.SerializeToString()),
        )

    with private(api):
        (tf.function(write) if in_function else write)()
        writer.close()
    events = [
        e for path in glob.glob(f"{tmp_path}/events.out.tfevents.*")
        for e in tf.compat.v1.train.summary_iterator(path) if e.HasField("summary")
    ]
    check(len(events) == 1 and events[0].step == 11
          and events[0].summary.SerializeToString() == message.SerializeToString(), api,
          f"tf.compat.v1.train.summary_iterator read {events}")
    loaded = _summary_events(tmp_path)
    read = [(v.tag, float(tensor_util.make_ndarray(v.tensor)))
            for e in loaded for v in e.summary.value]  # simple values read as tensors
    check([e.step for e in loaded] == [11] and read == [("a", 0.25), ("b", -3.0)], api,
          f"TensorBoard's EventFileLoader read {loaded}")


def test_local_variable_is_a_plain_variable_under_a_strategy_scope():
    api = "tensorflow.python.ops.resource_variable_ops.ResourceVariable"
    strategy = tf.distribute.MirroredStrategy(["cpu:0"])
    with private(api):
        with strategy.scope():
            variable = tf_private.local_variable(False, name="flag")
        variable.assign(True)
    check(type(variable).__name__ == "ResourceVariable" and bool(variable.numpy())
          and not variable.trainable, api,
          f"made a {type(variable).__name__} (trainable={variable.trainable}) under a "
          "MirroredStrategy scope; it must not go through the strategy's variable creator")


def test_sharded_variable_is_recognised_and_a_variable_is_not():
    from tensorflow.python.distribute import sharded_variable

    sharded = sharded_variable.ShardedVariable([tf.Variable([1.0, 2.0]), tf.Variable([3.0])])
    assert tf_private.is_sharded_variable(sharded)
    assert not tf_private.is_sharded_variable(tf.Variable([1.0]))


COND = "tensorflow.python.ops.cond_v2.indexed_case(lower_using_switch_merge=False)"


def _branches(counter):
    """(true_fn, false_fn): each adds to its own element of `counter` (a side effect only the
    taken branch may have) and returns a (float, int) pair."""

    def true_fn():
        counter.assign_add([1, 0])
        return tf.constant(2.5), tf.constant(7)

    def false_fn():
        counter.assign_add([0, 1])
        return tf.constant(-1.0), tf.constant(3)

    return true_fn, false_fn


@pytest.mark.parametrize("jit_compile", [False, True])
def test_unlowered_cond_takes_either_branch_in_a_tf_function(jit_compile):
    counter = tf.Variable([0, 0])
    true_fn, false_fn = _branches(counter)

    @tf.function(jit_compile=jit_compile)
    def run(pred):
        return tf_private.unlowered_cond(pred, true_fn, false_fn)

    with private(COND):
        taken = run(tf.constant(True))
        check([float(taken[0]), int(taken[1])] == [2.5, 7], COND, f"true branch gave {taken}")
        check(counter.numpy().tolist() == [1, 0], COND,
              f"after the true branch the branches ran {counter.numpy().tolist()} times")
        taken = run(tf.constant(False))
        check([float(taken[0]), int(taken[1])] == [-1.0, 3], COND, f"false branch gave {taken}")
        check(counter.numpy().tolist() == [1, 1], COND,
              f"after the false branch the branches ran {counter.numpy().tolist()} times")


def test_unlowered_cond_makes_one_case_op_marked_not_to_be_lowered():
    counter = tf.Variable([0, 0])
    true_fn, false_fn = _branches(counter)
    graph = tf.function(lambda pred: tf_private.unlowered_cond(pred, true_fn, false_fn)
                        ).get_concrete_function(tf.TensorSpec([], tf.bool)).graph
    conditionals = [op for op in graph.get_operations()
                    if op.type in ("Case", "StatelessCase", "If", "StatelessIf")]
    check(len(conditionals) == 1, COND,
          f"expected one conditional op, got {[op.type for op in graph.get_operations()]}")
    with private(COND):
        lowered = conditionals[0].get_attr("_lower_using_switch_merge")
    check(lowered is False, COND, f"_lower_using_switch_merge is {lowered!r}, not False")
    check(not any(op.type in ("Switch", "Merge") for op in graph.get_operations()), COND,
          "the graph holds Switch/Merge ops")


def test_unlowered_cond_executing_eagerly_calls_the_taken_branch():
    counter = tf.Variable([0, 0])
    true_fn, false_fn = _branches(counter)
    assert [float(t) for t in tf_private.unlowered_cond(tf.constant(True), true_fn, false_fn)
            ] == [2.5, 7.0]
    assert [float(t) for t in tf_private.unlowered_cond(False, true_fn, false_fn)] == [-1.0, 3.0]
    assert counter.numpy().tolist() == [1, 1]

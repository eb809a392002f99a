"""The TensorBoard private API the package uses (`tb_wur_plugin.read.tb_private`) still behaves as
it expects: over TensorBoard's own data server (the fast loader) and its Python loader, its
columns are the points of the public `read_scalars` (and `read_tensor_columns`'s those of
`read_tensors`) of their data providers, bit for bit and in the same order. Each failure names the private API and the TensorBoard version."""

import contextlib

import numpy as np
import pytest
import tensorboard
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as multiplexer_provider
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
from tensorboard.data import grpc_provider, provider, server_ingester
from tensorboard.summary.writer import event_file_writer

from tb_wur_plugin import metadata
from tb_wur_plugin.read import report, tb_private
from tb_wur_plugin.writer import SummaryWriter

API = (
    "tensorboard.data.grpc_provider (GrpcDataProvider._stub, _populate_rtf, _translate_grpc_error)"
    " / tensorboard.backend.event_processing.data_provider (MultiplexerDataProvider._index,"
    " _multiplexer, _validate_*, _downsample)"
)
CTX = tb_context.RequestContext()


def check(condition, what):
    assert condition, f"TensorBoard {tensorboard.__version__} changed the private API {API}: {what}"


@contextlib.contextmanager
def private():
    try:
        yield
    except errors.PublicError:
        raise
    except Exception as error:  # noqa: BLE001 - any change of the API is reported
        pytest.fail(f"TensorBoard {tensorboard.__version__} changed the private API {API}: "
                    f"{type(error).__name__}: {error}")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Two runs of per-tag scalars; values of every kind, a step written twice. Run 'p':
    the same as run 'a' in the packed layout (tensors), with histograms."""
    logdir = tmp_path_factory.mktemp("logs")
    for run, scale, packed in (("a", 1.0, False), ("b", 3.0, False), ("p", 1.0, True)):
        with SummaryWriter(logdir / run, packed=packed) as writer:
            for step in range(0, 300, 3):
                writer.add_ratios(
                    {"dense/kernel": scale * 1e-3 * (1 + step), "dense/bias": scale / (step + 7)},
                    step, wall_time=1.7e9 + step / 7,
                )
                writer.add_learning_rate(0.1 / (1 + step), step, wall_time=1.7e9 + step / 7)
                if packed and step % 30 == 0:
                    writer.add_histograms({"dense/kernel": np.full(7, 1e-3 * step, np.float32),
                                           "dense/bias": np.arange(3, dtype=np.float32)}, step)
            writer.add_ratios({"dense/kernel": 1.5, "dense/bias": 2.5}, 300)
            writer.add_ratios({"dense/kernel": 2.5e-4, "dense/bias": 0.0}, 300)  # written again
            writer.add_ratios({"dense/kernel": float("nan"), "dense/bias": float("inf")}, 301)
    _write_other_encodings(str(logdir / "c"))
    return str(logdir)


def _write_other_encodings(run_dir):
    """Run 'c': ratios as float64 scalars and as float32 `tensor_content`, encodings other
    writers may use (the Python loader's columns take them through `make_ndarray`)."""
    writer = event_file_writer.EventFileWriter(run_dir)
    ratio_metadata = metadata.create_summary_metadata(metadata.KIND_RATIO)
    for step in range(20):
        double = summary_pb2.Summary.Value(tag="f64/kernel", metadata=ratio_metadata)
        double.tensor.dtype = types_pb2.DT_DOUBLE
        double.tensor.tensor_shape.SetInParent()
        double.tensor.double_val.append(1 / (step + 3))
        content = summary_pb2.Summary.Value(tag="content/kernel", metadata=ratio_metadata)
        content.tensor.dtype = types_pb2.DT_FLOAT
        content.tensor.tensor_shape.SetInParent()
        content.tensor.tensor_content = np.float32(2 / (step + 3)).tobytes()
        writer.add_event(event_pb2.Event(
            step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=[double, content])
        ))
    writer.close()


@pytest.fixture(scope="module", params=["fast", "python"])
def loader(request, logdir):
    """The data provider of TensorBoard's data server, or of its Python loader."""
    if request.param == "python":
        data_provider = report._python_provider(logdir, 0)
        check(isinstance(data_provider, multiplexer_provider.MultiplexerDataProvider),
              "not a MultiplexerDataProvider")
        yield data_provider
        return
    binary = server_ingester.get_server_binary()
    with report._data_server(binary.path, logdir, 0) as data_provider:
        check(isinstance(data_provider, grpc_provider.GrpcDataProvider), "not a GrpcDataProvider")
        yield data_provider


def _read(data_provider, read, **filters):
    return read(
        data_provider, CTX, experiment_id="", plugin_name=metadata.PLUGIN_NAME,
        downsample=10**6, run_tag_filter=provider.RunTagFilter(**filters) if filters else None,
    )


@pytest.mark.parametrize("filters", [
    {}, {"runs": ["b"]}, {"runs": ["a"], "tags": ["dense/bias", metadata.LEARNING_RATE_TAG]},
    {"runs": ["a", "gone"], "tags": ["no such tag"]},
])
def test_columns_are_the_public_read_scalars_points(loader, filters):
    def same_values(run, tag, values, series):
        check(values.dtype == np.float64, f"dtype {values.dtype}")
        want = np.array([p.value for p in series], np.float64)
        check(np.array_equal(values, want, equal_nan=True), f"{run}/{tag}: other values")

    total = _compare_with_public(loader, "scalars", filters, same_values)
    if not filters:
        # runs a and b: 102 steps of each layer and of the skipped-step marker (the data
        # server keeps the last write of step 300, the Python loader both), 100 learning
        # rates; run c: 20 of each encoding (the data server keeps no float64 scalar)
        fast = isinstance(loader, grpc_provider.GrpcDataProvider)
        written_twice, run_c = (0, 20) if fast else (2 * 3, 40)
        check(total == 2 * (3 * 102 + 100) + written_twice + run_c + 100, f"{total} points")


def _compare_with_public(loader, kind: str, filters: dict, same_values) -> int:
    """tb_private's read_{kind}_columns against the public read_{kind} of `loader`: the same
    runs, tags, steps and wall times, the values as `same_values` checks them; the points."""
    with private():
        columns = _read(loader, getattr(tb_private, f"read_{kind[:-1]}_columns"), **filters)
    points = _read(loader, lambda data_provider, ctx, **arguments:
                   getattr(data_provider, f"read_{kind}")(ctx, **arguments), **filters)
    check(columns is not None, f"{type(loader).__name__} was not read")
    check({r: sorted(t) for r, t in columns.items()} == {r: sorted(t) for r, t in points.items()},
          f"other runs or tags: {columns.keys()} / {points.keys()}")
    total = 0
    for run, by_tag in points.items():
        for tag, series in by_tag.items():
            steps, wall_times, values = columns[run][tag]
            check(steps.dtype == np.int64 and wall_times.dtype == np.float64,
                  f"dtypes {steps.dtype}, {wall_times.dtype}")
            check(steps.tolist() == [p.step for p in series], f"{run}/{tag}: other steps")
            check(wall_times.tolist() == [p.wall_time for p in series], f"{run}/{tag}: wall times")
            same_values(run, tag, values, series)
            total += len(series)
    return total


def test_downsampling_is_the_public_one(loader):
    arguments = dict(experiment_id="", plugin_name=metadata.PLUGIN_NAME, downsample=10,
                     run_tag_filter=provider.RunTagFilter(runs=["a"], tags=["dense/kernel"]))
    with private():
        steps = tb_private.read_scalar_columns(loader, CTX, **arguments)["a"]["dense/kernel"][0]
    public = loader.read_scalars(CTX, **arguments)["a"]["dense/kernel"]
    check(len(steps) == 10 and steps.tolist() == [p.step for p in public],
          f"downsampled to {steps.tolist()}, public {[p.step for p in public]}")


@pytest.mark.parametrize("filters", [
    {}, {"runs": ["p"]}, {"runs": ["p", "gone"], "tags": ["no such tag"]},
])
def test_tensor_columns_are_the_public_read_tensors_points(loader, filters):
    def same_values(run, tag, values, series):
        for value, point in zip(values, series, strict=True):
            check(value.dtype == point.numpy.dtype and value.shape == point.numpy.shape
                  and np.array_equal(value, point.numpy, equal_nan=True),
                  f"{run}/{tag}: other values")

    total = _compare_with_public(loader, "tensors", filters, same_values)
    if not filters:
        # run p: 103 packed ratio steps (102 with the data server, which keeps the last
        # write of step 300) and 10 packed histograms
        fast = isinstance(loader, grpc_provider.GrpcDataProvider)
        check(total == (102 if fast else 103) + 10, f"{total} points")


def test_other_providers_are_not_read():
    class NotTensorBoardsProvider:
        def read_scalars(self, *args, **kwargs):
            raise AssertionError("read_scalar_columns must not read other providers")

    for read in (tb_private.read_scalar_columns, tb_private.read_tensor_columns):
        assert read(
            NotTensorBoardsProvider(), CTX, experiment_id="", plugin_name=metadata.PLUGIN_NAME,
            downsample=10, run_tag_filter=None,
        ) is None

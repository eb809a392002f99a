"""The TensorBoard private API the package uses (`tb_wur_plugin.tb_private`) still behaves as
it expects: against TensorBoard's own data server (the fast loader), its columns are the
points of the public `GrpcDataProvider.read_scalars`, bit for bit and in the same order.
Each failure names the private API and the TensorBoard version."""

import contextlib

import numpy as np
import pytest
import tensorboard
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.data import grpc_provider, provider

from tb_wur_plugin import metadata, report, tb_private
from tb_wur_plugin.writer import SummaryWriter

API = "tensorboard.data.grpc_provider (GrpcDataProvider._stub, _populate_rtf, _translate_grpc_error)"
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
def fast_loader(tmp_path_factory):
    """The data server over two runs; values of every kind, a step written twice."""
    logdir = tmp_path_factory.mktemp("logs")
    for run, scale in (("a", 1.0), ("b", 3.0)):
        with SummaryWriter(logdir / run) as writer:
            for step in range(0, 300, 3):
                writer.add_ratios(
                    {"dense/kernel": scale * 1e-3 * (1 + step), "dense/bias": scale / (step + 7)},
                    step, wall_time=1.7e9 + step / 7,
                )
                writer.add_learning_rate(0.1 / (1 + step), step, wall_time=1.7e9 + step / 7)
            writer.add_ratios({"dense/kernel": 1.5, "dense/bias": 2.5}, 300)
            writer.add_ratios({"dense/kernel": 2.5e-4, "dense/bias": 0.0}, 300)  # written again
            writer.add_ratios({"dense/kernel": float("nan"), "dense/bias": float("inf")}, 301)
    binary = pytest.importorskip("tensorboard.data.server_ingester").get_server_binary()
    with report._data_server(binary.path, str(logdir), 0) as data_provider:
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
def test_columns_are_the_public_read_scalars_points(fast_loader, filters):
    with private():
        columns = _read(fast_loader, tb_private.read_scalar_columns, **filters)
    points = _read(fast_loader, lambda data_provider, ctx, **arguments:
                   data_provider.read_scalars(ctx, **arguments), **filters)
    check(columns is not None, "the fast loader's provider was not read")
    check({r: sorted(t) for r, t in columns.items()} == {r: sorted(t) for r, t in points.items()},
          f"other runs or tags: {columns.keys()} / {points.keys()}")
    total = 0
    for run, by_tag in points.items():
        for tag, series in by_tag.items():
            steps, wall_times, values = columns[run][tag]
            check(steps.dtype == np.int64 and wall_times.dtype == values.dtype == np.float64,
                  f"dtypes {steps.dtype}, {wall_times.dtype}, {values.dtype}")
            check(steps.tolist() == [p.step for p in series], f"{run}/{tag}: other steps")
            check(wall_times.tolist() == [p.wall_time for p in series], f"{run}/{tag}: wall times")
            want = np.array([p.value for p in series], np.float64)
            check(np.array_equal(values, want, equal_nan=True), f"{run}/{tag}: other values")
            total += len(series)
    if not filters:
        # per run: 102 steps of each layer and of the skipped-step marker (the data server
        # keeps the last write of step 300), 100 learning rates
        check(total == 2 * (3 * 102 + 100), f"{total} points")


def test_downsampling_is_the_public_one(fast_loader):
    arguments = dict(experiment_id="", plugin_name=metadata.PLUGIN_NAME, downsample=10,
                     run_tag_filter=provider.RunTagFilter(runs=["a"], tags=["dense/kernel"]))
    with private():
        steps = tb_private.read_scalar_columns(fast_loader, CTX, **arguments)["a"]["dense/kernel"][0]
    public = fast_loader.read_scalars(CTX, **arguments)["a"]["dense/kernel"]
    check(len(steps) == 10 and steps.tolist() == [p.step for p in public],
          f"downsampled to {steps.tolist()}, public {[p.step for p in public]}")


def test_other_providers_are_not_read():
    class NotTheFastLoader:
        def read_scalars(self, *args, **kwargs):
            raise AssertionError("read_scalar_columns must not read other providers")

    assert tb_private.read_scalar_columns(
        NotTheFastLoader(), CTX, experiment_id="", plugin_name=metadata.PLUGIN_NAME,
        downsample=10, run_tag_filter=None,
    ) is None

"""Every use of TensorBoard's private API in the package, and nothing else.

TensorBoard's public `DataProvider.read_scalars` gives one Python `ScalarDatum` per point,
most of the time of reading a large run: the fast loader (`GrpcDataProvider`) makes them
from the data server's columnar answer, the Python loader (`MultiplexerDataProvider`) with
a `tensor_util.make_ndarray` per point. `read_scalar_columns` reads the same points as numpy
columns: for the fast loader it sends the same request to the same data server and keeps
the answer's columns, with the same error translation; for the Python loader it reads the
same events of the multiplexer, downsampled the same way, and takes a float32 scalar's
value straight from its proto (any other tensor through `make_ndarray`, as TensorBoard
does). Other data providers: None, and the caller uses the public `read_scalars`.
`read_tensor_columns` does the same for `read_tensors`, each value an array taken straight
from its `tensor_content` where it has one (the packed series, `metadata`'s protocol version
3), else through `make_ndarray`.
`tests/read/test_tb_private.py` fails, naming what changed, when a TensorBoard release changes
what is used here.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider as multiplexer_provider
from tensorboard.compat.proto import summary_pb2, types_pb2
from tensorboard.data import grpc_provider, provider
from tensorboard.data.proto import data_provider_pb2
from tensorboard.util import tensor_util

from tb_wur_plugin.read.point_columns import PointColumns, TensorColumns, of_points


def read_scalar_columns(
    data_provider: provider.DataProvider,
    ctx: tb_context.RequestContext,
    *,
    experiment_id: str,
    plugin_name: str,
    downsample: int,
    run_tag_filter: provider.RunTagFilter | None,
) -> dict[str, dict[str, PointColumns]] | None:
    """What `data_provider.read_scalars` answers with these arguments, as columns.

    Args: those of `DataProvider.read_scalars`.

    Returns:
        {run: {tag: (steps, wall times, values)}}, the points of each series in the order
        `read_scalars` gives them; None when `data_provider` is neither the fast nor the
        Python loader's (the caller then uses `read_scalars`).

    Raises:
        tensorboard.errors.PublicError: as `read_scalars` raises (e.g. NotFoundError).
    """
    arguments = dict(
        experiment_id=experiment_id, plugin_name=plugin_name, downsample=downsample,
        run_tag_filter=run_tag_filter,
    )
    if isinstance(data_provider, multiplexer_provider.MultiplexerDataProvider):
        return _multiplexer_columns(
            data_provider, ctx, summary_pb2.DATA_CLASS_SCALAR,
            lambda events: of_points(events, _event_value), **arguments,
        )
    if isinstance(data_provider, grpc_provider.GrpcDataProvider):
        return _data_server_columns(
            data_provider, data_provider_pb2.ReadScalarsRequest(), data_provider._stub.ReadScalars,
            lambda data: (  # numpy copies protobuf's repeated numbers without a Python object each
                np.array(data.step, np.int64), np.array(data.wall_time, np.float64),
                np.array(data.value, np.float64),
            ),
            **arguments,
        )
    return None


def read_tensor_columns(
    data_provider: provider.DataProvider,
    ctx: tb_context.RequestContext,
    *,
    experiment_id: str,
    plugin_name: str,
    downsample: int,
    run_tag_filter: provider.RunTagFilter | None,
) -> dict[str, dict[str, TensorColumns]] | None:
    """What `data_provider.read_tensors` answers with these arguments, as (steps, wall
    times, [the value of each point as a numpy array]) per series, in the order
    `read_tensors` gives them; None when `data_provider` is neither the fast nor the Python
    loader's.

    Raises:
        tensorboard.errors.PublicError: as `read_tensors` raises.
    """
    arguments = dict(
        experiment_id=experiment_id, plugin_name=plugin_name, downsample=downsample,
        run_tag_filter=run_tag_filter,
    )
    if isinstance(data_provider, multiplexer_provider.MultiplexerDataProvider):
        return _multiplexer_columns(
            data_provider, ctx, summary_pb2.DATA_CLASS_TENSOR,
            lambda events: (
                np.fromiter((e.step for e in events), np.int64, len(events)),
                np.fromiter((e.wall_time for e in events), np.float64, len(events)),
                [_array(e.tensor_proto) for e in events],
            ),
            **arguments,
        )
    if isinstance(data_provider, grpc_provider.GrpcDataProvider):
        return _data_server_columns(
            data_provider, data_provider_pb2.ReadTensorsRequest(), data_provider._stub.ReadTensors,
            lambda data: (
                np.array(data.step, np.int64), np.array(data.wall_time, np.float64),
                [_array(value) for value in data.value],
            ),
            **arguments,
        )
    return None


def _multiplexer_columns(
    data_provider: multiplexer_provider.MultiplexerDataProvider,
    ctx: tb_context.RequestContext, data_class: int, columns_of: Callable[[list], Any], *,
    experiment_id: str, plugin_name: str, downsample: int,
    run_tag_filter: provider.RunTagFilter | None,
) -> dict[str, dict[str, Any]]:
    """`MultiplexerDataProvider.read_scalars`'s (or `read_tensors`') points (its checks, its
    index of `data_class`, its multiplexer's events, its downsampling), each series'
    events as `columns_of` makes them."""
    data_provider._validate_context(ctx)
    data_provider._validate_experiment_id(experiment_id)
    data_provider._validate_downsample(downsample)
    index = data_provider._index(plugin_name, run_tag_filter, data_class)
    result: dict[str, dict[str, Any]] = {}
    for run, tags in index.items():
        result[run] = {}
        for tag in tags:
            events = multiplexer_provider._downsample(
                data_provider._multiplexer.Tensors(run, tag), downsample
            )
            result[run][tag] = columns_of(events)
    return result


def _data_server_columns(
    data_provider: grpc_provider.GrpcDataProvider, request, call: Callable,
    columns_of: Callable[[Any], Any], *, experiment_id: str, plugin_name: str,
    downsample: int, run_tag_filter: provider.RunTagFilter | None,
) -> dict[str, dict[str, Any]]:
    """`GrpcDataProvider.read_scalars`'s (or `read_tensors`') `request`, sent with `call`,
    each series of its answer as `columns_of` makes it of the series' data."""
    request.experiment_id = experiment_id
    request.plugin_filter.plugin_name = plugin_name
    grpc_provider._populate_rtf(run_tag_filter, request.run_tag_filter)
    request.downsample.num_points = downsample
    with grpc_provider._translate_grpc_error():
        response = call(request)
    return {
        run_entry.run_name: {
            tag_entry.tag_name: columns_of(tag_entry.data) for tag_entry in run_entry.tags
        }
        for run_entry in response.runs
    }


# numpy dtypes of the tensors the packed series store, by TensorProto dtype
_CONTENT_DTYPES = {types_pb2.DT_FLOAT: np.dtype("<f4"), types_pb2.DT_UINT8: np.dtype("u1")}


def _array(proto) -> np.ndarray:
    """`make_ndarray(proto)`, for a vector of float32 or uint8 in `tensor_content` without
    its Python-level checks and copies."""
    dtype = _CONTENT_DTYPES.get(proto.dtype)
    content = proto.tensor_content
    dims = proto.tensor_shape.dim
    if dtype is not None and content and len(dims) == 1 and dims[0].size * dtype.itemsize == len(content):
        return np.frombuffer(content, dtype)
    return tensor_util.make_ndarray(proto)


def _event_value(event) -> float:
    """The value `make_ndarray(event.tensor_proto).item()` gives, a float32 scalar's without
    it."""
    proto = event.tensor_proto
    if proto.dtype == types_pb2.DT_FLOAT and not proto.tensor_shape.dim and not (
        proto.tensor_content
    ) and len(proto.float_val) == 1:
        return proto.float_val[0]
    return tensor_util.make_ndarray(proto).item()

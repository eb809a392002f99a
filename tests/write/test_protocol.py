import json

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2

from tb_wur_plugin import metadata


def test_edges_are_log10_spaced_and_fixed():
    edges = metadata.HISTOGRAM_EDGES
    assert edges[0] == pytest.approx(1e-10) and edges[-1] == pytest.approx(1e2)
    assert len(edges) == metadata.NUM_BINS + 1
    np.testing.assert_allclose(np.diff(np.log10(edges)), 1 / metadata.BINS_PER_DECADE)
    assert metadata.NUM_BUCKETS == metadata.NUM_BINS + 5


@pytest.mark.parametrize(
    "kind,data_class",
    [
        (metadata.KIND_RATIO, summary_pb2.DATA_CLASS_SCALAR),
        (metadata.KIND_LEARNING_RATE, summary_pb2.DATA_CLASS_SCALAR),
        (metadata.KIND_SKIPPED_STEP, summary_pb2.DATA_CLASS_SCALAR),
        (metadata.KIND_HISTOGRAM, summary_pb2.DATA_CLASS_TENSOR),
    ],
)
def test_metadata_sets_plugin_name_data_class_and_version(kind, data_class):
    meta = metadata.create_summary_metadata(kind, "about it")
    assert meta.plugin_data.plugin_name == "wur"
    assert meta.data_class == data_class
    assert meta.summary_description == "about it"
    content = metadata.parse_plugin_content(meta.plugin_data.content)
    # only histograms' values changed in version 2: the other kinds are written as 1
    expected = metadata.HISTOGRAM_WRITE_VERSION if kind == metadata.KIND_HISTOGRAM else 1
    assert content["version"] == expected and content["kind"] == kind
    assert expected <= metadata.PROTOCOL_VERSION


def test_histogram_metadata_names_its_edges():
    content = json.loads(
        metadata.create_summary_metadata(metadata.KIND_HISTOGRAM).plugin_data.content
    )
    assert (content["log10_min"], content["log10_max"], content["bins_per_decade"]) == (
        metadata.LOG10_MIN,
        metadata.LOG10_MAX,
        metadata.BINS_PER_DECADE,
    )


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\xff", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"kind": "ratio"}', "no valid version"),
        (b'{"version": 99, "kind": "ratio"}', "newer tb-wur-plugin"),
        (b'{"version": 1, "kind": "pie"}', "unknown wur series kind"),
    ],
)
def test_parse_rejects_bad_content(content, message):
    with pytest.raises(ValueError, match=message):
        metadata.parse_plugin_content(content)


def test_unknown_kind_is_refused_when_writing():
    with pytest.raises(ValueError, match="unknown wur series kind"):
        metadata.create_summary_metadata("pie")


def test_histogram_tags_round_trip_and_are_reserved():
    tag = metadata.histogram_tag("model/dense/kernel")
    assert metadata.is_reserved_tag(tag)
    assert metadata.layer_of_histogram_tag(tag) == "model/dense/kernel"
    assert metadata.layer_of_histogram_tag("model/dense/kernel") is None
    assert metadata.is_reserved_tag(metadata.LEARNING_RATE_TAG)


def test_ratio_metadata_carries_the_model_order_index():
    content = metadata.parse_plugin_content(
        metadata.create_summary_metadata(metadata.KIND_RATIO, index=7).plugin_data.content
    )
    assert content["index"] == 7
    with pytest.raises(ValueError, match="bad index"):
        metadata.parse_plugin_content(b'{"version": 1, "kind": "ratio", "index": "7"}')

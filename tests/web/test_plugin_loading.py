import importlib.metadata
import time

import pytest
import tensorflow as tf

from tb_server import TensorBoardServer
from tb_wur_plugin import plugin, wur_summary


def test_entry_point_names_the_loader():
    (entry,) = [
        e for e in importlib.metadata.entry_points(group="tensorboard_plugins")
        if e.name == "wur"
    ]
    assert entry.load() is plugin.WURLoader


def test_loader_sets_a_default_sample_count_and_the_user_flag_wins():
    class Flags:
        samples_per_plugin = {}

    flags = Flags()
    plugin.WURLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"wur": plugin.DEFAULT_SAMPLES_PER_TAG}
    flags.samples_per_plugin = {"wur": 5}
    plugin.WURLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"wur": 5}


@pytest.fixture
def wur_logdir(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "run_a"))
    with writer.as_default():
        for step in range(3):
            wur_summary.scalar("model/dense/kernel", 1e-3 * (step + 1), step=step)
    writer.close()
    return str(tmp_path)


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_tensorboard_enables_the_tab_when_wur_data_exists(wur_logdir, load_fast):
    with TensorBoardServer(wur_logdir, load_fast) as server:
        listing = server.wait_for(
            lambda d: d.get("wur", {}).get("enabled"), "/data/plugins_listing"
        )
        assert listing["wur"]["tab_name"] == "WUR"
        assert listing["wur"]["loading_mechanism"]["type"] == "IFRAME"
        status, headers, body = server.get("/data/plugin/wur/index.js")
        assert status == 200 and b"export function render" in body
        assert headers["Content-Type"].startswith("text/javascript")
        assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("load_fast", [True, False], ids=["fast", "python"])
def test_tensorboard_serves_an_empty_logdir_with_the_tab_disabled(tmp_path, load_fast):
    with TensorBoardServer(str(tmp_path), load_fast) as server:
        time.sleep(2)
        listing = server.get_json("/data/plugins_listing")
        assert listing["wur"]["enabled"] is False
        assert server.get("/")[0] == 200
        assert "Traceback" not in server.output()

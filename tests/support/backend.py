"""An in-process TensorBoard app over the Python loader, for route tests."""

from __future__ import annotations

import json

import werkzeug.test
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin

from tb_wur_plugin.web import heatmap_wire
from tb_wur_plugin import metadata, plugin


class Backend:
    def __init__(self, logdir: str, samples: int = 0):
        """`samples`: steps kept per tag (as --samples_per_plugin=wur=N), 0 for all."""
        self.logdir = logdir
        multiplexer = plugin_event_multiplexer.EventMultiplexer(
            tensor_size_guidance={metadata.PLUGIN_NAME: samples}
        )
        multiplexer.AddRunsFromDirectory(logdir)
        multiplexer.Reload()
        self.multiplexer = multiplexer  # Reload() it as TensorBoard's reload loop does
        provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
        context = base_plugin.TBContext(
            logdir=logdir, data_provider=provider, sampling_hints={metadata.PLUGIN_NAME: samples}
        )
        self.plugin = plugin.WURPlugin(context)
        app = application.TensorBoardWSGI([self.plugin], data_provider=provider)
        self.client = werkzeug.test.Client(app)

    def get(self, route: str, **params):
        return self.client.get(f"/data/plugin/wur/{route}", query_string=params)

    def json(self, route: str, **params):
        response = self.get(route, **params)
        assert response.status_code == 200, response.get_data(as_text=True)
        return json.loads(response.get_data())

    def heatmap(self, **params):
        response = self.client.get(
            "/data/plugin/wur/heatmap", query_string=params, headers={"Accept-Encoding": "gzip"}
        )
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.headers["Content-Encoding"] == "gzip"
        return heatmap_wire.unpack(response.get_data())

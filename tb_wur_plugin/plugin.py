"""The TensorBoard plugin backend: loads the WUR tab and serves its data routes."""

from __future__ import annotations

import importlib.resources

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_wur_plugin import metadata

# Steps per tag kept by both loaders unless the user passes --samples_per_plugin=wur=N.
DEFAULT_SAMPLES_PER_TAG = 10_000


class WURPlugin(base_plugin.TBPlugin):
    """The WUR tab. Enabled when the data provider lists wur summaries."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        self._data_provider = context.data_provider

    def get_plugin_apps(self):
        return {"/index.js": self._serve_index_js}

    def is_active(self) -> bool:
        return False  # the data provider's plugin listing enables the tab

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="WUR")

    @wrappers.Request.application
    def _serve_index_js(self, request):
        body = importlib.resources.files("tb_wur_plugin").joinpath("static/index.js").read_bytes()
        return http_util.Respond(request, body, "text/javascript")


class WURLoader(base_plugin.TBLoader):
    """Loads `WURPlugin`, keeping up to DEFAULT_SAMPLES_PER_TAG steps per tag by default."""

    def fix_flags(self, flags):
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES_PER_TAG)

    def load(self, context):
        return WURPlugin(context)

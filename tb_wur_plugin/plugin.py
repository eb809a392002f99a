"""The TensorBoard plugin: `WURLoader` (the entry point `tensorboard_plugins: wur`) loads
`WURPlugin`, the WUR tab. Its routes are the HTTP layer `web/` (routes: parsing and
responses; answers: what each route answers, over `read.run_data`), documented in
http_api.md.
"""

from __future__ import annotations

from tensorboard.plugins import base_plugin

from tb_wur_plugin import metadata
from tb_wur_plugin.read import damage, run_data
from tb_wur_plugin.read.settings import ALL_POINTS, DEFAULT_SAMPLES_PER_TAG
from tb_wur_plugin.web.answers import Answers
from tb_wur_plugin.web.routes import Routes

# Decoded runs kept in memory between requests: matrices, and the step indexes of /runs.
CACHE_BYTES = 1 << 30
INDEX_CACHE_BYTES = 64 << 20


class WURPlugin(base_plugin.TBPlugin):
    """The WUR tab. Enabled when the data provider lists wur summaries.

    `answers` computes what each route answers (`*_impl`), for in-process callers.
    """

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        samples = (context.sampling_hints or {}).get(self.plugin_name, DEFAULT_SAMPLES_PER_TAG)
        self._data = run_data.RunData(
            context.data_provider,
            downsample=samples if samples > 0 else ALL_POINTS,
            matrix_bytes=CACHE_BYTES,
            index_bytes=INDEX_CACHE_BYTES,
            damage_scanner=damage.DamageScanner.for_logdir(context.logdir),
        )
        self.answers = Answers(self._data)
        self._routes = Routes(self.answers)

    def get_plugin_apps(self):
        return self._routes.apps()

    def is_active(self) -> bool:
        return False  # the data provider's plugin listing enables the tab

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="WUR")


class WURLoader(base_plugin.TBLoader):
    """Loads `WURPlugin`, keeping up to DEFAULT_SAMPLES_PER_TAG steps per tag by default."""

    def fix_flags(self, flags):
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES_PER_TAG)

    def load(self, context):
        return WURPlugin(context)

"""The plugin's HTTP layer below `tb_wur_plugin.plugin`: request parsing (`http_args`)."""

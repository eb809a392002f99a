"""The plugin's HTTP layer below `tb_wur_plugin.plugin` (http_api.md): HTTP only, over `read/`
(which imports nothing of it).

- `routes`: the routes: each parses its request, calls one `*_impl` of `answers` and responds.
- `answers`: what each route answers (JSON bodies, payloads, the export stream), over
  `read.run_data`, with the last `/heatmap` answers kept.
- `http_args`: request parsing: query parameters, the request's context, GET and HEAD only.
- `heatmap_wire`: the heatmap's cell codes and the binary `WUR1` payload of `/heatmap` and
  `/compare`.
"""

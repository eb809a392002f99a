"""The read side: what the TensorBoard plugin (`tb_wur_plugin.plugin`) and `tb-wur report`
share. It reads event data through TensorBoard's data provider and knows the write side only
through `tb_wur_plugin.metadata`, and imports nothing of the plugin's HTTP layer (`web/`).

- `run_listing`: what a run's listing says: the kind of each series, its layers and the
  series holding them (per-tag and packed), its skipped-step marker.
- `run_data`: a run's points from the data provider, its matrix and step index in model
  order, cached.
- `damage`: damaged event files: each file's unreadable stretches, and the readable records
  after them that TensorBoard's loaders skip (merged into the run's points by `run_data`).
- `lru_cache`: the one cache (by key, valid for one data signature, least recently used
  dropped), also used by the plugin's `web/answers`.
- `tb_private`: every private TensorBoard API the package uses (columnar reads).
- `point_columns`: a series' points as numpy columns.
- `heatmap`: the step × layer matrix of a run and its reduction to columns.
- `flags`, `compare`, `suggest`: the judgements (flagged layers, run comparison,
  suggested learning rates).
- `export`: CSV and JSON export of a run's ratios.
- `report`: `tb-wur report`, over TensorBoard's own loaders.
- `argument_values`, `settings`: the values users pass, checked alike, and the defaults.
"""

"""The read side: what the TensorBoard plugin (`tb_wur_plugin.plugin`) and `tb-wur report`
share. It reads event data through TensorBoard's data provider and knows the write side only
through `tb_wur_plugin.metadata`.

- `run_data`: a run's series from the data provider, in model order, cached.
- `tb_private`: every private TensorBoard API the package uses (columnar reads).
- `point_columns`: a series' points as numpy columns.
- `heatmap`: the step × layer matrix of a run and its reduction to columns.
- `heatmap_wire`: the heatmap's cell codes and the binary `WUR1` payload.
- `flags`, `compare`, `suggest`: the judgements (flagged layers, run comparison,
  suggested learning rates).
- `export`: CSV and JSON export of a run's ratios.
- `report`: `tb-wur report`, over TensorBoard's own loaders.
- `argument_values`, `settings`: the values users pass, checked alike, and the defaults.
"""

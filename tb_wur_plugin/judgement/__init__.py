"""The judgement: the rules that flag a layer, shared by the read side (the report, `/flags`,
`/reasons`) and the write side (the online judgement while training). It imports numpy and
`tb_wur_plugin.metadata` only.

- `reasons`: the table of reasons (name, judgement, label, condition, words);
- `cells`: the facts of each layer and step the conditions read (the peers included);
- `thresholds`: the settings' defaults and the thresholds;
- `judge`: a whole run judged (`judge_layers`, `flag_layers`, `findings`, `others_moving`);
- `online`: the same judgement step by step, as training logs the ratios;
- `threads`: numpy work of a large run shared by threads, and `computed_once`, a cached
  property locked per object (the heatmap reduction and its cell classes use them too).
"""

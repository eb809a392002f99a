"""What PyTorch `watch` needs of PyTorch beyond its documented API, kept apart from the
framework's math (`arrays/torch_math`) and the hooks (`tb_wur_plugin.torch`):

- `shards`: sharded parameters (FSDP2, FSDP1's flat parameters, DTensor tensor parallel):
  the pieces each rank counts, the one `all_reduce` of a logged step, the tags without the
  wrappers' segments (`Piece`, `Reduced`, `is_sharded`, `pieces`, `reduce_norms`,
  `agreed_steps`, `tag_and_dtype`, `wrapper_prefix`). Private API: FSDP1's internals.
- `ranks`: what the ranks agree on at a logged step: the same step (`step_fields`,
  `ranks_if_same_step`), rank 0's ratios of an unsharded model on every rank
  (`share_from_rank_0`), so that every rank judges the same ratios.
- `foreach`: PyTorch's fused list ops (`torch._foreach_*`, semi-private) that the math uses
  (`norms`, `sub_`, `copy_`, `copies`). Private API: the ops it names in `NAMES`.
- `grad_scaler`: the steps `torch.amp.GradScaler` skips (`notify_skipped_steps`,
  `stop_notifying`), by wrapping `GradScaler.step` while someone listens.

Imports PyTorch (and no TensorFlow module).
"""

from tb_wur_plugin.torch_internals.grad_scaler import notify_skipped_steps, stop_notifying
from tb_wur_plugin.torch_internals.ranks import (
    STEP_FIELDS,
    ranks_if_same_step,
    share_from_rank_0,
    step_fields,
)
from tb_wur_plugin.torch_internals.shards import (
    Piece,
    Reduced,
    agreed_steps,
    is_sharded,
    pieces,
    reduce_norms,
    tag_and_dtype,
    wrapper_prefix,
)

__all__ = [
    "Piece", "Reduced", "is_sharded", "pieces", "reduce_norms", "agreed_steps", "tag_and_dtype",
    "wrapper_prefix", "notify_skipped_steps", "stop_notifying",
    "STEP_FIELDS", "step_fields", "ranks_if_same_step", "share_from_rank_0",
]

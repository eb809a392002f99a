"""The Hugging Face half of test_transformers' DDP test: a tiny GPT-2 `Trainer.train()` on
2 CPU processes (launched by `torch.distributed.run`, gloo through accelerate) with a
`WeightUpdateRatioCallback` on each.

    python -m torch.distributed.run --standalone --nproc_per_node 2 transformers_ddp_worker.py \\
        OUTPUT_DIR STEPS LOGGING OUT_JSON

Each rank writes OUT_JSON.rank_<r>: {"ratios": {tag: {step: ratio}}} of every update (the
numpy reference of the parameters around each update: under DDP every rank holds the
full parameters) and "global_step".
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

import transformers  # noqa: E402

from rank_exit import exit_without_teardown  # noqa: E402
from tb_wur_plugin.transformers import WeightUpdateRatioCallback  # noqa: E402
from trainer_helpers import UpdateReference  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 256, length: int = 16, vocab: int = 64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Reference(transformers.TrainerCallback):
    """The numpy reference on the torch optimizer inside accelerate's wrapper."""

    def __init__(self, out: str) -> None:
        self.out, self.reference = out, None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.reference = UpdateReference(optimizer.optimizer, model,
                                         step_of=lambda: state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.reference.remove()
        result = {"ratios": {t: {str(s): r for s, r in p.items()}
                             for t, p in self.reference.ratios.items()},
                  "global_step": state.global_step}
        with open(f"{self.out}.rank_{args.process_index}", "w") as f:
            json.dump(result, f)


def main(output_dir: str, steps: int, logging: int, out: str) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, logging_steps=logging, report_to=["tensorboard"],
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
        save_strategy="no", ddp_backend="gloo",
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Tokens(),
        callbacks=[WeightUpdateRatioCallback(), Reference(out)],
    )
    trainer.train()
    # The results and both event files are written and closed (on_train_end). The Trainer
    # leaves the process group it made alive; both ways of ending it have failed here: a
    # rank that finalizes with it alive can abort in gloo's teardown ("terminate called
    # without an active exception"), and `destroy_process_group` once deadlocked (rank 1's
    # main thread, holding the GIL, joined gloo's run loop thread, which waited for the
    # GIL). So once both ranks are past a barrier, each ends without either.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    exit_without_teardown()


if __name__ == "__main__":
    output_dir, steps, logging, out = sys.argv[1:]
    main(output_dir, int(steps), int(logging), out)

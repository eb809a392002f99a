"""Log weight-update ratios from a Hugging Face `Trainer` with
tb_wur_plugin.transformers.WeightUpdateRatioCallback.

Trains a tiny GPT-2 (2 blocks of width 32, built from `GPT2Config` with random weights:
nothing is downloaded) to continue sequences that count up modulo its vocabulary of 64
tokens. The callback is the only addition to a plain `Trainer`: every `logging_steps`
optimizer updates (0, logging_steps, 2·logging_steps, ...; step = `state.global_step`
before the update) it writes the ratio ‖Δw‖/‖w‖ of every trainable parameter (tag: the
parameter's name with '.' replaced by '/', e.g. `transformer/h/0/attn/c_attn/weight`) and
the learning rate into the run directory of the Trainer's own TensorBoard logging
(`OUTPUT_DIR/runs/<time>_<host>`), beside its `train/loss`.

    python examples/huggingface_trainer.py --output_dir logs/huggingface_trainer
    tensorboard --logdir logs/huggingface_trainer/runs   # the WUR tab, and the loss
    tb-wur report logs/huggingface_trainer/runs          # per layer: median, last ratio, flags
"""

import argparse

import torch
import transformers

from tb_wur_plugin.transformers import WeightUpdateRatioCallback

VOCABULARY, LENGTH = 64, 16


class CountingSequences(torch.utils.data.Dataset):
    """`size` sequences of LENGTH tokens counting up modulo VOCABULARY from a random start."""

    def __init__(self, size: int, seed: int) -> None:
        starts = torch.randint(0, VOCABULARY, (size, 1),
                               generator=torch.Generator().manual_seed(seed))
        self.ids = (starts + torch.arange(LENGTH)) % VOCABULARY

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="logs/huggingface_trainer")
    parser.add_argument("--steps", type=int, default=200, help="optimizer updates to train")
    parser.add_argument("--logging_steps", type=int, default=10,
                        help="the Trainer's logging interval, and the callback's")
    args = parser.parse_args()

    transformers.set_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCABULARY,
                                     n_positions=LENGTH, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    training_args = transformers.TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=16,
        learning_rate=1e-3, logging_steps=args.logging_steps, report_to=["tensorboard"],
        save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
    )
    trainer = transformers.Trainer(
        model=model, args=training_args, train_dataset=CountingSequences(512, seed=0),
        # every=None (default): the Trainer's logging_steps; log_dir=None: its TensorBoard run
        callbacks=[WeightUpdateRatioCallback()],
    )
    result = trainer.train()
    print(f"{result.global_step} updates: mean training loss {result.training_loss:.4f}")
    runs = f"{args.output_dir}/runs"
    print(f"ratios written beside the Trainer's scalars in {runs}; see them with: "
          f"tensorboard --logdir {runs} (or: tb-wur report {runs})")


if __name__ == "__main__":
    main()

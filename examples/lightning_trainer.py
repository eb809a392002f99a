"""Log weight-update ratios from a Lightning fit with
tb_wur_plugin.lightning.WeightUpdateRatioCallback.

Trains a small LightningModule (a perceptron 64 -> 64 -> 10 on scikit-learn's digits, Adam)
with a `TensorBoardLogger`. The callback is the only addition to a plain `Trainer`: every
`log_every_n_steps` optimizer steps (0, N, 2·N, ...; step = `trainer.global_step` before the
update) it writes the ratio ‖Δw‖/‖w‖ of every parameter the optimizer updates (tag: the
parameter's name with '.' replaced by '/': `hidden/weight`, `hidden/bias`, `logits/weight`,
`logits/bias`) and the learning rate into the logger's run directory
(`LOGDIR/lightning_logs/version_<n>`), beside the module's `train_loss`.

    python examples/lightning_trainer.py --logdir logs/lightning_trainer
    tensorboard --logdir logs/lightning_trainer   # the WUR tab, and the loss
    tb-wur report logs/lightning_trainer          # per layer: median and last ratio, flags
"""

import argparse

import lightning.pytorch as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from sklearn.datasets import load_digits

from tb_wur_plugin.lightning import WeightUpdateRatioCallback


class DigitsClassifier(L.LightningModule):
    def __init__(self, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.learning_rate = learning_rate
        self.hidden = torch.nn.Linear(64, 64)
        self.logits = torch.nn.Linear(64, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.logits(torch.relu(self.hidden(images)))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self(images), labels)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


def digits_loader(batch_size: int) -> torch.utils.data.DataLoader:
    """Shuffled batches of scikit-learn's 1,797 flattened 8x8 digits in [0, 1], and labels."""
    data = load_digits()
    dataset = torch.utils.data.TensorDataset(
        torch.tensor(data.data / 16.0, dtype=torch.float32),
        torch.tensor(data.target, dtype=torch.int64))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                       generator=torch.Generator().manual_seed(0))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", default="logs/lightning_trainer")
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps to train")
    parser.add_argument("--log_every_n_steps", type=int, default=10,
                        help="the Trainer's logging interval, and the callback's")
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        max_steps=args.steps, log_every_n_steps=args.log_every_n_steps,
        logger=TensorBoardLogger(args.logdir),
        # every=None (default): log_every_n_steps; log_dir=None: the TensorBoardLogger's
        callbacks=[WeightUpdateRatioCallback()],
        accelerator="cpu",  # a model this small trains fastest on the CPU
        enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(DigitsClassifier(), digits_loader(batch_size=32))
    print(f"{trainer.global_step} steps: last train_loss "
          f"{float(trainer.callback_metrics['train_loss']):.4f}")
    print(f"ratios written beside the logger's scalars in {trainer.logger.log_dir}; see them "
          f"with: tensorboard --logdir {args.logdir} (or: tb-wur report {args.logdir})")


if __name__ == "__main__":
    main()

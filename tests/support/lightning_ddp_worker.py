"""The Lightning half of test_lightning's DDP test: a fit on 2 CPU processes
(`strategy="ddp_fork"`, gloo: the ranks forked from this process, which has imported Lightning
already, about seven seconds of CPU each that "ddp_spawn" spends importing it again) with a
`WeightUpdateRatioCallback` on each.

    python lightning_ddp_worker.py SAVE_DIR STEPS EVERY OUT_JSON

Each rank writes OUT_JSON.rank_<r>: {"ratios": {tag: {step: ratio}}} of every update
(rank 0's numpy reference of the parameters around each update: under DDP every rank
holds the full parameters) and "global_step".
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

import lightning.pytorch as L  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402

from tb_wur_plugin.lightning import WeightUpdateRatioCallback  # noqa: E402
from trainer_helpers import UpdateReference  # noqa: E402


class Regression(L.LightningModule):
    """A small MLP regressing the sum of its 8 inputs, Adam (test_lightning's too)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class ReferencedRegression(Regression):
    """`Regression` that writes rank's reference ratios to `out`.rank_<r> at train end."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.reference: UpdateReference | None = None

    def on_train_start(self):
        self.reference = UpdateReference(self.trainer.optimizers[0], self,
                                         step_of=lambda: self.trainer.global_step)

    def on_train_end(self):
        self.reference.remove()
        result = {
            "ratios": {t: {str(s): r for s, r in p.items()}
                       for t, p in self.reference.ratios.items()},
            "global_step": self.trainer.global_step,
        }
        with open(f"{self.out}.rank_{self.global_rank}", "w") as f:
            json.dump(result, f)


def main(save_dir: str, steps: int, every: int, out: str) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=generator)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_fork", max_steps=steps,
        log_every_n_steps=every, logger=TensorBoardLogger(save_dir, version=0),
        callbacks=[WeightUpdateRatioCallback()], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(ReferencedRegression(out), data)


if __name__ == "__main__":
    save_dir, steps, every, out = sys.argv[1:]
    main(save_dir, int(steps), int(every), out)

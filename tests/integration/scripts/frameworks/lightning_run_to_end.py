"""A tiny PyTorch Lightning script with Lightning's default logger (lightning_logs/version_N
in the working directory) that says how its training ended: `ended.json` gets the trainer's
status from `on_train_end` and after `trainer.fit`, which run only when the script is let
finish."""

import json

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_end(self) -> None:
        ended["on_train_end"] = True


ended: dict = {"on_train_end": False}
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(256, 8, generator=g), torch.randn(256, 1, generator=g))
trainer = L.Trainer(
    max_steps=16,
    accelerator="cpu",
    devices=1,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Tiny(), DataLoader(data, batch_size=8))
ended["status"] = trainer.state.status.value
with open("ended.json", "w") as fh:
    json.dump(ended, fh)

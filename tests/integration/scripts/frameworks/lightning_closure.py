"""A small PyTorch Lightning script: automatic optimization, so Lightning runs the forward
and backward inside `optimizer.step(closure)`. It keeps Lightning's default logger
(lightning_logs/version_N under --root) and says how its training ended: `ended.json` in the
working directory gets the trainer's status from `on_train_end` and after `trainer.fit`,
which run only when the script is let finish."""

import argparse
import json

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--root", default=".")
parser.add_argument("--epochs", type=int, default=5)
args = parser.parse_args()


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        # Few parameters, large batches: the forward and backward outweigh the SGD update
        # by far, so an optimizer phase that held them would stand out.
        self.net = nn.Sequential(
            nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    def on_train_end(self) -> None:
        ended["on_train_end"] = True


ended: dict = {"on_train_end": False}
g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(16384, 128, generator=g), torch.randn(16384, 1, generator=g))
trainer = L.Trainer(
    max_epochs=args.epochs,
    accelerator="cpu",
    devices=1,
    default_root_dir=args.root,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Regressor(), DataLoader(data, batch_size=2048, shuffle=True))
ended["status"] = trainer.state.status.value
with open("ended.json", "w") as fh:
    json.dump(ended, fh)

"""What the model receives is the batch: --slice feeds a DataLoader's 50-sample batches in
slices of 10 (one optimizer step each); --lstm feeds a time-major LSTM language model
(input (35, 20): 35 time steps of 20 sequences, as PyTorch's word_language_model does).

--own-profiler runs the loop inside the script's own torch.profiler: perfdoctor backs off.
--epochs N: --slice's epochs (5); --exit-code N: sys.exit(N) once training is done."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def sliced() -> None:
    data = TensorDataset(torch.randn(500, 8), torch.randn(500, 1))
    loader = DataLoader(data, batch_size=50)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    epochs = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 5
    for _ in range(epochs):
        for x, y in loader:
            for i in range(0, len(x), 10):
                loss = nn.functional.mse_loss(model(x[i : i + 10]), y[i : i + 10])
                opt.zero_grad()
                loss.backward()
                opt.step()


class LanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.rnn = nn.LSTM(16, 16)  # batch_first=False: (seq, batch, features)
        self.out = nn.Linear(16, 100)

    def forward(self, tokens):
        hidden, _ = self.rnn(self.embed(tokens))
        return self.out(hidden)


def lstm() -> None:
    model = LanguageModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = torch.randint(0, 100, (2000, 20))  # batchify: 20 columns of one long stream
    for i in range(0, 35 * 40, 35):
        tokens, target = stream[i : i + 35], stream[i + 1 : i + 36]
        loss = nn.functional.cross_entropy(model(tokens).reshape(-1, 100), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> None:
    sliced() if "--slice" in sys.argv else lstm()
    if "--exit-code" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit-code") + 1]))


if __name__ == "__main__":
    if "--own-profiler" in sys.argv:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            main()
    else:
        main()

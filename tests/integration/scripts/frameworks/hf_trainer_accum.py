"""A Hugging Face Trainer run: a tiny GPT-2 built from its config (no download), synthetic
token data, gradient accumulation 4. The Dataset does slow per-sample CPU work and the
Trainer's DataLoader has no workers (the planted inefficiency: input-bound)."""

import argparse
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--root", default="hf-out")
parser.add_argument("--sample-ms", type=float, default=10.0)
args = parser.parse_args()


class Tokens(Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)
        self.sample_s = args.sample_ms / 1000.0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        end = time.perf_counter() + self.sample_s
        while time.perf_counter() < end:  # a slow pure-Python tokenizer stands here
            pass
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


if __name__ == "__main__":
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.root,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=4,
        max_steps=200,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    Trainer(model=model, args=training, train_dataset=Tokens(4096, 32, 128)).train()

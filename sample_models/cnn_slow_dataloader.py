"""Small image classifier whose input pipeline, not the model, sets the pace.

What it trains: a four-layer conv net (Conv -> BatchNorm -> ReLU, no conv bias before BN) on
32x32 RGB images of ten procedurally drawn classes. Each class is a colour palette plus a
striped texture at a class-specific angle; every sample adds its own random blobs and noise.

Known inefficiency (exactly one): the Dataset does expensive per-sample CPU work in
`__getitem__` - it "decodes" a 128x128 source image (procedural rendering stands in for JPEG
decoding), blurs it, downsamples it, takes a random crop, flips it and normalises it - and the
DataLoader runs all of that in the training process (`num_workers=0`). Every step waits for 64
of those samples before the model sees a batch.

What perfdoctor should find: an input-bound DataLoader (data wait is most of the step time,
well above the threshold) with `num_workers=0`, and the time attributed to
`SyntheticImageDataset.__getitem__` and its helpers in this file.

What fixes it: `dataloader-workers` (num_workers > 0 so workers prepare batches while the model
trains; with spare cores most of the wait disappears), with `pin_memory=True` on CUDA. Moving the
work out of `__getitem__` (pre-decoded images, GPU-side augmentation) would be the by-hand fix.

Run: python sample_models/cnn_slow_dataloader.py [--epochs 2] [--batch-size 64] [--max-steps N]
"""

from __future__ import annotations

import argparse
import logging
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("cnn_slow_dataloader")

NUM_CLASSES = 10
RAW_SIZE = 64  # resolution of the "decoded" source image, like a photo before resizing
PAD = 4  # the crop is taken from the downsampled image padded by this many pixels
# Per-channel statistics of the rendered images, for the final normalisation.
CHANNEL_MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32)
CHANNEL_STD = np.array([0.25, 0.25, 0.25], dtype=np.float32)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--samples", type=int, default=3200, help="images per epoch")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10, help="steps between loss logs")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def pick_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but CUDA is not available")
    return torch.device(choice)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- the input pipeline


def class_palette(label: int) -> np.ndarray:
    """Two RGB colours per class; the texture alternates between them."""
    hue = label / NUM_CLASSES * 2 * np.pi
    base = 0.5 + 0.35 * np.cos(hue + np.array([0.0, 2.1, 4.2]))
    return np.stack([base, 1.0 - base]).astype(np.float32)


def render_source_image(label: int, rng: np.random.Generator) -> np.ndarray:
    """Stand-in for decoding a photo: a RAW_SIZE x RAW_SIZE x 3 float image in [0, 1].

    The class is carried by the stripe angle and palette; blobs, phase and noise vary per
    sample so the model has to generalise rather than memorise pixels.
    """
    coords = np.linspace(-1.0, 1.0, RAW_SIZE, dtype=np.float32)
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    angle = label * np.pi / NUM_CLASSES + rng.normal(0.0, 0.05)
    frequency = 6.0 + rng.uniform(-0.5, 0.5)
    stripes = 0.5 + 0.5 * np.sin(
        frequency * np.pi * (xx * np.cos(angle) + yy * np.sin(angle)) + rng.uniform(0, 2 * np.pi)
    )
    palette = class_palette(label)
    image = stripes[..., None] * palette[0] + (1.0 - stripes[..., None]) * palette[1]
    for _ in range(6):  # distractor blobs, the "objects in the background"
        cy, cx = rng.uniform(-1.0, 1.0, size=2)
        radius = rng.uniform(0.05, 0.3)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
        image += blob[..., None] * rng.uniform(-0.5, 0.5, size=3).astype(np.float32)
    image += rng.normal(0.0, 0.08, size=image.shape).astype(np.float32)  # sensor noise
    return np.clip(image, 0.0, 1.0)


def gaussian_kernel(sigma: float, radius: int) -> np.ndarray:
    taps = np.arange(-radius, radius + 1, dtype=np.float32)
    kernel = np.exp(-(taps**2) / (2 * sigma**2))
    return kernel / kernel.sum()


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Separable blur with reflect padding, one 1-D convolution per axis."""
    radius = max(1, int(3 * sigma))
    kernel = gaussian_kernel(sigma, radius)
    padded = np.pad(image, ((radius, radius), (radius, radius), (0, 0)), mode="reflect")
    height, width = image.shape[:2]
    rows = sum(kernel[i] * padded[i : i + height, :, :] for i in range(kernel.size))  # blur along y
    return sum(kernel[i] * rows[:, i : i + width, :] for i in range(kernel.size))  # along x


def downsample(image: np.ndarray, size: int) -> np.ndarray:
    """Area (box) downsampling: average each factor x factor block, like an antialiased resize."""
    factor = image.shape[0] // size
    height = size * factor
    blocks = image[:height, :height].reshape(size, factor, size, factor, 3)
    return blocks.mean(axis=(1, 3))


def random_crop_and_flip(image: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    padded = np.pad(image, ((PAD, PAD), (PAD, PAD), (0, 0)), mode="reflect")
    top, left = rng.integers(0, 2 * PAD + 1, size=2)
    crop = padded[top : top + size, left : left + size]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return crop


def jitter_and_normalise(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    brightness = rng.uniform(0.8, 1.2)
    contrast = rng.uniform(0.8, 1.2)
    mean = image.mean(axis=(0, 1), keepdims=True)
    image = np.clip((image - mean) * contrast + mean * brightness, 0.0, 1.0)
    return (image - CHANNEL_MEAN) / CHANNEL_STD


class SyntheticImageDataset(Dataset):
    """Images are rendered on demand, as a real dataset decodes files on demand.

    Only plain numbers live on the instance so it pickles cheaply into DataLoader workers.
    """

    def __init__(self, num_samples: int, image_size: int, seed: int) -> None:
        self.num_samples = num_samples
        self.image_size = image_size
        self.seed = seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        label = index % NUM_CLASSES
        # The source image depends only on (seed, index), like a file on disk; the augmentation
        # draws from Python's `random`, which DataLoader re-seeds per worker.
        source = render_source_image(label, np.random.default_rng((self.seed, index)))
        aug_rng = np.random.default_rng(random.getrandbits(63))
        image = gaussian_blur(source, sigma=aug_rng.uniform(0.5, 1.5))
        image = downsample(image, self.image_size)
        image = random_crop_and_flip(image, self.image_size, aug_rng)
        image = jitter_and_normalise(image, aug_rng)
        chw = np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32)
        return torch.from_numpy(chw), label


# --------------------------------------------------------------------------- the model


def conv_block(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
    # No conv bias: the BatchNorm right after it has its own shift, so a bias would be wasted.
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallConvNet(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_block(3, 16, stride=1),
            conv_block(16, 32, stride=2),
            conv_block(32, 32, stride=1),
            conv_block(32, 64, stride=2),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.features(images)
        return self.head(features.mean(dim=(2, 3)))


# --------------------------------------------------------------------------- training


def train(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    seed_everything(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # input shapes never change

    dataset = SyntheticImageDataset(args.samples, args.image_size, args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,  # 0 by default: the known inefficiency
        pin_memory=device.type == "cuda",
        drop_last=True,
    )
    model = SmallConvNet().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)

    step = 0
    started = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break

    elapsed = time.perf_counter() - started
    log.info(
        "%d steps in %.2f s: %.1f ms/step, %.0f images/s",
        step,
        elapsed,
        1000 * elapsed / max(step, 1),
        step * args.batch_size / elapsed,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(parse_args())


if __name__ == "__main__":
    main()

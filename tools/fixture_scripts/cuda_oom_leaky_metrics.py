"""A classifier that runs out of CUDA memory: the recording behind the OOM fixture.

The bug is a common one: logits are kept for epoch-level metrics without `.detach()` and
without moving them off the GPU, so every step's logits (and, through the autograd graph, the
activations saved for their backward) stay alive. Memory grows every step until the
allocator gives up. `torch.cuda.set_per_process_memory_fraction` caps the process at about
1 GiB, so the crash comes after a few dozen steps on any GPU, during perfdoctor's warm-up
steps while the allocator history is recording.

    python tools/record_fixture.py tools/fixture_scripts/cuda_oom_leaky_metrics.py \\
        --out tests/fixtures/runs/cuda_oom_leaky_metrics_cuda \\
        --warmup 60 --steps 5 --profiled 0 --allow-failure
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CAP_BYTES = 1 << 30
CLASSES = 8192


def main() -> None:
    torch.manual_seed(0)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(0.5, CAP_BYTES / total))
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, CLASSES)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    epoch_logits = []  # THE BUG: should hold logits.detach().cpu() (or running counts)
    for step in range(10_000):
        inputs = torch.randn(1024, 512, device="cuda")
        targets = torch.randint(0, CLASSES, (1024,), device="cuda")
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        epoch_logits.append(logits)
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} ({len(epoch_logits)} logits kept)")


if __name__ == "__main__":
    main()

"""Saves the whole model and deep-copies it (EMA) inside the training loop, as older
examples and most EMA code do: nothing perfdoctor attaches may get in the way.

Two models, trained together by one optimizer, cover both ways perfdoctor hooks a root:
`plain` has no hook of the script's (perfdoctor's hooks live in a dict of their own, and
its copies must carry no forward hook at all); `hooked` has a forward hook of the script's,
registered first (perfdoctor's hooks join the script's dict and copy as inert hooks), which
the script removes through its handle after step 2.
"""

import copy
import io
import pickle
import sys

import torch
from torch import nn

CALLS = [0]


def count_calls(module, args, output):
    CALLS[0] += 1


def foreign_hooks(model: nn.Module) -> list[str]:
    """Hooks in a copy that the script did not register."""
    return [
        repr(hook)
        for module in model.modules()
        for name in ("_forward_hooks", "_forward_pre_hooks")
        for hook in getattr(module, name).values()
        if hook is not count_calls and "inert_hook" not in repr(hook)
    ]


def save_and_copy(model: nn.Module, x: torch.Tensor) -> list[nn.Module]:
    ema = copy.deepcopy(model)  # after the roots are hooked
    ema(x)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    loaded(x)
    pickle.loads(pickle.dumps(model))
    return [ema, loaded]


def main() -> None:
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    hooked = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    handle = hooked.register_forward_hook(count_calls)
    opt = torch.optim.SGD([*plain.parameters(), *hooked.parameters()], lr=0.01)
    for step in range(40):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = nn.functional.mse_loss(plain(x), y) + nn.functional.mse_loss(hooked(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        plain_copies, hooked_copies = save_and_copy(plain, x), save_and_copy(hooked, x)
        foreign = [
            hook for copied in plain_copies + hooked_copies for hook in foreign_hooks(copied)
        ]
        if foreign or any(copied._forward_hooks for copied in plain_copies):
            print(f"perfdoctor hooks travelled with the copy: {foreign}", file=sys.stderr)
            sys.exit(3)
        if handle is not None and step == 2:
            handle.remove()
            if count_calls in hooked._forward_hooks.values():
                print("the script's own hook handle could not remove it", file=sys.stderr)
                sys.exit(4)
            handle = None
        print(f"step {step} saved and copied", flush=True)


if __name__ == "__main__":
    main()

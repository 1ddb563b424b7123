"""Saves the whole model and deep-copies it (EMA) inside the training loop, as older
examples and most EMA code do: nothing perfdoctor attaches may get in the way.

With --own-hook the script registers a forward hook of its own first (removed at the end,
through its handle)."""

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


def main() -> None:
    own_hook = "--own-hook" in sys.argv
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    handle = model.register_forward_hook(count_calls) if own_hook else None
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ema = copy.deepcopy(model)
    for step in range(40):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema = copy.deepcopy(model)  # after the roots are hooked
        ema(x)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        loaded(x)
        pickle.loads(pickle.dumps(model))
        foreign = foreign_hooks(loaded) + foreign_hooks(ema)
        if foreign or (not own_hook and (loaded._forward_hooks or ema._forward_hooks)):
            print(f"perfdoctor hooks travelled with the copy: {foreign}", file=sys.stderr)
            sys.exit(3)
        if handle is not None and step == 2:
            handle.remove()
            if count_calls in model._forward_hooks.values():
                print("the script's own hook handle could not remove it", file=sys.stderr)
                sys.exit(4)
        print(f"step {step} saved and copied", flush=True)


if __name__ == "__main__":
    main()

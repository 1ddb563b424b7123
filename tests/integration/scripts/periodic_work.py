"""A loop that does heavy work between some optimizer steps, as RL and evaluation loops do.

`--mode rollout` (PPO's shape): every update first plays `--rollout-steps` environment steps
(a no_grad forward of the policy, then the "environment": Python and numpy work), then runs
`--every` minibatch optimizer steps on what it collected.
`--mode eval`: plain training, and every `--every` optimizer steps an evaluation (model.eval(),
no_grad forwards over `--eval-batches` batches) and a checkpoint (torch.save).
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn


def environment_step(state: np.ndarray, action: int) -> np.ndarray:
    # Stands for a simulator: CPU work outside torch.
    for _ in range(20):
        state = np.tanh(state * 1.01 + action * 0.01)
    return state


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("rollout", "eval"), default="rollout")
    p.add_argument("--every", type=int, default=8)
    p.add_argument("--updates", type=int, default=100)
    p.add_argument("--rollout-steps", type=int, default=600)
    p.add_argument("--eval-batches", type=int, default=20)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # Training steps of a few ms, so that a busy machine's jitter stays below the 3x of a
    # long step (analyze/loop_account.py).
    policy = nn.Sequential(
        nn.Linear(16, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 4)
    )
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    checkpoint = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    state = np.zeros(16, dtype=np.float32)
    data_x, data_y = torch.randn(256, 16), torch.randint(0, 4, (256,))
    for _update in range(args.updates):
        if args.mode == "rollout":
            rows = []
            with torch.no_grad():
                for _ in range(args.rollout_steps):
                    obs = torch.from_numpy(state).float().unsqueeze(0)
                    action = int(policy(obs).argmax())
                    state = environment_step(state, action).astype(np.float32)
                    rows.append(obs[0])
            data_x = torch.stack(rows[-256:])
        else:
            policy.eval()
            with torch.no_grad():
                for _ in range(args.eval_batches):
                    policy(torch.randn(256, 16)).sum().item()
            policy.train()
            torch.save(policy.state_dict(), checkpoint)
        for _ in range(args.every):
            loss = nn.functional.cross_entropy(policy(data_x), data_y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()

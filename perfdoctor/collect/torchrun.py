"""`perfdoctor profile --nproc-per-node N`: the child is torch's own launcher, not an imitation.

perfdoctor starts `python -m torch.distributed.run` (torchrun's elastic agent) with the
script as the user would: `--standalone --nproc-per-node N train.py args` on one node, or
`--nnodes M --node-rank K --rdzv-endpoint HOST:PORT` (static rendezvous, the same on every
node) across nodes. The agent sets every rank's environment, rendezvous, error files and
restarts as the installed torch does; perfdoctor's probes come up in each rank through the
process-tree hook (collect/process_tree.py) and the lead rank's record becomes the run's
(collect/tree_settle.py). The agent itself never trains: the hook leaves it alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.model import RunSpec

TORCHRUN_MODULE = "torch.distributed.run"


@dataclass(frozen=True)
class Nodes:
    """Several nodes: this one's rank and where node 0's rendezvous store listens."""

    nnodes: int
    node_rank: int
    endpoint: str  # HOST:PORT of node 0

    def args(self) -> list[str]:
        host, _, port = self.endpoint.rpartition(":")
        return [
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.node_rank),
            "--master-addr",
            host,
            "--master-port",
            port,
        ]


def launcher_args(nproc: int, nodes: Nodes | None = None) -> list[str]:
    """torchrun's own options for N local ranks (one node, or one of several)."""
    where = nodes.args() if nodes is not None else ["--standalone"]
    return [*where, "--nproc-per-node", str(nproc), "--max-restarts", "0"]


def root_command(
    spec: RunSpec, python: str, nproc: int, nodes: Nodes | None = None
) -> list[str] | None:
    """The child's command line: the user's own launcher command as written, torchrun for
    several ranks, or None for one plain process (the bootstrap)."""
    target = spec.target
    if target.kind == "command":
        return [target.name, *target.argv]
    if nproc <= 1 and nodes is None:
        return None
    script = ["-m", target.name] if target.kind == "module" else [target.name]
    return [
        python,
        "-m",
        TORCHRUN_MODULE,
        *launcher_args(max(nproc, 1), nodes),
        *script,
        *target.argv,
    ]

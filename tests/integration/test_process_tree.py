"""Training in processes the script starts itself: torch.multiprocessing.spawn DDP workers and
Hogwild multiprocessing.Process trainers (gloo, CPU, 127.0.0.1).

Each profile bounds its wait (a hang fails instead of blocking) and checks that no process
of the run is left running afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from cli_in_process import profile_in_process, run_in_process
from load_limits import scaled

from perfdoctor.rundir import load_manifest, load_steps, rank_dir

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts"
PLAN = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-apply"]
PLAN_TOTAL = 2 + 6 + 1 + 2
WAIT_S = 180


def profile(tmp: Path, script: str, *args: str, options: tuple[str, ...] = ()) -> dict[str, Any]:
    runs = tmp / "runs"
    proc = profile_in_process(
        "--out", runs, "--timeout", f"{scaled(WAIT_S):.0f}", *PLAN, *options,
        SCRIPTS / script, *args,
        cwd=tmp,
    )  # fmt: skip
    session = (runs / "latest").resolve()
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (session / "report.json").is_file(), log
    assert_nothing_left(session)
    return {
        "proc": proc,
        "session": session,
        "baseline": session / "baseline",
        "report": json.loads((session / "report.json").read_text()),
        "md": (session / "report.md").read_text(),
        "log": log,
    }


def assert_nothing_left(root: Path) -> None:
    """No process of the run is alive (found by the run named in their environment)."""
    left = []
    for proc in psutil.process_iter():
        try:
            tree = proc.environ().get("PERFDOCTOR_TREE", "")
            if tree.startswith(str(root.resolve())) and proc.status() != psutil.STATUS_ZOMBIE:
                left.append((proc.pid, proc.cmdline()))
        except (psutil.Error, OSError):
            continue
    assert not left


def run_two_nodes(
    tmp_path: Path,
    script: str,
    endpoint: str,
    prefix: Callable[[int], list[str]] = lambda node: [],
) -> None:
    """`perfdoctor profile --nnodes 2` once per node (node 1 first, as a scheduler may start
    them), each into tmp_path/node<K>, `prefix(node)` before the command; both must exit 0."""
    nodes = []
    for node in (1, 0):
        out = tmp_path / f"node{node}"
        command = [*prefix(node), sys.executable, "-m", "perfdoctor", "profile", "--out", str(out)]
        command += [*PLAN, "--nnodes", "2", "--node-rank", str(node), "--rdzv-endpoint", endpoint]
        nodes.append(
            subprocess.Popen(
                [*command, script],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [proc.communicate(timeout=scaled(WAIT_S))[0] for proc in nodes]
    # Each node's own tail: one joined tail kept only node 0's when a rank of it crashed.
    tails = [f"--- node {node} ---\n{log[-4000:]}" for node, log in zip((1, 0), logs, strict=True)]
    assert [proc.returncode for proc in nodes] == [0, 0], "\n".join(tails)


def processes(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "processes.json").read_text())["processes"]


@pytest.fixture(scope="module")
def spawn_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One completed spawn-DDP session (its crash, timeout, Ctrl-C and SIGTERM: the failure
    matrix, test_failure_matrix.py)."""
    return profile(tmp_path_factory.mktemp("spawn"), "spawn_ddp.py")


def test_spawn_ddp_workers_are_profiled_as_ranks(spawn_run: dict[str, Any]) -> None:
    run = spawn_run
    assert run["proc"].returncode == 0, run["log"]
    baseline = run["baseline"]
    manifest = load_manifest(baseline)
    assert manifest.status == "completed" and manifest.steps_seen == PLAN_TOTAL
    listed = processes(baseline)
    assert [(p["rank"], p["record"], p["kind"]) for p in listed] == [
        (0, ".", "multiprocessing-spawn"),
        (1, "ranks/1", "multiprocessing-spawn"),
    ]
    for path in (baseline, rank_dir(baseline, 1)):
        assert len(load_steps(path)) == PLAN_TOTAL
        assert list(path.glob("*.pt.trace.json*"))  # each rank traced its profiled steps
    # The `python -c pass` child and the main process never trained: no record of theirs.
    assert not (baseline / "procs").exists() and not rank_dir(baseline, 2).exists()
    assert "main: workers done" in (baseline / "stdout.log").read_text()  # main went on
    report = run["report"]
    assert report["facts"]["world_size"] == 2 and report["facts"]["ranks_launched"] == 2
    assert report["findings"], report
    assert "world size 2 (2 ranks, gloo)" in run["md"]
    assert "rank 0 (pid" in run["md"] and "rank 1 (pid" in run["md"]
    # Every rank in the ranks table, each with its share of the step in DDP's all-reduce.
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert all(0 < r["comm_frac"] <= 1 and r["steps"] == 6 for r in report["ranks"])
    assert report["facts"]["rank_comm_frac_max"] > 0
    assert "## Ranks" in run["md"]


def test_hogwild_trainers_are_profiled_without_ranks(tmp_path: Path) -> None:
    """One trainer per start method in one run (they share nothing but the model): each is
    found and profiled whichever way multiprocessing started it. The trainers update by hand
    (steps are backward calls) after one warm-up step: torch.optim's first use, and the FLOP
    count of a second warm-up step, each import torch._dynamo in every trainer (about 2.5 s
    of CPU apiece), and what is read here is how each was started."""
    methods = ["spawn", "fork", "forkserver"]
    run = profile(
        tmp_path,
        "hogwild.py",
        *("--start-method", ",".join(methods), "--update-by-hand"),
        options=("--warmup", "1"),
    )
    assert run["proc"].returncode == 0, run["log"]
    baseline = run["baseline"]
    assert load_manifest(baseline).status == "completed"
    listed = processes(baseline)
    assert [(p["rank"], p["record"]) for p in listed] == [
        (None, "."),
        (None, "ranks/1"),
        (None, "ranks/2"),
    ]
    assert all(p["steps"] == PLAN_TOTAL - 1 for p in listed)  # one warm-up step fewer
    # The forkserver's trainer is forked from a server that imported torch (it preloads the
    # script): it may keep the server's probes as a forked child does.
    kinds = sorted(p["kind"] for p in listed)
    assert kinds in (
        sorted(f"multiprocessing-{method}" for method in methods),
        ["multiprocessing-fork", "multiprocessing-fork", "multiprocessing-spawn"],
    ), kinds
    assert "main: trainers done [0, 0, 0]" in (baseline / "stdout.log").read_text()
    report = run["report"]
    assert "rank-straggler" not in [f["rule_id"] for f in report["findings"]]
    assert not any("never initialised a process group" in w for w in report["warnings"])
    assert "3 training processes, no process group" in run["md"]
    # Every trainer in the ranks table; without a process group no rank, no communication.
    assert [(r["rank"], r["comm_frac"]) for r in report["ranks"]] == [(None, None)] * 3


needs_torchrun = pytest.mark.skipif(
    shutil.which("torchrun") is None, reason="torch's torchrun script is not on PATH"
)


@needs_torchrun
def test_a_wrapped_torchrun_command_profiles_every_rank(tmp_path: Path) -> None:
    script = str(SCRIPTS / "ddp_train.py")
    run = profile_command(tmp_path, "torchrun", "--nproc-per-node", "2", script)
    assert run["proc"].returncode == 0, run["log"]
    baseline = run["baseline"]
    assert load_manifest(baseline).status == "completed"
    listed = processes(baseline)
    assert [(p["rank"], p["kind"], p["record"]) for p in listed] == [
        (0, "torchrun", "."),
        (1, "torchrun", "ranks/1"),
    ]
    spec = json.loads((baseline / "spec.json").read_text())
    assert spec["target"] == {"kind": "command", "name": "torchrun", "argv": list(run["argv"])}
    assert run["report"]["facts"]["world_size"] == 2
    assert "torchrun --nproc-per-node 2" in run["md"]


@needs_torchrun
def test_a_wrapped_command_keeps_a_failing_ranks_exit_code_and_error(tmp_path: Path) -> None:
    script = str(SCRIPTS / "ddp_train.py")
    args = ("--nproc-per-node", "2", script, "--crash-rank", "1")
    run = profile_command(tmp_path, "torchrun", *args)
    assert run["proc"].returncode == 1, run["log"]  # torchrun's own exit code
    manifest = load_manifest(run["baseline"])
    assert manifest.status == "script_crashed"
    assert manifest.error == "rank 1: ValueError: planted crash on rank 1 at step 3"


def profile_command(tmp: Path, *command: str) -> dict[str, Any]:
    runs = tmp / "runs"
    proc = profile_in_process(
        "--out", runs, "--timeout", f"{scaled(WAIT_S):.0f}", *PLAN, "--", *command, cwd=tmp
    )
    session = (runs / "latest").resolve()
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (session / "report.json").is_file(), log
    assert_nothing_left(session)
    return {
        "proc": proc,
        "argv": command[1:],
        "session": session,
        "baseline": session / "baseline",
        "report": json.loads((session / "report.json").read_text()),
        "md": (session / "report.md").read_text(),
        "log": log,
    }


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_nodes_end_in_node_0s_report(tmp_path: Path, two_hosts: TwoHosts) -> None:
    """Two `perfdoctor profile --nnodes 2` processes, as on two machines (own --out each):
    node 1's rank reaches node 0's report through torch.distributed's store, over a real
    address where network namespaces can be made (two_hosts)."""
    endpoint, prefix = two_hosts
    script = str(SCRIPTS / "ddp_train.py")
    run_two_nodes(tmp_path, script, endpoint, prefix)
    node0 = (tmp_path / "node0" / "latest").resolve()
    node1 = (tmp_path / "node1" / "latest").resolve()
    for session in (node0, node1):
        assert_nothing_left(session)
    baseline = node0 / "baseline"
    listed = processes(baseline)
    assert [(p["rank"], p["node_rank"], p["record"]) for p in listed] == [
        (0, 0, "."),
        (1, 1, "ranks/1"),
    ]
    assert len(load_steps(rank_dir(baseline, 1))) == PLAN_TOTAL
    report = json.loads((node0 / "report.json").read_text())
    assert report["facts"]["world_size"] == 2 and report["facts"]["ranks_launched"] == 2
    # The ranks table names each rank's node, with its communication share.
    assert [r["worker"].split(",")[0] for r in report["ranks"]] == ["node 0", "node 1"]
    assert all(r["comm_frac"] is not None for r in report["ranks"])
    # Node 1 keeps its own rank's record and report as well.
    assert [p["rank"] for p in processes(node1 / "baseline")] == [1]


def test_several_nodes_need_an_endpoint_and_no_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused before any child starts: in this process (a `python -m perfdoctor` process
    # costs a second of imports; test_cli_errors.py keeps a real one for such an error).
    monkeypatch.chdir(tmp_path)
    script = str(SCRIPTS / "ddp_train.py")
    for extra in ([], ["--rdzv-endpoint", "127.0.0.1:1"], ["--node-rank", "2", "--no-apply"]):
        done = run_in_process("profile", "--nnodes", "2", *extra, script)
        assert done.returncode == 2, (extra, done.stderr)
        assert "perfdoctor: error:" in done.stderr, (extra, done.stderr)


def _netns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


# Where node 1 reaches node 0 (the rendezvous endpoint), and what runs node K's command there.
TwoHosts = tuple[str, Callable[[int], list[str]]]


@pytest.fixture
def two_hosts() -> Iterator[TwoHosts]:
    """Two network namespaces joined by a veth pair, node 1 reaching node 0 at 10.213.0.1,
    not over loopback, where they can be made (root, iproute2); else both nodes on this
    machine's loopback."""
    made = _netns_pair(f"{os.getpid() % 100000}")
    if made is None:
        yield f"127.0.0.1:{free_port()}", lambda node: []
        return
    names, veths = made
    try:
        yield (
            "10.213.0.1:29533",
            lambda node: [
                *("ip", "netns", "exec", names[node]),
                *("env", f"GLOO_SOCKET_IFNAME={veths[node]}"),
            ],
        )
    finally:
        _netns_delete(names)


def _netns_pair(tag: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """Two namespaces pd0-/pd1-<tag> joined by veths pdv0-/pdv1-<tag>; None where not made."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        return None
    names = (f"pd0-{tag}", f"pd1-{tag}")
    veths = (f"pdv0-{tag}", f"pdv1-{tag}")
    if _netns("netns", "add", names[0]).returncode != 0:
        return None
    steps = [
        ("netns", "add", names[1]),
        ("link", "add", veths[0], "type", "veth", "peer", "name", veths[1]),
    ]
    for k in (0, 1):
        steps += [
            ("link", "set", veths[k], "netns", names[k]),
            ("-n", names[k], "addr", "add", f"10.213.0.{k + 1}/24", "dev", veths[k]),
            ("-n", names[k], "link", "set", veths[k], "up"),
            ("-n", names[k], "link", "set", "lo", "up"),
        ]
    for step in steps:
        if _netns(*step).returncode != 0:
            _netns("link", "del", veths[0])  # a pair not yet moved into the namespaces
            _netns_delete(names)
            return None
    return names, veths


def _netns_delete(names: tuple[str, str]) -> None:
    for name in names:
        _netns("netns", "del", name)

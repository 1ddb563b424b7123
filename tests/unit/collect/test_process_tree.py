"""Process-tree instrumentation without torch: the start-up hook, stopping, settling records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from load_limits import scaled

from perfdoctor import rundir
from perfdoctor.collect import tree_settle
from perfdoctor.collect.tree_settle import INJECT_DIR, TREE_ENV, end_tree, settle, tree_env


def run_python(code: str, env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "-c", code] if not argv else [sys.executable, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=True,
    )
    return done.stdout + done.stderr


def test_tree_env_puts_the_hook_first_and_names_the_run(tmp_path: Path) -> None:
    env = tree_env(tmp_path, {"PYTHONPATH": "/a:/b", "X": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(INJECT_DIR), "/a", "/b"]
    assert env[TREE_ENV] == str(tmp_path.resolve()) and env["X"] == "1"
    assert tree_env(tmp_path, {})["PYTHONPATH"] == str(INJECT_DIR)


def test_a_python_that_never_imports_torch_gets_nothing_but_the_hook(tmp_path: Path) -> None:
    env = tree_env(tmp_path, dict(os.environ))
    code = (
        "import sys; print('torch' in sys.modules, 'perfdoctor' in sys.modules, "
        "[type(f).__name__ for f in sys.meta_path][0])"
    )
    assert run_python(code, env).split() == ["False", "False", "_TorchImportHook"]
    assert not (tmp_path / rundir.PROCS_DIR).exists()


def test_launchers_and_the_perfdoctor_child_are_left_alone(tmp_path: Path) -> None:
    env = tree_env(tmp_path, dict(os.environ))
    code = "import sys; print(any(type(f).__name__ == '_TorchImportHook' for f in sys.meta_path))"
    script = tmp_path / "torchrun"
    script.write_text(code)
    assert run_python("", env, str(script)).strip() == "False"  # argv[0] named torchrun
    hooked = "import perfdoctor.collect.bootstrap as b; " + code  # the bootstrap's own -c
    assert run_python(hooked, env).strip() == "False"


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "site-theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins; builtins.THEIRS = 42\n")
    env = tree_env(tmp_path, {**os.environ, "PYTHONPATH": str(theirs)})
    out = run_python("import builtins, sys; print(builtins.THEIRS, sys.meta_path[0])", env)
    assert out.startswith("42 <") and "_TorchImportHook" in out


def write_trainer(base: Path, key: str, *, rank: int | None, pid: int, steps: int, **obs) -> Path:
    path = base / rundir.PROCS_DIR / key
    path.mkdir(parents=True)
    rows = [{"index": i, "phase": "timed", "wall_ms": 1.0 + i} for i in range(steps)]
    (path / rundir.STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / f"h_{pid}.1.pt.trace.json.gz").write_bytes(b"x")
    process = {"pid": pid, "host": "h", "kind": "multiprocessing-spawn", "rank": rank}
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, {"process": process, **obs})
    return path


def test_settle_promotes_rank_0_and_files_the_others_by_rank(tmp_path: Path) -> None:
    run = tmp_path / "baseline"
    run.mkdir()
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, {"steps_seen": 0, "warnings": ["root"]})
    (run / "h_1.9.pt.trace.json.gz").write_bytes(b"root window")  # the idle starter's
    write_trainer(run, "h-30", rank=1, pid=30, steps=4)
    write_trainer(run, "h-20", rank=0, pid=20, steps=5, warnings=["lead"])
    warnings = settle(run)
    assert rundir.find_traces(run) == [run / "h_20.1.pt.trace.json.gz"]
    assert len(rundir.load_steps(run)) == 5
    obs = rundir.read_json(run / rundir.OBSERVATIONS_FILE)
    assert obs["process"]["rank"] == 0 and obs["warnings"] == ["root", "lead"]
    assert [k for k, _ in rundir.rank_dirs(run)] == [1]
    assert len(rundir.load_steps(rundir.rank_dir(run, 1))) == 4
    assert not (run / rundir.PROCS_DIR).exists()
    listed = rundir.read_json(run / rundir.PROCESSES_FILE)["processes"]
    assert [(p["rank"], p["record"], p["steps"]) for p in listed] == [
        (0, ".", 5),
        (1, "ranks/1", 4),
    ]
    assert warnings == [
        "trained in 2 processes: rank 0 (pid 20, 5 steps, this record), "
        "rank 1 (pid 30, 4 steps, ranks/1); 2 worker(s) started with (torch.)multiprocessing "
        "(spawn), with a process group (torch.distributed)"
    ]


def test_settle_names_a_crashed_rank_and_keeps_the_starters_ending(tmp_path: Path) -> None:
    run = tmp_path / "baseline"
    run.mkdir()
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, {"steps_seen": 0, "script_exit_code": 3})
    write_trainer(run, "h-20", rank=0, pid=20, steps=5)
    write_trainer(run, "h-21", rank=1, pid=21, steps=3, error="ValueError: boom")
    settle(run)
    obs = rundir.read_json(run / rundir.OBSERVATIONS_FILE)
    assert obs["error"] == "rank 1: ValueError: boom" and obs["script_exit_code"] == 3


def test_settle_without_ranks_numbers_processes_in_start_order(tmp_path: Path) -> None:
    run = tmp_path / "baseline"
    run.mkdir()
    for pid in (12, 11, 13):
        write_trainer(run, f"h-{pid}", rank=None, pid=pid, steps=2)
    (run / rundir.PROCS_DIR / "h-14").mkdir()  # a DataLoader worker's: never trained
    settle(run)
    listed = rundir.read_json(run / rundir.PROCESSES_FILE)["processes"]
    assert [(p["pid"], p["record"]) for p in listed] == [
        (11, "."),
        (12, "ranks/1"),
        (13, "ranks/2"),
    ]


def test_settle_keeps_a_starter_that_trained_itself(tmp_path: Path) -> None:
    run = tmp_path / "baseline"
    run.mkdir()
    (run / rundir.STEPS_FILE).write_text('{"index": 0, "phase": "timed", "wall_ms": 1}\n')
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, {"steps_seen": 1})
    write_trainer(run, "h-5", rank=None, pid=5, steps=2)
    settle(run)
    assert rundir.read_json(run / rundir.OBSERVATIONS_FILE) == {"steps_seen": 1}
    assert len(rundir.load_steps(rundir.rank_dir(run, 1))) == 2


def test_settle_with_no_trainer_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / rundir.PROCS_DIR / "h-1").mkdir(parents=True)
    assert settle(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_end_tree_finds_processes_by_their_run_not_their_parent(tmp_path: Path) -> None:
    env = {**os.environ, TREE_ENV: str(tmp_path.resolve())}
    # A process in a session of its own whose parent is gone: what a torchrun rank can be.
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(300)'], start_new_session=True, "
            "stdout=subprocess.DEVNULL); print(p.pid)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    orphan = int(starter.communicate(timeout=scaled(30))[0])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        assert orphan in tree_settle.tree_pids(tmp_path)
        assert other.pid not in tree_settle.tree_pids(tmp_path)
        assert orphan in end_tree(tmp_path, grace_s=2.0)
        deadline = time.monotonic() + scaled(10)
        while psutil.pid_exists(orphan) and time.monotonic() < deadline:
            if psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert not tree_settle.tree_pids(tmp_path)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_asking_whether_torch_exists_does_not_use_the_hook_up(tmp_path: Path) -> None:
    env = tree_env(tmp_path, dict(os.environ))
    code = (
        "import importlib.util, sys; importlib.util.find_spec('torch'); "
        "print(any(type(f).__name__ == '_TorchImportHook' for f in sys.meta_path))"
    )
    assert run_python(code, env).strip() == "True"


def test_a_record_travels_between_nodes_as_one_value(tmp_path: Path) -> None:
    from perfdoctor.collect.process_tree import _pack, _unpack

    record = tmp_path / "rank-2"
    record.mkdir()
    (record / rundir.STEPS_FILE).write_text('{"index": 0}\n')
    (record / "h_9.1.pt.trace.json.gz").write_bytes(b"\x1f\x8b trace")
    (record / "sub").mkdir()  # only the record's own files travel
    _unpack(_pack(record), tmp_path / "node0" / "procs" / "node-rank-2")
    got = tmp_path / "node0" / "procs" / "node-rank-2"
    assert sorted(p.name for p in got.iterdir()) == ["h_9.1.pt.trace.json.gz", "steps.jsonl"]
    assert (got / "h_9.1.pt.trace.json.gz").read_bytes() == b"\x1f\x8b trace"


def test_how_a_process_was_started_is_read_from_its_command_line(monkeypatch) -> None:
    from perfdoctor.collect import process_tree

    spawn = ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"]
    monkeypatch.setattr(sys, "orig_argv", [*spawn, "--multiprocessing-fork"], raising=False)
    assert process_tree.process_kind() == "multiprocessing-spawn"
    monkeypatch.setattr(sys, "orig_argv", ["python", "train.py"], raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert process_tree.process_kind() == "torchrun"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert process_tree.process_kind() == "subprocess"

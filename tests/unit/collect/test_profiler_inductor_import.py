"""The profiler window's start leaves torch._inductor unimported (collect/profiler_window.py):
torch.profiler's start asks `hasattr(torch, "_inductor")`, which on torch's lazy module
imports inductor and dynamo (about 2 s of CPU) in a process that never compiled."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor.collect.profiler_window import _inductor_left_unimported


def test_the_lazy_attribute_is_withheld_during_the_call_and_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As in a process that never imported inductor (another test of this worker may have).
    monkeypatch.delitem(sys.modules, "torch._inductor", raising=False)
    fake = SimpleNamespace(_lazy_modules={"_dynamo", "_inductor", "onnx"})
    with _inductor_left_unimported(fake):
        assert fake._lazy_modules == {"_dynamo", "onnx"}
    assert fake._lazy_modules == {"_dynamo", "_inductor", "onnx"}
    with pytest.raises(RuntimeError), _inductor_left_unimported(fake):
        raise RuntimeError("the profiler did not start")
    assert "_inductor" in fake._lazy_modules  # restored on an error too


def test_nothing_changes_where_inductor_is_imported_or_torch_has_no_lazy_modules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = SimpleNamespace(_lazy_modules={"_dynamo", "_inductor"})
    monkeypatch.setitem(sys.modules, "torch._inductor", SimpleNamespace())
    with _inductor_left_unimported(fake):
        assert fake._lazy_modules == {"_dynamo", "_inductor"}
    monkeypatch.delitem(sys.modules, "torch._inductor")
    bare = SimpleNamespace()  # a torch without the lazy set: nothing to do
    with _inductor_left_unimported(bare):
        assert not hasattr(bare, "_lazy_modules")


# A fresh interpreter: the test process may have imported inductor already (another test).
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch

    from perfdoctor.collect.profiler_window import ProfilerWindow

    window = ProfilerWindow(Path(sys.argv[1]), first_step=2, steps=1)
    window.timed_step(0.001)
    x = torch.randn(16, 16)
    for index in range(1, 4):  # the profiler's warm-up step, the profiled one, the one after
        window.on_step_start(index)
        x = torch.tanh(x @ x)
    window.finish()
    print("started", window.info.get("started"))
    print("after the window", "torch._inductor" in sys.modules, "torch._dynamo" in sys.modules)
    hasattr(torch, "_inductor")  # torch's own lazy attribute still works afterwards
    print("after the attribute", "torch._inductor" in sys.modules)
    """
)


def test_a_window_in_a_process_that_never_compiled_imports_no_inductor(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "started True" in lines, done.stdout
    assert "after the window False False" in lines, done.stdout
    assert "after the attribute True" in lines, done.stdout

"""compile.json + priced regions -> ranked issues with fixes (analyze/compile_diag.py).
The event texts are dynamo's own, as torch 2.13 writes them (collect/compile_watch.py)."""

from __future__ import annotations

import json

import msgspec
import pytest

from perfdoctor import run_schema
from perfdoctor.analyze.compile_diag import diagnose_compile
from perfdoctor.analyze.trace_compiled import CompiledRegions

F = "/proj/train.py"
ITEM = (
    f"Graph break in user code at {F}:50\nGraph Break Reason: Encountered graph break when "
    "attempting to trace CALL: a function call, e.g. f(x, y):\n\nUnsupported Tensor.item() "
    "call with capture_scalar_outputs=False\n  Explanation: Dynamo does not support tracing "
    "`Tensor.item()`\n  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`"
)
DISABLE = (
    f"Graph break in user code at {F}:53\nGraph Break Reason: Encountered graph break when "
    "attempting to trace CALL: a function call, e.g. f(x, y):\n\nSkip calling "
    "`torch.compiler.disable()`d function\n  Hint: Remove the `torch.compiler.disable` call"
)


def _storm(n: int) -> str:
    one = (
        f"2/{n - 1}: self.step == {n - 1}          # h = h * self.step  # train.py:57 in "
        f'fwd\nUser stack trace:\n  File "{F}", line 57, in fwd\n    h = h * self.step'
    )
    older = "2/0: self.step == 0   # h = h * self.step"
    return json.dumps([one, older]) if n > 1 else one


def _log() -> run_schema.CompileLog:
    frames = [
        {"compile_id": "0/0", "step": 0, "compile_s": 10.0},
        {"compile_id": "1/0", "step": 0, "compile_s": 1.0},
        {"compile_id": "2/0", "step": 0, "compile_s": 3.0},
        *({"compile_id": f"2/{n}", "step": n, "compile_s": 0.3} for n in range(1, 10)),
        {"compile_id": "3/1", "step": 6, "compile_s": 2.0},  # model.eval() inside the loop
    ]
    return run_schema.compile_log(
        {
            "frames": frames,
            "graph_breaks": [
                {
                    "compile_id": "0/0",
                    "step": 0,
                    "text": ITEM,
                    "code": "    if h.max().item() > 1:",
                },
                {"compile_id": "1/0", "step": 0, "text": DISABLE, "code": "    h = helper(h)"},
            ],
            "recompiles": [
                *({"compile_id": f"2/{n}", "step": n, "text": _storm(n)} for n in range(1, 10)),
                {
                    "compile_id": "3/1",
                    "step": 6,
                    "text": "3/0: L['self'].training == True   # x = self.net(x)",
                },
            ],
            "log_lines": [
                {
                    "kind": "cudagraph_skip",
                    "step": 1,
                    "message": "skipping cudagraphs due to mutated inputs (1 instances)",
                },
                {
                    "kind": "cudagraph_skip",
                    "step": 2,
                    "message": "skipping cudagraphs due to mutated inputs (1 instances)",
                },
            ],
            "counters": {"inductor": {"cudagraph_skips": 2}},
        }
    )


def _regions() -> CompiledRegions:
    return CompiledRegions(
        steps=3,
        compiled_ms_per_step=5.0,
        region_ms_per_step=8.0,
        eager_ms_per_step={"0/0": 0.5, "1/0": 2.0, "2/0": 0.1, "entry": 0.05},
        entries_per_step={"0/0": 1.0, "1/0": 1.0, "2/0": 1.0},
    )


def test_breaks_and_recompiles_are_found_at_their_lines_priced_and_ranked() -> None:
    d = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15))
    kinds = [(i.kind, i.where) for i in d.issues]
    # storm: recompiles 2/5..2/9 fall in the measured steps: 5 x 0.3 s over 10 steps
    assert kinds[:3] == [
        ("recompile", "train.py:57"),
        ("graph_break", "train.py:53"),
        ("graph_break", "train.py:50"),
    ]
    storm, disable, item = d.issues[:3]
    assert storm.cost_ms_per_step == pytest.approx(150.0)
    assert storm.compiles == 9 and storm.per_step == pytest.approx(0.5)
    assert "self.step_t" in (storm.rewritten or "")
    assert storm.reason == "guard failed: self.step == …"
    assert disable.cost_ms_per_step == pytest.approx(2.0)
    assert "torch.compiler.disable" in disable.fix
    assert item.cost_ms_per_step == pytest.approx(0.5)
    assert item.rewritten == "    x = torch.where(h.max() > 1, <x as the branch changes it>, x)"
    # what the breaks were charged; 2/0's return path and the first frame's guards are not
    assert d.eager_ms_per_step == pytest.approx(2.5)
    assert any("0.150 ms/step" in n for n in d.notes)
    assert d.graph_breaks == 2 and d.recompiles == 10


def test_a_train_eval_switch_is_listed_but_not_a_cost_inside_training() -> None:
    d = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15))
    switch = next(i for i in d.issues if i.cause == "train/eval switch")
    assert switch.cost_ms_per_step is None
    assert "not a cost inside training" in switch.cost_basis


def test_cudagraph_skips_are_listed_once_with_their_reason_and_fix() -> None:
    d = diagnose_compile(_log(), _regions())
    skips = [i for i in d.issues if i.kind == "cudagraph_skip"]
    assert len(skips) == 1 and skips[0].compiles == 2
    assert skips[0].cause == "input mutation"
    assert d.cudagraph_skips == 2


def test_without_a_trace_breaks_are_counted_not_priced() -> None:
    d = diagnose_compile(_log(), None, measured_steps=range(5, 15))
    breaks = [i for i in d.issues if i.kind == "graph_break"]
    assert breaks and all(i.cost_ms_per_step is None for i in breaks)
    assert any("not priced" in n for n in d.notes)


def test_profiled_eager_time_is_scaled_to_the_timed_step() -> None:
    d = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15), profiled_scale=0.5)
    disable = next(i for i in d.issues if i.where == "train.py:53")
    assert disable.cost_ms_per_step == pytest.approx(1.0)


@pytest.mark.parametrize(
    "guard",
    [
        "0/0: L['self'].training == False   # x = self.net(x)",
        "0/0: GLOBAL_STATE changed: grad_mode    # logits, loss = model(X, Y)",
    ],
)
def test_an_evaluation_in_the_loop_is_a_mode_switch(guard: str) -> None:
    log = run_schema.compile_log(
        {
            "frames": [
                {"compile_id": "0/0", "step": 0, "compile_s": 5.0},
                {
                    "compile_id": "0/1",
                    "step": 6,
                    "compile_s": 5.0,
                    "co_filename": "/proj/model.py",
                    "co_firstlineno": 170,
                },
            ],
            "recompiles": [{"compile_id": "0/1", "step": 6, "text": guard}],
        }
    )
    (issue,) = diagnose_compile(log, None, measured_steps=range(5, 15)).issues
    assert issue.cause == "train/eval switch"
    assert issue.cost_ms_per_step is None
    assert issue.where == "model.py:170"  # the recompiled function, when the guard names no line


def test_a_model_too_small_for_compile_is_said_so() -> None:
    regions = CompiledRegions(
        steps=3,
        compiled_ms_per_step=0.06,
        region_ms_per_step=0.3,
        eager_ms_per_step={"0/0": 0.19, "entry": 0.01},
        entries_per_step={"0/0": 1.0},
    )
    log = run_schema.compile_log({"frames": [{"compile_id": "0/0", "step": 0, "compile_s": 3}]})
    d = diagnose_compile(log, regions, measured_steps=range(3, 11))
    assert d.notes[0].startswith("Entering and leaving compiled code costs more per step")


def test_a_disabled_helper_is_priced_as_an_upper_bound() -> None:
    d = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15))
    disable = next(i for i in d.issues if i.where == "train.py:53")
    item = next(i for i in d.issues if i.where == "train.py:50")
    assert disable.cost_is_bound and disable.cost_basis.startswith("at most")
    assert not item.cost_is_bound


def test_a_price_below_the_noise_is_marked_and_not_ranked() -> None:
    # 0.5 ms (.item()) is below a 1 ms noise floor, 2.0 ms (disable) is not
    d = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15), noise_ms=1.0)
    item = next(i for i in d.issues if i.where == "train.py:50")
    disable = next(i for i in d.issues if i.where == "train.py:53")
    assert item.below_noise and not disable.below_noise
    assert d.noise_ms == 1.0
    # ranked after every priced issue, also after the 0-cost train/eval recompile it led
    priced = [i.where for i in d.issues if i.cost_ms_per_step and not i.below_noise]
    order = [i.where for i in d.issues]
    assert order.index("train.py:50") > max(order.index(w) for w in priced)
    # without a floor it ranks by its price, ahead of the unpriced ones
    plain = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15))
    assert [i.where for i in plain.issues][2] == "train.py:50"


def test_the_noise_floor_is_the_box_plot_notch_of_the_timed_steps() -> None:
    from perfdoctor.analyze.compile_diag import noise_floor_ms

    steps = [10.0] * 8 + [12.0] * 8  # IQR 2 ms, n 16: 1.58 * 2 / 4
    assert noise_floor_ms(steps) == pytest.approx(0.79)
    assert noise_floor_ms([10.0, 11.0, 12.0]) is None  # too few steps to say
    assert noise_floor_ms([10.0] * 20) == 0.0


def test_a_raised_recompile_limit_is_said_and_a_hit_names_the_limit() -> None:
    raised = msgspec.structs.replace(_log(), recompile_limit=64)
    d = diagnose_compile(raised, _regions(), measured_steps=range(5, 15))
    assert d.recompile_limit == 64 and not d.recompile_limit_hit
    assert any("recompile limit was raised to 64" in n for n in d.notes)
    hit = msgspec.structs.replace(
        raised,
        log_lines=[
            run_schema.CompileLogLine(
                kind="recompile_limit", step=9, message="hit config.recompile_limit (64)"
            )
        ],
    )
    d = diagnose_compile(hit, _regions(), measured_steps=range(5, 15))
    assert d.recompile_limit_hit
    assert any(i.cause == "recompile limit (64) hit" for i in d.issues)
    default = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15))
    assert default.recompile_limit is None and not any("raised" in n for n in default.notes)


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        ("smooth_eager = torch.compiler.disable(_smooth)  # why", "smooth_eager = _smooth"),
        ("    f = torch._dynamo.disable(mod.helper)", "    f = mod.helper"),
        ("    @torch.compiler.disable", "# (the @torch.compiler.disable line removed)"),
        # A call site is where dynamo reports the break; the change is not on that line.
        ("        h = smooth_eager(h)  # PLANTED BREAK 2", None),
    ],
)
def test_a_disabled_helper_is_rewritten_only_where_it_is_wrapped(
    code: str, rewritten: str | None
) -> None:
    from perfdoctor.analyze.compile_fixes import break_fix

    fix = break_fix("Skip calling `torch.compiler.disable()`d function", code)
    assert fix.rewritten == rewritten
    assert "torch.compiler.disable" in fix.advice


def test_a_compile_that_failed_and_ran_eager_is_reported() -> None:
    # suppress_errors: a backend failure falls back to eager; the frame still counts as
    # compiled in dynamo's metrics, so "frames compiled 1" alone hid it (issue 31).
    log = run_schema.compile_log(
        {
            "frames": [
                {
                    "compile_id": "0/0",
                    "step": 0,
                    "compile_s": 0.5,
                    "fail_type": "BackendCompilerFailed",
                    "fail_reason": "backend='broken' raised:\nRuntimeError: no\n\nSet "
                    "TORCHDYNAMO_VERBOSE=1 for the internal stack trace",
                }
            ]
        }
    )
    d = diagnose_compile(log, None, measured_steps=range(5, 15))
    assert d.frames_compiled == 1 and d.frames_failed == 1
    assert d.failure is not None and d.failure.startswith("BackendCompilerFailed: backend=")
    assert "RuntimeError: no" in d.failure and "\n" not in d.failure
    assert "failed to compile and ran eager" in d.notes[0]
    assert d.to_json()["frames_failed"] == 1

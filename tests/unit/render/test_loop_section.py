"""The loop account in every renderer (render/loop_section.py), and the step-counting row of an
LBFGS run (closure calls are steps, fewer optimizer.step calls finish)."""

from __future__ import annotations

import io
import json
from dataclasses import replace

from perfdoctor.analyze.loop_account import account_steps, loop_summary
from perfdoctor.model import StepRecord
from perfdoctor.render import summary
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import render_json, report_from_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal

from .fixtures import cpu_report


def ppo_loop() -> dict[str, object]:
    rows = []
    for i in range(30):
        phase = "warmup" if i < 5 else "timed" if i < 15 else "profiled"
        long = i in (0, 16)
        rows.append(
            StepRecord(
                index=i,
                phase=phase,
                wall_ms=1810.0 if long else 57.0,
                nograd_forward_ms=600.0 if long else None,
            )
        )
    return loop_summary(account_steps(rows))


def test_an_unrepresentative_window_is_shown_in_every_renderer() -> None:
    report = replace(cpu_report(), loop=ppo_loop())
    md = render_markdown(report)
    assert "## Where the loop's time goes" in md
    assert "no\\_grad forwards in train mode (rollouts, generation)" in md
    assert "every 16 steps" in md and "the step figures" in md
    html = render_html(report)
    assert "Where the loop&#x27;s time goes" in html or "Where the loop's time goes" in html
    buf = io.StringIO()
    render_terminal(report, make_console(buf))
    text = buf.getvalue()
    assert "Where the loop's time goes" in text
    assert "The step figures leave out" in text  # the diagnosis panel says it too
    again = report_from_dict(json.loads(render_json(report)))
    assert again.loop["period"] == 16 and again.loop["representative"] is False


def test_a_loop_that_only_trains_has_no_section() -> None:
    steps = [StepRecord(index=i, phase="timed", wall_ms=5.0) for i in range(10)]
    report = replace(cpu_report(), loop=loop_summary(account_steps(steps)))
    assert "Where the loop" not in render_markdown(report)
    assert summary.headline(report).run_notes == summary.headline(cpu_report()).run_notes


def test_closure_steps_name_how_steps_were_counted() -> None:
    base = replace(cpu_report().baseline, optimizer_steps=1, closure_steps=29)
    report = replace(cpu_report(), baseline=base)
    rows = dict(summary.step_rows(report))
    assert rows["optimizer steps"] == "1 finished step(closure) call(s), 29 closure calls"
    assert rows["steps counted by"].startswith("closure calls inside optimizer.step(closure)")
    assert "29" in rows["steps counted by"]


def test_an_lbfgs_plan_that_ends_inside_its_first_step_does_not_read_as_no_optimizer() -> None:
    # Issue 32: LBFGS(max_iter=20) runs 20 closure calls per step(); the plan ended inside
    # the first call, and the row said "optimizer steps 0".
    base = replace(cpu_report().baseline, optimizer_steps=0, closure_steps=16)
    rows = dict(summary.step_rows(replace(cpu_report(), baseline=base)))
    assert rows["optimizer steps"] == "0 finished step(closure) call(s), 16 closure calls"


def test_the_stop_note_uses_lightnings_words_only_for_lightning() -> None:
    plain = replace(cpu_report(), script_end={"stopped_by_perfdoctor": True, "step": 29})
    note = " ".join(summary.run_notes(plain))
    assert "on_train_end" not in note and "after its loop" in note
    pl = replace(plain, script_end={**plain.script_end, "framework": "lightning"})
    assert "on_train_end, final checkpoint, logger finalisation" in " ".join(summary.run_notes(pl))

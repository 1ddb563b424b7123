"""`perfdoctor diagnose` reports: built from traces, rendered by every renderer."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

from rich.console import Console

from perfdoctor.analyze.fact_catalog import TRACE_ONLY_REASON
from perfdoctor.diagnose_traces import diagnose_traces, write_trace_reports
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import report_from_dict, report_to_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import render_terminal

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_trace", Path(__file__).parent / "analyze" / "synthetic_trace.py"
)
assert _SPEC is not None and _SPEC.loader is not None
synthetic = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("synthetic_trace", synthetic)
_SPEC.loader.exec_module(synthetic)


def _terminal(report) -> str:
    buf = io.StringIO()
    render_terminal(report, Console(file=buf, width=100, color_system=None))
    return buf.getvalue()


def test_single_trace_report(tmp_path: Path) -> None:
    synthetic.write_trace(tmp_path / "in" / "r.json.gz", synthetic.input_bound_trace())
    (done,) = diagnose_traces([tmp_path / "in"], tmp_path / "out")
    report = done.report
    assert report is not None and report.source == "trace"
    assert report.findings[0].rule_id == "input-bound"
    assert report.variants == () and report.ranks == ()
    assert report.device is not None and report.device.name == "NVIDIA A100-SXM4-40GB"
    run_only = [s for s in report.skipped_rules if TRACE_ONLY_REASON in s.reason]
    assert run_only, "rules needing a perfdoctor run must say so"
    assert any("profiled step" in w for w in report.warnings)

    text = _terminal(report)
    assert "perfdoctor diagnose" in text
    assert "without a perfdoctor run" in text
    assert "Variants" not in text and "status completed" not in text
    assert "perfdoctor tensorboard" not in text
    md = render_markdown(report)
    assert md.startswith("# perfdoctor diagnose")
    assert "## Variants" not in md and "without a perfdoctor run" in md
    html = render_html(report)
    assert "<h1>perfdoctor diagnose</h1>" in html and "<h2>Variants</h2>" not in html
    assert report_from_dict(report_to_dict(report)) == report

    paths = write_trace_reports(report)
    assert sorted(p.name for p in paths.values()) == ["report.html", "report.json", "report.md"]
    assert all(p.parent == tmp_path / "out" for p in paths.values())


def test_multi_rank_report_has_the_rank_view(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir" / "run1"
    synthetic.write_trace(
        logdir / "node0_11.100.pt.trace.json.gz", synthetic.input_bound_trace(rank=0)
    )
    synthetic.write_trace(
        logdir / "node1_12.100.pt.trace.json.gz",
        synthetic.input_bound_trace(rank=1, extra_data_us=9_000.0),
    )
    (done,) = diagnose_traces([tmp_path / "logdir"], tmp_path / "out")
    report = done.report
    assert report is not None
    assert [r.rank for r in report.ranks] == [0, 1]
    assert [r.worker for r in report.ranks] == ["node0_11", "node1_12"]
    assert "rank-straggler" in [f.rule_id for f in report.findings]
    text = _terminal(report)
    assert "Ranks" in text and "1 (straggler)" in text
    assert "collectives): rank 1" in " ".join(text.split())  # the straggler, as the rule's
    assert report.facts["straggler_rank"] == 1
    assert "## Ranks" in render_markdown(report)
    assert "<h2>Ranks</h2>" in render_html(report)
    assert report_from_dict(report_to_dict(report)) == report


def test_several_runs_get_one_directory_each(tmp_path: Path) -> None:
    for run in ("a", "b"):
        synthetic.write_trace(
            tmp_path / "logdir" / run / "w.1.pt.trace.json", synthetic.input_bound_trace()
        )
    done = diagnose_traces([tmp_path / "logdir"], tmp_path / "out")
    assert [d.run.name for d in done] == ["a", "b"]
    assert [Path(d.report.run_dir) for d in done if d.report] == [
        tmp_path / "out" / "a",
        tmp_path / "out" / "b",
    ]


def test_one_unusable_run_among_several_carries_its_error(tmp_path: Path) -> None:
    synthetic.write_trace(tmp_path / "good.json", synthetic.input_bound_trace())
    synthetic.write_trace(tmp_path / "bad.json", {"traceEvents": []})
    done = {d.run.name: d for d in diagnose_traces([tmp_path], tmp_path / "out")}
    assert done["good"].report is not None
    assert done["bad"].report is None and "no events" in str(done["bad"].error)


def test_device_line_for_amd_and_cpu_only(tmp_path: Path) -> None:
    synthetic.write_trace(
        tmp_path / "amd" / "a.json", synthetic.input_bound_trace(device=synthetic.MI250)
    )
    cpu = synthetic.input_bound_trace(rank=3, world_size=16)
    cpu["traceEvents"] = [e for e in cpu["traceEvents"] if e["cat"] == "user_annotation"]
    cpu["deviceProperties"] = []
    synthetic.write_trace(tmp_path / "cpu" / "c.json", cpu)
    by_name = {d.run.name: d.report for d in diagnose_traces([tmp_path], tmp_path / "out")}
    amd = _terminal(by_name["a"])
    assert "rocm: AMD Instinct MI250X" in amd and "sm 9.0" not in amd
    cpu_text = _terminal(by_name["c"])
    assert "cpu: CPU (no GPU work in the trace)" in cpu_text
    assert "world size 16 (1 of 16 ranks traced, nccl)" in cpu_text

"""issue 29 item 9: perfdoctor side by side with train-doctor 0.2.0 on short CPU scripts.

Each case of `td_cases/` runs quiet and with one busy core (a busy loop this script starts and
stops itself), in one run of this benchmark:
- under `perfdoctor profile case.py` (report.json: the best accepted variant, every verdict);
- under `train-doctor fix -- python case.py` (fix.json: the kept candidates, every decision);
- `--plain` (3) alternated plain runs of each setting (`CASE_FIX=0` / `CASE_FIX=1`: the
  case applies its own fix), whose own clock (steps over wall time after 5 warm-up steps) is
  the reference;
- for each tool that accepted a fix and wrote a patch (perfdoctor's fixes.patch,
  train-doctor's <case>.fix.patch): as many alternated plain runs of the case and of a copy with
  that patch applied, timed by the same clock: what the tool claims, checked as a user would.
For each tool it records the verdict, whether it agrees with the clock (the fixed runs
faster than the plain ones by `AGREE_MARGIN` at one-sided Mann-Whitney p <= 0.05 is
"faster": at 3 runs a side, every fixed run beat every plain one by the margin; an accepted
fix agrees when its own patch is faster by the clock; no accepted fix agrees where the case's
own fix is not faster), the wall time, and the load (`uptime`) before and after. Results go
to a JSONL file as they come (one line per case and load) and a Markdown table at the end.
Never asserts.

train-doctor lives in its own venv when it would change this environment's packages:
  python3 -m venv --system-site-packages VENV && VENV/bin/pip install train-doctor \
      -c <(echo torch==2.13.0)
  python benchmarks/vs_train_doctor.py --train-doctor VENV/bin/train-doctor

Run: python benchmarks/vs_train_doctor.py [--cases short_anomaly,bursty_loader] [--loads quiet,busy]
     [--plain 3] [--out results.jsonl] [--no-train-doctor] [--no-perfdoctor]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, Burner, machine_line, out, uptime

CASES_DIR = Path(__file__).resolve().parent / "td_cases"
CASES = (
    "short_anomaly",
    "epoch_ends",
    "bursty_loader",
    "anomaly_threads",
    "single_tensor_opt",
    "straggler_ddp",
)
# The perfdoctor fix that is the case's own CASE_FIX=1 change (None: a change by hand only).
CASE_FIX_IDS: dict[str, str | None] = {
    "short_anomaly": "anomaly-off",
    "epoch_ends": "dataloader-workers",
    "bursty_loader": "dataloader-workers",
    "anomaly_threads": "anomaly-off",
    "single_tensor_opt": "fused-optimizer",
    "straggler_ddp": None,
}
# Cases whose fix is by hand only: the diagnosis that names it, at warning or above, is the
# verdict to agree with the clock (no runtime fix can remove a rank's extra work).
CASE_FINDINGS: dict[str, str] = {"straggler_ddp": "rank-straggler"}
# The clock says "faster" when every fixed run beats every plain run by this factor.
AGREE_MARGIN = 1.05
# ... at this one-sided Mann-Whitney p or below (clock_verdict).
CLOCK_P = 0.05
CLOCK_RE = re.compile(r"ms/step mean ([0-9.]+) median ([0-9.]+) steps (\d+)")


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _clock_ms(stdout: str) -> float | None:
    found = CLOCK_RE.findall(stdout)
    return float(found[-1][0]) if found else None


def _plain_ms(script: Path, fix: str, timeout: float) -> float | None:
    env = {**os.environ, "CASE_FIX": fix}
    env.pop("PYTHONPATH", None)  # plain: nothing of perfdoctor's on the path
    proc = subprocess.run(
        [sys.executable, script.name],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return _clock_ms(proc.stdout)


def plain_runs(case: Path, rounds: int, timeout: float) -> dict[str, Any]:
    """Alternated plain runs, A B / B A, each setting `rounds` times."""
    times: dict[str, list[float]] = {"0": [], "1": []}
    for i in range(rounds):
        order = ("0", "1") if i % 2 == 0 else ("1", "0")
        for fix in order:
            ms = _plain_ms(case, fix, timeout)
            if ms is not None:
                times[fix].append(ms)
    return {"plain_ms": times["0"], "fixed_ms": times["1"], **clock_verdict(times["0"], times["1"])}


def patch_clock(case: Path, patch_text: str, rounds: int, timeout: float) -> dict[str, Any]:
    """A tool's own patch timed by the case's clock: a copy of the case with the patch
    applied (`patch` given the file, so the diff's paths do not matter) against the case as
    it is, alternated plainly like `plain_runs`. What the tool claims, checked where the
    user would check it."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in (case.name, "_clock.py"):
            shutil.copy2(case.parent / name, work / name)
        original = work / f"original_{case.name}"
        shutil.copy2(case, original)
        diff = work / "fix.patch"
        diff.write_text(patch_text)
        applied = subprocess.run(
            ["patch", "--batch", "--forward", "-i", str(diff), str(work / case.name)],
            capture_output=True,
            text=True,
            check=False,
        )
        if applied.returncode != 0:
            return {"error": f"patch failed: {(applied.stdout + applied.stderr).strip()[-160:]}"}
        times: dict[str, list[float]] = {"plain": [], "patched": []}
        for i in range(rounds):
            order = (original, work / case.name)
            for script in order if i % 2 == 0 else order[::-1]:
                ms = _plain_ms(script, "0", timeout)
                if ms is not None:
                    times["plain" if script == original else "patched"].append(ms)
    return {
        "plain_ms": times["plain"],
        "fixed_ms": times["patched"],
        **clock_verdict(times["plain"], times["patched"]),
    }


def _beyond_margin_p(slow: list[float], fast: list[float]) -> float:
    """One-sided exact Mann-Whitney p that `slow` runs take longer than `fast` runs scaled
    by AGREE_MARGIN: the share of all splits of the pooled values into two groups of these
    sizes whose U is at least the observed one. With 3 runs a side the smallest p is 1/20,
    reached only when every slow run beats every fast run by the margin."""
    scaled = [f * AGREE_MARGIN for f in fast]

    def u_of(xs: list[float], ys: list[float]) -> float:
        return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in xs for y in ys)

    observed = u_of(slow, scaled)
    pooled = [*slow, *scaled]
    splits = hits = 0
    for chosen in itertools.combinations(range(len(pooled)), len(slow)):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        splits += 1
        hits += u_of([pooled[i] for i in chosen], rest) >= observed
    return hits / splits


def clock_verdict(plain: list[float], fixed: list[float]) -> dict[str, Any]:
    """The script's own clock over the alternated runs: "faster" when the fixed runs are
    faster than the plain ones by more than the margin, one-sided exact Mann-Whitney p <=
    CLOCK_P ("slower" the other way round), else "undecided" (on a loaded machine a run's
    mean moves by more than some fixes buy). At 3 runs a side that is: every fixed run beat
    every plain run by the margin."""
    if not plain or not fixed:
        return {"clock_speedup": None, "clock_says": None}
    ratio = statistics.median(plain) / statistics.median(fixed)
    if _beyond_margin_p(plain, fixed) <= CLOCK_P:
        says = "faster"
    elif _beyond_margin_p(fixed, plain) <= CLOCK_P:
        says = "slower"
    else:
        says = "undecided"
    return {"clock_speedup": ratio, "clock_says": says}


def run_perfdoctor(case: Path, workdir: Path, timeout: float) -> dict[str, Any]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", "--quiet", "-o", str(workdir), case.name],
        cwd=case.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.monotonic() - start
    reports = sorted(workdir.glob("*/report.json"))
    result: dict[str, Any] = {"wall_s": round(wall, 1), "exit": proc.returncode}
    if not reports:
        result["verdict"] = f"no report (exit {proc.returncode})"
        return result
    report = json.loads(reports[-1].read_text())
    variants = [v for v in report.get("variants", []) if not v.get("peel_of")]
    accepted = [v for v in variants if v.get("verdict") == "accepted"]
    best = max(accepted, key=lambda v: v.get("speedup") or 0.0, default=None)
    result["variants"] = [
        {
            "label": v.get("label"),
            "verdict": v.get("verdict"),
            "speedup": v.get("speedup"),
            "interval": v.get("interval"),
            "method": v.get("method"),
            "reason": (v.get("reason") or "")[:600],
        }
        for v in variants
    ]
    # Each fix peeled off the accepted stack: what it still buys on top of the others
    # (where a thread stall left its own verdict undecided, this is the one that decides it).
    result["peels"] = [
        {
            "fix": v.get("peel_of"),
            "speedup": v.get("speedup"),
            "interval": v.get("interval"),
            "says": (v.get("reason") or "").split(":", 1)[0],
        }
        for v in report.get("variants", [])
        if v.get("peel_of")
    ]
    result["findings"] = [(f["rule_id"], f["severity"]) for f in report.get("findings", [])]
    patch_file = (report.get("artifacts") or {}).get("fixes_patch")
    result["patch"] = bool(patch_file)
    if patch_file and Path(patch_file).is_file():
        result["patch_text"] = Path(patch_file).read_text()
    if best is not None:
        interval = best.get("interval")
        band = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
        result["verdict"] = f"accepted {best['label']} {best.get('speedup') or 0:.2f}x{band}"
        result["accepted"] = True
    elif variants:
        result["verdict"] = "; ".join(f"{v['label']}: {v['verdict']}" for v in variants)
        result["accepted"] = False
    else:
        top = result["findings"][:2]
        result["verdict"] = "no variant; findings " + ", ".join(f"{r} ({s})" for r, s in top)
        result["accepted"] = False
    return result


def run_train_doctor(exe: str, case: Path, workdir: Path, timeout: float) -> dict[str, Any]:
    start = time.monotonic()
    cmd = [exe, "fix", "--json", "--quiet", "--no-card", "--out", str(workdir), "--"]
    proc = subprocess.run(
        [*cmd, sys.executable, case.name],
        cwd=case.parent,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.monotonic() - start
    result: dict[str, Any] = {"wall_s": round(wall, 1), "exit": proc.returncode}
    try:
        doc = json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError:
        result["verdict"] = f"no result (exit {proc.returncode}): {proc.stderr.strip()[-160:]}"
        result["accepted"] = False
        return result
    candidates = doc.get("candidates") or []
    result["candidates"] = [
        {"candidate": c.get("candidate"), "decision": c.get("decision"), "ratio": c.get("ratio")}
        for c in candidates
    ]
    result["headline"] = doc.get("headline")
    patch_path = (doc.get("patch") or {}).get("patch_path")
    if patch_path and Path(patch_path).is_file():
        result["patch_text"] = Path(patch_path).read_text()
    kept = [c for c in candidates if str(c.get("decision", "")).startswith("keep")]
    if kept:
        best = max(kept, key=lambda c: (c.get("ratio") or {}).get("point") or 0.0)
        ratio = best.get("ratio") or {}
        result["verdict"] = (
            f"kept {best['candidate']} {ratio.get('point', 0):.2f}x "
            f"[{ratio.get('low', 0):.2f}, {ratio.get('high', 0):.2f}]"
        )
        result["accepted"] = True
    else:
        result["verdict"] = (doc.get("headline") or "no candidate")[:200]
        result["accepted"] = False
    return result


def agreement(tool: dict[str, Any], clock: dict[str, Any], case: str = "") -> str:
    """An accepted fix with a patch agrees when its patch, timed plainly, is faster; without
    one, the case's own fix timed by its clock stands in when the tool accepted that fix.
    No accepted fix agrees where the clock finds the case's own fix no faster."""
    says = clock.get("clock_says")
    own = tool.get("patch_clock") or {}
    if tool.get("accepted") and own.get("clock_says"):
        judged = own["clock_says"]
        speed = own.get("clock_speedup")
        timed = f"its patch timed plainly: {speed:.2f}x, {judged}" if speed else judged
        if judged == "faster":
            return f"yes ({timed})"
        return f"clock undecided ({timed})" if judged == "undecided" else f"no ({timed})"
    if "accepted" not in tool or says is None:
        return "n/a"
    named = CASE_FINDINGS.get(case)
    if named is not None and not tool.get("accepted"):
        found = [s for r, s in tool.get("findings") or [] if r == named]
        if not found and "findings" not in tool:
            return "n/a (a fix by hand; no findings to read)"
        if says != "faster":
            return "clock undecided" if says == "undecided" else f"n/a (clock: {says})"
        if any(s in ("warning", "critical") for s in found):
            return f"yes (names {named}, {found[0]})"
        return f"no ({named} {'only ' + found[0] if found else 'not found'})"
    planted = CASE_FIX_IDS.get(case)
    accepted = {v["label"] for v in tool.get("variants") or [] if v.get("verdict") == "accepted"}
    if accepted and planted and planted not in accepted:
        # The clock timed the case's own fix; a different accepted fix is not that one.
        return f"other fix ({', '.join(sorted(accepted))}); the clock timed {planted}: {says}"
    if says == "undecided":
        return "clock undecided"
    if tool["accepted"] == (says == "faster"):
        return "yes"
    return f"no (accepted, clock: {says})" if tool["accepted"] else "no verdict where clock: faster"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--loads", default="quiet,busy")
    p.add_argument("--plain", type=int, default=3, help="plain runs of each setting")
    p.add_argument("--out", default="vs_train_doctor.jsonl")
    p.add_argument("--train-doctor", default=shutil.which("train-doctor") or "train-doctor")
    p.add_argument("--no-train-doctor", action="store_true")
    p.add_argument("--no-perfdoctor", action="store_true")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per tool run")
    opts = p.parse_args()
    out(machine_line())
    sink = Path(opts.out)
    for name in opts.cases.split(","):
        for load in opts.loads.split(","):
            case = CASES_DIR / f"{name}.py"
            row: dict[str, Any] = {"case": name, "load": load, "load_before": _load()}
            with Burner(load == "busy"), tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                if not opts.no_perfdoctor:
                    row["perfdoctor"] = run_perfdoctor(case, work / "pd", opts.timeout)
                if not opts.no_train_doctor:
                    row["train_doctor"] = run_train_doctor(
                        opts.train_doctor, case, work / "td", opts.timeout
                    )
                row["clock"] = plain_runs(case, opts.plain, opts.timeout)
                for tool in ("perfdoctor", "train_doctor"):
                    text = row.get(tool, {}).pop("patch_text", None)
                    if text and row[tool].get("accepted"):
                        row[tool]["patch_clock"] = patch_clock(case, text, opts.plain, opts.timeout)
            row["load_after"] = _load()
            for tool in ("perfdoctor", "train_doctor"):
                if tool in row:
                    row[tool]["agrees"] = agreement(row[tool], row["clock"], name)
            with sink.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            out(json.dumps(row)[:600])
    out(uptime())
    out(table(sink))


def _variant_words(v: dict[str, Any]) -> str:
    """ "anomaly-off rejected 1.47x [0.62, 3.50] (cannot tell from noise; stopped: script
    ended)": the verdict with what it stood for."""
    text = f"{v['label']} {v['verdict']}"
    if v.get("speedup"):
        text += f" {v['speedup']:.2f}x"
    if v.get("interval"):
        text += f" [{v['interval'][0]:.2f}, {v['interval'][1]:.2f}]"
    reason = v.get("reason") or ""
    why = reason.split(":", 1)[0]
    stop = reason.rsplit("stopped: ", 1)[1] if "stopped: " in reason else ""
    return text + f" ({why}{'; stopped: ' + stop if stop else ''})"


def _cell(tool: dict[str, Any] | None) -> str:
    if tool is None:
        return "not run"
    verdict = tool.get("verdict")
    if tool.get("variants"):
        verdict = "; ".join(_variant_words(v) for v in tool["variants"])
    for peel in tool.get("peels") or []:
        band = peel.get("interval")
        figures = f" {peel['speedup']:.2f}x" if peel.get("speedup") else ""
        figures += f" [{band[0]:.2f}, {band[1]:.2f}]" if band else ""
        verdict = f"{verdict}; in the stack: {peel['says']}{figures}"
    return f"{verdict} ({tool.get('wall_s')} s; agrees: {tool.get('agrees')})"


def table(sink: Path) -> str:
    lines = [
        "| case | load (1-min avg before / after) | own clock: plain / fixed ms/step, speedup "
        "| perfdoctor | train-doctor |",
        "|---|---|---|---|---|",
    ]
    for line in sink.read_text().splitlines():
        row = json.loads(line)
        clock = row.get("clock", {})
        # Re-judged from the raw times, so a table of older results uses today's rule.
        clock.update(clock_verdict(clock.get("plain_ms") or [], clock.get("fixed_ms") or []))
        for tool in ("perfdoctor", "train_doctor"):
            if tool in row:
                row[tool]["agrees"] = agreement(row[tool], clock, row["case"])
        plain = statistics.median(clock["plain_ms"]) if clock.get("plain_ms") else None
        fixed = statistics.median(clock["fixed_ms"]) if clock.get("fixed_ms") else None
        speed = clock.get("clock_speedup")
        own = (
            f"{plain:.1f} / {fixed:.1f}, {speed:.2f}x ({clock.get('clock_says')})"
            if plain and fixed and speed
            else "not measured"
        )
        lines.append(
            f"| {row['case']} | {row['load']} ({row['load_before']} / {row['load_after']}) "
            f"| {own} | {_cell(row.get('perfdoctor'))} | {_cell(row.get('train_doctor'))} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        out(table(Path(sys.argv[2])))
    else:
        main()

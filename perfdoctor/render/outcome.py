"""The outcome on the first screen (issue 29 item 7): after apply, the headline's Fix and
Measured lines name the best fix accepted by measurement, its speedup and interval, and the
patch that makes it (fixes.patch); the summary ends with the command that applies it.

What was measured outranks what was diagnosed: a fix accepted by measurement leads even
when its finding was not the top one. Raw text out; each renderer escapes it.
"""

from __future__ import annotations

from perfdoctor.model import Report, VariantResult
from perfdoctor.optimize import catalog
from perfdoctor.render import format as fmt


def best_accepted(report: Report) -> VariantResult | None:
    """The accepted variant (not a peel comparison) with the largest speedup; a fix that
    changed nothing (every applier refused) is no outcome."""
    accepted = [
        v
        for v in report.variants
        if v.verdict == "accepted"
        and v.peel_of is None
        and (not v.applied or any(a.applied for a in v.applied))
    ]
    if not accepted:
        return None
    return max(accepted, key=lambda v: v.speedup if v.speedup is not None else float("-inf"))


def fix_titles(variant: VariantResult, report: Report) -> str:
    """The variant's fixes by title, as the recommendations word them (tailored to the
    script), else as the catalog does."""
    titles = {r.optimization_id: r.title for r in report.recommendations}
    names = []
    for opt_id in variant.optimizations:
        entry = catalog.get(opt_id)
        names.append(titles.get(opt_id) or (entry.title if entry else opt_id))
    return " + ".join(names)


def patch_path(report: Report) -> str | None:
    path = report.fix_patch.get("path") if report.fix_patch else None
    return path if isinstance(path, str) and path else None


def patch_name(report: Report) -> str | None:
    path = patch_path(report)
    return path.rsplit("/", 1)[-1] if path else None


def fix_line(report: Report) -> str | None:
    """The headline's Fix line after apply, or None without an accepted fix."""
    best = best_accepted(report)
    if best is None:
        return None
    gain = fmt.speedup(best.speedup, None if best.interval else best.speedup_noise)
    if best.interval is not None:
        gain += f" [{best.interval[0]:.2f}, {best.interval[1]:.2f}]"
    text = (
        f"{fix_titles(best, report)} ({', '.join(best.optimizations)}): {gain} faster, "
        "accepted by measurement"
    )
    patch = patch_name(report)
    if patch and report.fix_patch.get("hunks"):
        return f"{text}; the change is in {patch} (the command to apply it ends this summary)."
    adds = report.fix_patch.get("lines_to_add") if report.fix_patch else None
    if adds:
        return f"{text}; the line to add is in {patch or 'the report'} (no source line to patch)."
    return f"{text}."


def apply_lines(report: Report) -> list[str]:
    """The summary's last lines: how to apply the patch, and take it back."""
    patch = report.fix_patch or {}
    lines: list[str] = []
    command = patch.get("apply")
    if isinstance(command, str) and command:
        path = patch_path(report) or ""
        lines.append(f"Apply the proven fixes: {command}")
        lines.append(
            f"  (or: patch -p1 < {path}; take them back with git apply -R or patch -p1 -R)"
        )
    for add in patch.get("lines_to_add") or []:
        lines.append(
            f"Add by hand ({add.get('optimization_id')}, measured {add.get('gain')}): "
            f"{fmt.one_line(str(add.get('line')), 200)}"
        )
    return lines

"""fixes.patch: the accepted fixes as a unified diff against the user's own files (issue 29
item 8).

A fix perfdoctor proved at runtime (a variant accepted by measurement) is written as the
change a user would make by hand, on the files the run read: `num_workers=` on the training
DataLoader, `fused=True` on the optimizer, `torch.set_num_threads(n)`,
`set_detect_anomaly(False)`, ... (optimize/source_edits.py makes each edit on the syntax
tree). The counts are the ones the accepted variant ran with (its appliers' records), so the
patch is what was measured. A fix with no source line to change (an environment variable, a
transform the script has no single line for) is listed as the exact line to add.

Paths: relative to the root the patch applies from, with git's a/ b/ prefixes: the top of
the git work tree holding the script's working directory (so `git apply` works from there),
else that working directory. `git apply` and `patch -p1` both apply it there, and `-R` takes
it back. The measured gain of each change is in the report and in the patch's preamble
(lines before the first `---`, which both tools skip), never in the user's code.

Pure: reads source files as text, writes nothing (diagnose.py writes the file).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from perfdoctor.model import Facts, VariantResult
from perfdoctor.optimize import catalog, source_edits
from perfdoctor.optimize.policies import _FOREACH_ONLY_CLASSES
from perfdoctor.optimize.sizing import (
    COUPLED_THREADS_PATTERN,
    TWIN_DETAIL,
    cpu_threads_target,
    size_dataloader_workers,
)
from perfdoctor.optimize.source_edits import Edit, Source

PATCH_NAME = "fixes.patch"
# Source files larger than this are not read (a generated file is no script to patch).
MAX_SOURCE_BYTES = 2_000_000


@dataclass(frozen=True)
class ProvenFix:
    """One accepted fix and the measurement that accepted it."""

    optimization_id: str
    label: str  # the variant that measured it
    speedup: float | None
    interval: tuple[float, float] | None
    method: str
    load: str | None
    detail: str  # what the applier recorded (its counts)
    in_stack: bool = False  # measured only with other fixes (the speedup is the stack's)

    def gain_text(self) -> str:
        if self.speedup is None:
            return "accepted"
        text = f"{self.speedup:.2f}x"
        if self.interval is not None:
            text += f" [{self.interval[0]:.2f}, {self.interval[1]:.2f}]"
        text += f" ({'in the stack ' if self.in_stack else ''}{self.label}, {self.method}"
        load = self.load.split(";")[0] if self.load else ""
        return text + (f"; {load})" if load else ")")


@dataclass(frozen=True)
class Hunk:
    optimization_id: str
    file: str  # relative to the patch root
    line: int
    change: str  # one line: what the hunk does
    gain: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "optimization_id": self.optimization_id,
            "file": self.file,
            "line": self.line,
            "change": self.change,
            "gain": self.gain,
        }


@dataclass(frozen=True)
class LineToAdd:
    optimization_id: str
    line: str  # the exact text to add
    where: str  # where it goes
    gain: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "optimization_id": self.optimization_id,
            "line": self.line,
            "where": self.where,
            "gain": self.gain,
        }


@dataclass(frozen=True)
class FixPatch:
    diff: str  # the unified diff ("" when no file changes)
    root: str  # the directory it applies from (absolute)
    hunks: tuple[Hunk, ...] = ()
    lines_to_add: tuple[LineToAdd, ...] = ()
    fixes: tuple[ProvenFix, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.diff and not self.lines_to_add

    def text(self, patch_path: str = PATCH_NAME) -> str:
        """The file: a preamble of comments (skipped by git apply and patch), then the diff."""
        path = _quote(patch_path)
        lines = [
            "# perfdoctor fixes.patch: the fixes accepted by measurement, as source changes.",
            f"# Apply from {self.root}: git apply {path}  (or: patch -p1 < {path});"
            " take back with -R.",
        ]
        for hunk in self.hunks:
            lines.append(
                f"# {hunk.file}:{hunk.line} {hunk.optimization_id}: {hunk.change}"
                f" -- measured {hunk.gain}"
            )
        for add in self.lines_to_add:
            lines.append(
                f"# by hand ({add.optimization_id}, {add.where}): {add.line} -- measured {add.gain}"
            )
        return "\n".join(lines) + "\n" + self.diff

    def apply_command(self, patch_path: str) -> str:
        return f"cd {_quote(self.root)} && git apply {_quote(patch_path)}"

    def to_dict(self, patch_path: str | None) -> dict[str, Any]:
        return {
            "path": patch_path,
            "root": self.root,
            "apply": self.apply_command(patch_path) if patch_path and self.diff else None,
            "hunks": [h.to_dict() for h in self.hunks],
            "lines_to_add": [a.to_dict() for a in self.lines_to_add],
        }


def _quote(path: str) -> str:
    return path if re.fullmatch(r"[\w@%+=:,./-]+", path) else "'" + path.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------- what was proven


def proven_fixes(variants: Sequence[VariantResult]) -> list[ProvenFix]:
    """The accepted fixes, each with the best measurement that accepted it: its own
    variant where that was accepted, else the accepted stack holding it. A peel comparison
    that says the stack does better without a fix drops it."""
    dropped = {v.peel_of for v in variants if v.peel_of is not None and v.verdict != "accepted"}
    accepted = [v for v in variants if v.verdict == "accepted" and v.peel_of is None]
    accepted.sort(key=lambda v: (len(v.optimizations), -(v.speedup or 0.0)))
    out: dict[str, ProvenFix] = {}
    for variant in accepted:
        for opt_id in variant.optimizations:
            if opt_id in out or opt_id in dropped:
                continue
            detail = "; ".join(a.detail for a in variant.applied if a.id == opt_id and a.applied)
            out[opt_id] = ProvenFix(
                opt_id,
                variant.label,
                variant.speedup,
                variant.interval,
                variant.method,
                variant.load,
                detail,
                in_stack=len(variant.optimizations) > 1,
            )
    # A fix measured alone comes before one measured only inside a stack (whose speedup is
    # the stack's, not its own); the fastest first.
    return sorted(out.values(), key=lambda f: (f.in_stack, -(f.speedup or 0.0)))


# --------------------------------------------------------------------------- where to patch


def patch_root(cwd: Path) -> Path:
    """The top of the git work tree holding `cwd` (a `.git` directory or file), else cwd."""
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return cwd


@dataclass
class _Files:
    """The source files the edits touch, read once, edited in memory."""

    cwd: Path
    root: Path
    sources: dict[str, Source] = field(default_factory=dict)
    edits: dict[str, list[Edit]] = field(default_factory=dict)

    def resolve(self, file: str) -> Path | None:
        path = (self.cwd / file).resolve()
        try:
            path.relative_to(self.root.resolve())
        except ValueError:
            return None  # outside the patch root: a library, another checkout
        return path if path.is_file() else None

    def key(self, file: str) -> str:
        """One name per file: the run can name a file relative to its cwd in one record and
        by its absolute path in another, and two names would give one file two diffs (the
        second then reads as already applied, and `patch --batch` reverses it)."""
        path = self.resolve(file)
        return str(path) if path is not None else file

    def source(self, file: str) -> Source | None:
        file = self.key(file)
        if file in self.sources:
            return self.sources[file]
        path = self.resolve(file)
        if path is None or path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        try:
            src = Source(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None
        if src.tree is None:
            return None
        self.sources[file] = src
        return src

    def add(self, file: str, edits: Sequence[Edit]) -> list[Edit]:
        """The edits that do not overlap ones already taken on the file."""
        taken = self.edits.setdefault(self.key(file), [])
        kept = []
        for edit in edits:
            if any(_overlap(edit, other) for other in taken):
                continue
            taken.append(edit)
            kept.append(edit)
        return kept


def _overlap(a: Edit, b: Edit) -> bool:
    """Line ranges that share a line (an insertion, end = start - 1, shares none)."""
    return not (a.end < b.start or b.end < a.start)


# --------------------------------------------------------------------------- per fix


def _loc(record: Mapping[str, Any] | None) -> tuple[str, int] | None:
    loc = record.get("location") if isinstance(record, Mapping) else None
    if isinstance(loc, Mapping) and isinstance(loc.get("file"), str) and loc.get("line"):
        return loc["file"], int(loc["line"])
    return None


def _count(detail: str, pattern: str) -> int | None:
    found = re.findall(pattern, detail)
    return int(found[-1]) if found else None


def _workers(fix: ProvenFix, facts: Facts) -> int | None:
    count = _count(fix.detail, r"num_workers \d+ -> (\d+)")
    if count is not None:
        return count
    cores = facts.get("cpu_cores_logical")
    sizing = size_dataloader_workers(facts, int(cores)) if isinstance(cores, int | float) else None
    return sizing.workers if sizing is not None else None


def _threads(fix: ProvenFix, facts: Facts) -> int | None:
    """The count the accepting variant ran with: a coupled variant's (the threads beside
    the DataLoader workers it added) where it was measured with them, else the first."""
    coupled = "dataloader-workers" in fix.label.split("+")
    count = _count(fix.detail, COUPLED_THREADS_PATTERN) if coupled else None
    if count is None:
        found = re.findall(r"held at (\d+)", fix.detail)
        count = int(found[0]) if found else None
    return count if count is not None else cpu_threads_target(facts)


Target = tuple[str, list[Edit] | str]  # (file, edits or why none)


def _script_files(facts: Facts, script: str) -> list[str]:
    """The script first, then every user file the run recorded a location in."""
    files = [script]
    for rows in facts.locations.values():
        for loc in rows:
            if loc.file not in files and not os.path.isabs(loc.file):
                files.append(loc.file)
    return files


def _each_file(
    files: _Files, names: Sequence[str], edit: Callable[[Source], list[Edit] | str]
) -> list[Target]:
    out: list[Target] = []
    for name in names:
        src = files.source(name)
        if src is not None:
            out.append((name, edit(src)))
    return out


def _edits_for(fix: ProvenFix, facts: Facts, script: str, files: _Files) -> list[Target] | str:
    """Where and what to change for one fix, or why it has no source line."""
    opt = fix.optimization_id
    settings = facts.settings if isinstance(facts.settings, Mapping) else {}
    scripts = _script_files(facts, script)
    if opt == "anomaly-off":
        return _each_file(files, scripts, source_edits.anomaly_off)
    if opt == "cpu-threads":
        threads = _threads(fix, facts)
        if threads is None:
            return "the thread count the variant ran with is not recorded"
        return [(script, _on(files, script, lambda s: source_edits.set_threads(s, threads)))]
    if opt in ("dataloader-workers", "pin-memory"):
        found = _loc(settings.get("dataloader"))
        if found is None:
            return "the training DataLoader's source line was not recorded"
        file, line = found
        if opt == "pin-memory":
            edit = partial(
                source_edits.call_argument,
                names=("DataLoader",),
                line=line,
                argument="pin_memory",
                value="True",
            )
            return [(file, _on(files, file, edit))]
        workers = _workers(fix, facts)
        if workers is None:
            return "the worker count the variant ran with is not recorded"
        arguments: list[tuple[str, str, int | None]] = [
            # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers)
            ("num_workers", str(workers), 5),
        ]
        if TWIN_DETAIL in fix.detail:
            # Measured with a persistent twin loader: its workers outlive each epoch, and
            # the patch is what was measured (without it, each epoch starts its workers).
            arguments.append(("persistent_workers", "True", None))
        edit = partial(
            source_edits.call_arguments, names=("DataLoader",), line=line, settings=arguments
        )
        return [(file, _on(files, file, edit))]
    if opt == "fused-optimizer":
        out: list[Target] = []
        for record in settings.get("optimizers") or []:
            where, cls = _loc(record), record.get("class")
            if where is None or not isinstance(cls, str):
                continue
            edit = partial(
                source_edits.fused_optimizer,
                cls=cls,
                line=where[1],
                foreach_only=cls in _FOREACH_ONLY_CLASSES,
            )
            out.append((where[0], _on(files, where[0], edit)))
        return out or "the optimizer's source line was not recorded"
    if opt == "zero-grad-set-to-none":
        by_file: dict[str, list[int]] = {}
        for site in facts.locations.get("zero_grad", ()):
            by_file.setdefault(site.file, []).append(site.line)
        if not by_file:
            by_file = {script: []}
        return [
            (name, _on(files, name, partial(source_edits.zero_grad_to_none, lines=lines)))
            for name, lines in by_file.items()
        ]
    if opt == "debug-modes-off":
        return _each_file(files, scripts, source_edits.sync_debug_off)
    if opt == "tf32":
        return [
            (
                script,
                _on(
                    files,
                    script,
                    lambda s: source_edits.call_or_insert(
                        s,
                        "set_float32_matmul_precision",
                        "'high'",
                        "torch.set_float32_matmul_precision('high')",
                    ),
                ),
            )
        ]
    if opt == "cudnn-benchmark":
        return [
            (
                script,
                _on(
                    files,
                    script,
                    lambda s: source_edits.assignment_or_insert(
                        s, "torch.backends.cudnn.benchmark", "True", "cudnn.benchmark = True"
                    ),
                ),
            )
        ]
    if opt == "cudnn-nondeterministic":
        return _each_file(files, scripts, source_edits.deterministic_off)
    if opt == "cpu-fp32":
        return _each_file(files, scripts, source_edits.cpu_autocast_off)
    return "no single source line: the change is the snippet below"


def _on(files: _Files, name: str, edit: Callable[[Source], list[Edit] | str]) -> list[Edit] | str:
    src = files.source(name)
    if src is None:
        return f"{name} could not be read under the patch root"
    return edit(src)


def _line_to_add(fix: ProvenFix, code_changes: Mapping[str, str], why: str) -> LineToAdd:
    entry = catalog.get(fix.optimization_id)
    if entry is not None and entry.env:
        line = " ".join(f"{k}={v}" for k, v in entry.env.items())
        return LineToAdd(
            fix.optimization_id,
            f"export {line}",
            "the shell or launcher that starts training",
            fix.gain_text(),
        )
    text = code_changes.get(fix.optimization_id) or (entry.code_change if entry else "")
    return LineToAdd(fix.optimization_id, text, why, fix.gain_text())


# --------------------------------------------------------------------------- the patch


def build_fix_patch(
    variants: Sequence[VariantResult],
    facts: Facts,
    script: str,
    cwd: Path,
    code_changes: Mapping[str, str] | None = None,
) -> FixPatch:
    """The patch of the accepted fixes. `script` as the run saw it (relative to `cwd`, the
    script's working directory); `code_changes`: the recommendations' tailored by-hand
    changes, for the fixes listed as lines to add."""
    code_changes = code_changes or {}
    root = patch_root(cwd)
    files = _Files(cwd, root)
    proven = proven_fixes(variants)
    hunks: list[Hunk] = []
    adds: list[LineToAdd] = []
    for fix in proven:
        targets = _edits_for(fix, facts, script, files)
        made = False
        reasons: list[str] = []
        if isinstance(targets, str):
            reasons.append(targets)
        else:
            for name, edits in targets:
                if isinstance(edits, str):
                    reasons.append(edits)
                    continue
                for edit in files.add(name, edits):
                    made = True
                    hunks.append(
                        Hunk(
                            fix.optimization_id,
                            _relative(files, name),
                            edit.start,
                            edit.what,
                            fix.gain_text(),
                        )
                    )
        if not made and not (reasons and all("already" in r for r in reasons)):
            adds.append(_line_to_add(fix, code_changes, "; ".join(dict.fromkeys(reasons))))
    diff = "".join(_file_diff(files, name, edits) for name, edits in files.edits.items() if edits)
    return FixPatch(diff, str(root), tuple(hunks), tuple(adds), tuple(proven))


def _relative(files: _Files, name: str) -> str:
    path = files.resolve(name)
    if path is None:
        return name
    return path.relative_to(files.root.resolve()).as_posix()


def _file_diff(files: _Files, name: str, edits: Sequence[Edit]) -> str:
    src = files.sources[name]
    new = list(src.lines)
    for edit in sorted(edits, key=lambda e: (-e.start, -e.end)):
        new[edit.start - 1 : edit.end] = list(edit.new)
    old = list(src.lines)
    # difflib needs every line to end in a newline; a last line without one is marked the
    # way diff marks it, so patch and git apply keep the file's ending as it was.
    rel = _relative(files, name)
    lines = difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}", n=3)
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)

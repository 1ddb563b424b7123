"""The by-hand change of a runtime fix, made on the script's source text (issue 29 item 8).

Pure: source text in, line edits out; no torch import, nothing executed. Each edit works on
the parsed syntax tree (`ast`), so a call spread over several lines, a trailing comma or an
existing keyword are handled as Python sees them, and the text outside the changed call is
kept byte for byte (comments, quotes, spacing). An edit that cannot be made safely (the
keyword may come through `**kwargs`, the call is not found) returns a reason instead, and
the fix is then listed as the line to add by hand (optimize/fix_patch.py).

Positions: `ast` columns are UTF-8 byte offsets, so lines are spliced as bytes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace lines `start`..`end` (1-based, inclusive) with `new`; `start = end + 1`
    inserts before `start`."""

    start: int
    end: int
    new: tuple[str, ...]
    what: str  # one line: what changed ("num_workers=2", "set_detect_anomaly(False)")


class Source:
    """One file's text and its syntax tree (None when it does not parse)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        try:
            self.tree: ast.Module | None = ast.parse(text)
        except (SyntaxError, ValueError):
            self.tree = None

    def calls(self) -> Iterator[ast.Call]:
        if self.tree is None:
            return
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield node

    def line_bytes(self, lineno: int) -> bytes:
        return self.lines[lineno - 1].encode("utf-8")

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def replace(self, node: ast.expr, new_text: str, what: str) -> Edit:
        """Replace `node`'s text with `new_text`."""
        return self._splice(
            node.lineno,
            node.col_offset,
            node.end_lineno or node.lineno,
            node.end_col_offset or 0,
            new_text,
            what,
        )

    def insert_at(self, lineno: int, col: int, text: str, what: str) -> Edit:
        return self._splice(lineno, col, lineno, col, text, what)

    def _splice(
        self, line: int, col: int, end_line: int, end_col: int, text: str, what: str
    ) -> Edit:
        head = self.line_bytes(line)[:col]
        tail = self.line_bytes(end_line)[end_col:]
        joined = (head + text.encode("utf-8") + tail).decode("utf-8")
        return Edit(line, end_line, tuple(joined.splitlines(keepends=True)), what)

    def indent_of(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip())]

    def newline(self) -> str:
        first = self.lines[0] if self.lines else "\n"
        return "\r\n" if first.endswith("\r\n") else "\n"


def call_name(call: ast.Call) -> str:
    """The called name: `AdamW` for torch.optim.AdamW(...), `zero_grad` for opt.zero_grad()."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _spans(call: ast.Call, line: int) -> bool:
    return call.lineno <= line <= (call.end_lineno or call.lineno)


def calls_named(src: Source, names: Iterable[str], line: int | None = None) -> list[ast.Call]:
    """Calls of any of `names`; with `line`, only those spanning it (innermost first)."""
    wanted = set(names)
    found = [c for c in src.calls() if call_name(c) in wanted]
    if line is not None:
        found = [c for c in found if _spans(c, line)]
        found.sort(key=lambda c: (c.end_lineno or c.lineno) - c.lineno)
    return sorted(found, key=lambda c: (c.lineno, c.col_offset)) if line is None else found


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def set_argument(
    src: Source, call: ast.Call, name: str, value: str, position: int | None = None
) -> Edit | str:
    """`name=value` in `call`: the existing keyword's value (or positional argument at
    `position`) replaced, else the keyword added after the last argument. A reason (str)
    when the argument may come through **kwargs, which a new keyword would clash with."""
    what = f"{name}={value}"
    existing = keyword(call, name)
    if existing is not None:
        if src.segment(existing.value) == value:
            return f"{name} is already {value} at line {call.lineno}"
        return src.replace(existing.value, value, what)
    if position is not None and len(call.args) > position:
        arg = call.args[position]
        if isinstance(arg, ast.Starred):
            return f"the call at line {call.lineno} passes *args: {name} may be among them"
        return src.replace(arg, value, what)
    if any(k.arg is None for k in call.keywords):
        return f"the call at line {call.lineno} passes **kwargs: {name} may be among them"
    if any(isinstance(a, ast.Starred) for a in call.args) and position is not None:
        return f"the call at line {call.lineno} passes *args: {name} may be among them"
    nodes: list[ast.expr] = [*call.args, *(k.value for k in call.keywords)]
    if nodes:
        last = max(nodes, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
        return src.insert_at(
            last.end_lineno or last.lineno, last.end_col_offset or 0, f", {what}", what
        )
    # No argument: before the closing parenthesis, which ends the call.
    end_line = call.end_lineno or call.lineno
    return src.insert_at(end_line, (call.end_col_offset or 1) - 1, what, what)


def is_constant(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


# --------------------------------------------------------------------------- top-level inserts


def torch_alias(src: Source) -> tuple[str, int] | None:
    """The name `import torch` binds at the top level and the line after which to insert
    (the last line of that import), or None without a top-level `import torch`."""
    if src.tree is None:
        return None
    for node in src.tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    return alias.asname or "torch", node.end_lineno or node.lineno
    return None


def _import_block_end(src: Source, after: int) -> int:
    """The last line of the run of top-level imports that holds line `after`, so a
    statement added there does not split the script's import block."""
    end = after
    assert src.tree is not None
    for node in src.tree.body:
        if node.lineno <= after:
            continue
        if not isinstance(node, ast.Import | ast.ImportFrom):
            break
        end = node.end_lineno or node.lineno
    return end


def insert_after_torch_import(src: Source, statement: str, what: str) -> Edit | str:
    """`statement` (written with `torch.`) on its own line after the top-level imports
    that hold `import torch`."""
    found = torch_alias(src)
    if found is None:
        return "no top-level `import torch` to put it after"
    alias, line = found
    line = _import_block_end(src, line)
    text = statement.replace("torch.", f"{alias}.", 1) if alias != "torch" else statement
    return Edit(line + 1, line, (text + src.newline(),), what)


# --------------------------------------------------------------------------- per fix kind


def anomaly_off(src: Source) -> list[Edit] | str:
    """set_detect_anomaly(True) -> set_detect_anomaly(False); detect_anomaly() (a context
    manager) -> set_detect_anomaly(False), which is one too."""
    edits: list[Edit] = []
    for call in calls_named(src, ("set_detect_anomaly", "detect_anomaly")):
        if call_name(call) == "set_detect_anomaly":
            mode = call.args[0] if call.args else getattr(keyword(call, "mode"), "value", None)
            if mode is None or is_constant(mode, False):
                continue
            edits.append(src.replace(mode, "False", "set_detect_anomaly(False)"))
        else:
            func = call.func
            prefix = src.segment(func.value) + "." if isinstance(func, ast.Attribute) else ""
            edits.append(
                src.replace(call, f"{prefix}set_detect_anomaly(False)", "set_detect_anomaly(False)")
            )
    return edits or "no set_detect_anomaly(...) / detect_anomaly() call in this file"


def set_threads(src: Source, threads: int) -> list[Edit] | str:
    """Every torch.set_num_threads(n) of the script gets the measured count (the applier
    held that count against each of them); without one, the call goes after import torch."""
    what = f"torch.set_num_threads({threads})"
    edits: list[Edit] = []
    for call in calls_named(src, ("set_num_threads",)):
        first = call.args[0] if call.args else None
        settable = first is not None and not isinstance(first, ast.Starred)
        if settable and first is not None and src.segment(first) != str(threads):
            edits.append(src.replace(first, str(threads), what))
    if edits:
        return edits
    if calls_named(src, ("set_num_threads",)):
        return f"the script already calls torch.set_num_threads({threads})"
    edit = insert_after_torch_import(src, what, what)
    return [edit] if isinstance(edit, Edit) else edit


def call_argument(
    src: Source,
    names: Sequence[str],
    line: int | None,
    argument: str,
    value: str,
    position: int | None = None,
) -> list[Edit] | str:
    """`argument=value` on the call of `names` at `line` (or on every such call of the file
    when no line is known)."""
    calls = calls_named(src, names, line)
    if not calls:
        where = f" at line {line}" if line is not None else ""
        return f"no {'/'.join(names)}(...) call{where}"
    targets = calls[:1] if line is not None else calls
    edits, reasons = [], []
    for call in targets:
        edit = set_argument(src, call, argument, value, position)
        if isinstance(edit, Edit):
            edits.append(edit)
        else:
            reasons.append(edit)
    return edits or "; ".join(reasons)


def call_arguments(
    src: Source,
    names: Sequence[str],
    line: int,
    settings: Sequence[tuple[str, str, int | None]],
) -> list[Edit] | str:
    """Several `argument=value` (each with its positional index, or None) on the call of
    `names` at `line`, as one edit of the whole call's text (edits of one line would
    overlap). A setting the call already has is left as it is."""
    calls = calls_named(src, names, line)
    if not calls:
        return f"no {'/'.join(names)}(...) call at line {line}"
    call = calls[0]
    text, done, reasons = src.segment(call), [], []
    for argument, value, position in settings:
        again = Source(text)
        inner = calls_named(again, names)
        if not inner:
            return "the call could not be re-read"
        edit = set_argument(again, inner[0], argument, value, position)
        if isinstance(edit, str):
            if "already" not in edit:
                return edit
            reasons.append(edit)
            continue
        text = _apply_in_text(again, [edit])
        done.append(f"{argument}={value}")
    if not done:
        return "; ".join(reasons)
    return [src.replace(call, text, ", ".join(done))]


def fused_optimizer(
    src: Source, cls: str, line: int | None, foreach_only: bool
) -> list[Edit] | str:
    """fused=True on the optimizer's constructor (foreach=True for a class without fused
    kernels); an explicit foreach=... beside fused=True becomes None (both True raise)."""
    calls = calls_named(src, (cls,), line)
    if not calls:
        return f"no {cls}(...) call" + (f" at line {line}" if line is not None else "")
    call = calls[0]
    if foreach_only:
        edit = set_argument(src, call, "foreach", "True")
        return [edit] if isinstance(edit, Edit) else edit
    edit = set_argument(src, call, "fused", "True")
    if not isinstance(edit, Edit):
        return edit
    foreach = keyword(call, "foreach")
    if foreach is None or is_constant(foreach.value, None) or is_constant(foreach.value, False):
        return [edit]
    # Both on one line would overlap: replace the whole call's text once.
    text = src.segment(call)
    fixed = Source(text)
    inner = calls_named(fixed, (cls,))
    if not inner:
        return "the optimizer call could not be re-read"
    both = _apply_in_text(fixed, [set_argument(fixed, inner[0], "fused", "True")])
    again = Source(both)
    inner = calls_named(again, (cls,))
    step = set_argument(again, inner[0], "foreach", "None") if inner else "not re-read"
    if not isinstance(step, Edit):
        return step
    return [src.replace(call, _apply_in_text(again, [step]), "fused=True, foreach=None")]


def _apply_in_text(src: Source, edits: Sequence[Edit | str]) -> str:
    lines = list(src.lines)
    for edit in sorted((e for e in edits if isinstance(e, Edit)), key=lambda e: -e.start):
        lines[edit.start - 1 : edit.end] = list(edit.new)
    return "".join(lines)


def zero_grad_to_none(src: Source, lines: Sequence[int]) -> list[Edit] | str:
    """zero_grad(set_to_none=True) at the recorded call sites (every zero_grad() call of the
    file when none was recorded)."""
    calls = calls_named(src, ("zero_grad",))
    if lines:
        calls = [c for c in calls if any(_spans(c, n) for n in lines)]
    edits, reasons = [], []
    for call in calls:
        edit = set_argument(src, call, "set_to_none", "True", position=0)
        if isinstance(edit, Edit):
            edits.append(edit)
        elif "already" not in edit:
            reasons.append(edit)
    return edits or ("; ".join(reasons) or "no zero_grad() call to change")


def sync_debug_off(src: Source) -> list[Edit] | str:
    edits = []
    for call in calls_named(src, ("set_sync_debug_mode",)):
        if call.args and src.segment(call.args[0]) not in ("0", '"default"', "'default'"):
            edits.append(src.replace(call.args[0], "0", "torch.cuda.set_sync_debug_mode(0)"))
    return edits or "no set_sync_debug_mode(...) call to change"


def assignment_or_insert(src: Source, target: str, value: str, what: str) -> list[Edit] | str:
    """`<target> = value`: an existing assignment to `target` (as written, e.g.
    torch.backends.cudnn.benchmark) changed, else the statement added after import torch."""
    edits = []
    if src.tree is not None:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                written = src.segment(node.targets[0])
                if written.split(".", 1)[-1] == target.split(".", 1)[-1]:
                    if src.segment(node.value) != value:
                        edits.append(src.replace(node.value, value, what))
                    else:
                        return f"{target} is already {value}"
    if edits:
        return edits
    edit = insert_after_torch_import(src, f"{target} = {value}", what)
    return [edit] if isinstance(edit, Edit) else edit


def call_or_insert(src: Source, name: str, value: str, statement: str) -> list[Edit] | str:
    """The first argument of every `name(...)` call set to `value`, else `statement` added
    after import torch."""
    calls = calls_named(src, (name,))
    edits = [
        src.replace(c.args[0], value, statement)
        for c in calls
        if c.args and src.segment(c.args[0]) != value
    ]
    if edits:
        return edits
    if calls:
        return f"the script already calls {name}({value})"
    edit = insert_after_torch_import(src, statement, statement)
    return [edit] if isinstance(edit, Edit) else edit


def cpu_autocast_off(src: Source) -> list[Edit] | str:
    """enabled=False on the script's CPU autocast regions."""
    edits = []
    for call in calls_named(src, ("autocast",)):
        device = call.args[0] if call.args else getattr(keyword(call, "device_type"), "value", None)
        on_cpu = isinstance(device, ast.Constant) and device.value == "cpu"
        cpu_module = isinstance(call.func, ast.Attribute) and src.segment(call.func).endswith(
            "cpu.amp.autocast"
        )
        if on_cpu or cpu_module:
            edit = set_argument(src, call, "enabled", "False")
            if isinstance(edit, Edit):
                edits.append(edit)
    return edits or "no CPU autocast(...) call to change"


def deterministic_off(src: Source) -> list[Edit] | str:
    edits: list[Edit] = []
    found = assignment_or_insert(src, "torch.backends.cudnn.deterministic", "False", "")
    if isinstance(found, list) and all(e.start <= e.end for e in found):
        edits += [Edit(e.start, e.end, e.new, "cudnn.deterministic = False") for e in found]
    for call in calls_named(src, ("use_deterministic_algorithms",)):
        if call.args and is_constant(call.args[0], True):
            edits.append(src.replace(call.args[0], "False", "use_deterministic_algorithms(False)"))
    return edits or "no deterministic setting to change"

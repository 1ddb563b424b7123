"""The fix for a graph break, recompile or cudagraph skip, from dynamo's own reason text,
with the user's line rewritten where the rewrite is mechanical.

Matched on the reason's wording (dynamo's gb_type lines, stable since 2.7's graph-break
registry; older wordings are listed too). Unknown reasons get dynamo's own hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Fix:
    cause: str  # short name of the cause
    advice: str  # what to change
    rewritten: str | None = None  # the user's line with the change written out


_IF = re.compile(r"^(\s*)(?:el)?if\s+(.+?):\s*(#.*)?$")


def _strip_comment(code: str) -> str:
    return re.sub(r"\s+#.*$", "", code)


def _item(code: str | None) -> Fix:
    advice = (
        "keep the value a tensor (compare, scale or accumulate it as a tensor); if a "
        "Python number is needed, set torch._dynamo.config.capture_scalar_outputs = True"
    )
    rewritten = None
    if code:
        line = _strip_comment(code)
        m = _IF.match(line)
        if m:
            cond = m.group(2).replace(".item()", "")
            rewritten = f"{m.group(1)}x = torch.where({cond}, <x as the branch changes it>, x)"
        else:
            rewritten = line.replace(".item()", "")
    return Fix("Tensor.item() in the compiled code", advice, rewritten)


def _branch(code: str | None) -> Fix:
    rewritten = None
    if code:
        m = _IF.match(_strip_comment(code))
        if m:
            where = f"torch.where({m.group(2)}, <value if true>, <value if false>)"
            rewritten = f"{m.group(1)}out = {where}"
    return Fix(
        "data-dependent control flow",
        "make it branchless with torch.where (or torch.cond for two sub-graphs)",
        rewritten,
    )


DISABLED_CAUSE = "a torch.compiler.disable'd function"


_DISABLE_WRAP = re.compile(r"torch\.(?:compiler|_dynamo)\.disable\(\s*([\w.]+)\s*\)")
_DISABLE_DECORATOR = re.compile(r"^\s*@torch\.(?:compiler|_dynamo)\.disable\b")


def _disabled(code: str | None) -> Fix:
    """The break is reported where the disable'd helper is called, or where it is wrapped.
    Only the wrapping line can be rewritten; a call site gets no rewrite (the same line with
    a comment added would not be a change)."""
    rewritten = None
    if code:
        line = _strip_comment(code)
        if _DISABLE_WRAP.search(line):
            rewritten = _DISABLE_WRAP.sub(r"\1", line)
        elif _DISABLE_DECORATOR.match(line):
            rewritten = "# (the @torch.compiler.disable line removed)"
    return Fix(
        DISABLED_CAUSE,
        "where the helper is wrapped (`f = torch.compiler.disable(g)` or the "
        "@torch.compiler.disable decorator), drop the wrapper so dynamo traces the helper into "
        "the graph; keep it only for code dynamo cannot trace",
        rewritten,
    )


def _print(code: str | None) -> Fix:
    return Fix(
        "print/logging in the compiled code",
        "move it out of forward (log from the training loop), or register it with "
        "torch._dynamo.config.reorderable_logging_functions",
        f"# {_strip_comment(code).strip()}  (moved to the training loop)" if code else None,
    )


_BREAK_RULES: tuple[tuple[re.Pattern[str], object], ...] = (
    (re.compile(r"Tensor\.item\(\)|item\(\) call", re.I), _item),
    (re.compile(r"data-dependent branching|generic_jump|data dependent", re.I), _branch),
    (re.compile(r"torch\.compiler\.disable|disable\(\)d function|skipfiles", re.I), _disabled),
    (re.compile(r"builtin operator `print`|logging|print", re.I), _print),
)


def break_fix(reason: str, code: str | None) -> Fix:
    for pattern, make in _BREAK_RULES:
        if pattern.search(reason):
            return make(code)  # type: ignore[operator,no-any-return]
    hint = re.search(r"Hint: (.+)", reason)
    return Fix(
        "unsupported code",
        hint.group(1).strip() if hint else "rewrite the line with torch operations dynamo traces",
    )


_INT_ATTR = re.compile(r"(L\['self'\]|self)\.(\w+) == ")
_SIZE = re.compile(r"size mismatch|tensor '.*' (size|stride)|\.size\(\)\[\d+\]", re.I)


def recompile_fix(guard: str, code: str | None) -> Fix:
    # model.eval() flips `training`; torch.no_grad() for the evaluation flips the global
    # grad mode (dynamo's global-state guard): either way one graph per mode, compiled once.
    if re.search(r"\.training\b|grad_mode|GLOBAL_STATE", guard):
        return Fix(
            "train/eval switch",
            "expected: one graph per mode, each compiled once; no action",
        )
    if _SIZE.search(guard):
        return Fix(
            "changing input shapes",
            "mark the varying dimension dynamic (torch._dynamo.mark_dynamic(x, dim)), compile "
            "with dynamic=True, or pad inputs to a few fixed sizes (buckets)",
            f"torch._dynamo.mark_dynamic(x, 0)  # before: {_strip_comment(code).strip()}"
            if code
            else None,
        )
    attr = _INT_ATTR.search(guard)
    if attr:
        name = attr.group(2)
        rewritten = None
        if code:
            rewritten = _strip_comment(code).replace(f"self.{name}", f"self.{name}_t")
            rewritten += f"  # self.{name}_t: a tensor buffer, updated with .fill_()"
        return Fix(
            "a Python number that changes between calls",
            f"self.{name} is an int attribute of the module, which dynamo treats as a constant: "
            f"every new value compiles a new graph. Keep it in a tensor buffer "
            f"(register_buffer('{name}_t', ...), then .fill_(value)), or set "
            "torch._dynamo.config.allow_unspec_int_on_nn_module = True",
            rewritten,
        )
    if re.search(r"== -?[\d.]+", guard):
        return Fix(
            "a Python number that changes between calls",
            "pass the changing value as a tensor (torch.tensor(v)) instead of a Python scalar",
        )
    if "___check_obj_id" in guard or "id(" in guard:
        return Fix(
            "a different object each call",
            "pass the same module/function object each call (don't re-create it per step)",
        )
    return Fix("a guard failed", "see the failed guard; make that value stable between calls")


def cudagraph_fix(message: str) -> Fix:
    low = message.lower()
    if "re-record" in low or "rerecord" in low:
        return Fix(
            "re-recording",
            "static inputs change address between calls: keep parameters and buffers in place, "
            "and call torch.compiler.cudagraph_mark_step_begin() each iteration",
        )
    if "mutated input" in low or "mutation" in low:
        return Fix(
            "input mutation",
            "don't mutate graph inputs in place inside the compiled region (return new tensors)",
        )
    if "cpu device" in low or "non-cuda" in low or "cpu" in low:
        return Fix("CPU tensors in the graph", "move those tensors to the GPU before the call")
    if "dynamic shape" in low or "symint" in low or "dynamic" in low:
        return Fix("dynamic shapes", "keep shapes static under reduce-overhead (pad to sizes)")
    if "incompatible op" in low or "sync" in low:
        return Fix("an op CUDA graphs cannot capture", "move the op out of the compiled region")
    return Fix("cudagraph skipped", "see the reason; CUDA graphs need static, GPU-only graphs")

"""The hooks catalog entries carry: trade-offs, when not to try automatically, stand-ins.

Each function here is named by one entry of `optimize/catalog.py` (its `conflicts`,
`skip_auto`, `stand_in` or `tailor` field), so what is particular about an optimization lives
with its entry, and recommend.py holds no per-id code. Pure: facts in, words out; no torch.

Signatures:
    conflicts(facts, others) -> notes   `others`: the other ids recommended with it
    skip_auto(facts, asked) -> reason   why not to try it automatically (None: try it);
                                        `asked`: the user named it with --only
    stand_in(facts) -> id               the alternative to recommend on this device
    tailor(facts, code_change) -> code  the by-hand change written for this script
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set

from perfdoctor.model import Facts
from perfdoctor.optimize.sizing import cpu_threads_target
from perfdoctor.rules.base import num
from perfdoctor.rules.cpu import _compute_cores

log = logging.getLogger(__name__)

ConflictHook = Callable[[Facts, Set[str]], tuple[str, ...]]
SkipAutoHook = Callable[[Facts, bool], "str | None"]
StandInHook = Callable[[Facts], str]
TailorHook = Callable[[Facts, str], str]

BF16_MIN_CC = 8.0


def _true(facts: Facts, name: str) -> bool:
    return bool(facts.get(name))


def _host_syncs(facts: Facts) -> float | None:
    syncs = facts.get("host_syncs_per_step")
    return float(syncs) if isinstance(syncs, (int, float)) and syncs > 0 else None


# --------------------------------------------------------------------------- conflicts


def always(note: str) -> ConflictHook:
    """A trade-off that holds whatever was measured."""
    return lambda facts, others: (note,)


def compile_conflicts(other_mode: str) -> ConflictHook:
    """compile and compile-cudagraphs: debug modes eat the gain; one compile mode at a time."""

    def notes(facts: Facts, others: Set[str]) -> tuple[str, ...]:
        found: list[str] = []
        debug = [
            name
            for name, fact in (
                ("anomaly detection", "anomaly_detection_enabled"),
                ("a user profiler", "user_profiler_active"),
                ("emit_nvtx", "emit_nvtx_enabled"),
            )
            if _true(facts, fact)
        ]
        if debug or others & {"anomaly-off", "debug-modes-off"}:
            what = ", ".join(debug) or "debug modes"
            found.append(f"compile gains little while {what} is on: switch debug modes off first")
        if other_mode in others:
            found.append(f"exclusive with {other_mode}: only one compile mode can be applied")
        return tuple(found)

    return notes


def cudagraph_conflicts(facts: Facts, others: Set[str]) -> tuple[str, ...]:
    found = list(compile_conflicts("compile")(facts, others))
    syncs = _host_syncs(facts)
    if syncs is not None:
        found.append(
            f"CUDA graphs need a step without host syncs; {syncs:g} per step were seen "
            "(remove-host-syncs first)"
        )
    changes = facts.get("input_shape_changes")
    if isinstance(changes, int) and changes:
        found.append("CUDA graphs need static shapes; input shapes changed after warm-up")
    return tuple(found)


def amp_conflicts(other_dtype: str) -> ConflictHook:
    def notes(facts: Facts, others: Set[str]) -> tuple[str, ...]:
        found = [f"exclusive with {other_dtype}"]
        if _true(facts, "anomaly_detection_enabled"):
            found.append("anomaly detection slows autocast steps too")
        return tuple(found)

    return notes


def worker_conflicts(facts: Facts, others: Set[str]) -> tuple[str, ...]:
    if "cpu-threads" in others or facts.get("device_is_cuda") is False:
        return (
            "workers take cores from the intra-op compute threads: this variant changes "
            "num_workers alone (threads stay the script's; cpu-threads changes them, measured "
            "apart)",
        )
    return ()


def thread_conflicts(facts: Facts, others: Set[str]) -> tuple[str, ...]:
    if "dataloader-workers" in others:
        return ("compute threads compete with DataLoader workers for CPU cores",)
    return ()


def cudnn_benchmark_conflicts(facts: Facts, others: Set[str]) -> tuple[str, ...]:
    if facts.get("input_shape_changes"):
        return ("re-tunes for every new input shape; shapes changed after warm-up",)
    return ()


def non_blocking_conflicts(facts: Facts, others: Set[str]) -> tuple[str, ...]:
    if _true(facts, "dataloader_pin_memory") or "pin-memory" in others:
        return ()
    return ("only overlaps copies from pinned memory: needs pin-memory too",)


# --------------------------------------------------------------------------- auto-try


def skip_workers_set_by_script(facts: Facts, asked: bool) -> str | None:
    # The applier never raises a count the script chose, so the run could only be refused:
    # raising it stays a change by hand (the finding says by how much). It lowers one that
    # leaves the training process no core (sizing.fewer_workers): that run is worth making.
    workers = num(facts, "dataloader_num_workers") or 0
    if workers <= 0:
        return None
    usable, _, _ = _compute_cores(facts)
    if workers > usable - 1:
        return None
    return "the script sets num_workers itself"


def skip_threads_already_set(facts: Facts, asked: bool) -> str | None:
    # The applier would set what the script already runs with: a re-run that changes
    # nothing measures only noise.
    target = cpu_threads_target(facts)
    threads = num(facts, "torch_num_threads")
    if target is not None and threads is not None and int(threads) == target:
        return f"the script already runs {target} threads"
    return None


def skip_cudagraphs_with_host_syncs(facts: Facts, asked: bool) -> str | None:
    # They would only fail; --only still tries them.
    syncs = _host_syncs(facts)
    if syncs is not None and not asked:
        return f"{syncs:g} host syncs per step"
    return None


# --------------------------------------------------------------------------- stand-ins


def preferred_amp(facts: Facts) -> str:
    """Both amp ids name "use mixed precision"; the device decides the dtype: bf16 where the
    GPU has it natively (compute capability >= 8.0), fp16 + GradScaler before that."""
    cc = num(facts, "gpu_compute_capability")
    return "amp-fp16" if cc is not None and cc < BF16_MIN_CC else "amp-bf16"


# --------------------------------------------------------------------------- tailoring

# Optimizers with a fused implementation in torch.optim: the snippet names the script's own.
_FUSED_CLASSES = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
# The others with a multi-tensor (foreach) step, the most they can do instead.
_FOREACH_ONLY_CLASSES = frozenset(
    {"Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"}
)


def fused_for_script_optimizer(facts: Facts, code_change: str) -> str:
    """The fused-optimizer snippet shows the script's optimizer class, not AdamW for SGD;
    a class without fused kernels (Adadelta, RMSprop, ...) gets foreach=True instead."""
    cls = facts.get("optimizer_class")
    if isinstance(cls, str) and cls in _FUSED_CLASSES:
        return f"torch.optim.{cls}(model.parameters(), lr=..., fused=True)"
    if isinstance(cls, str) and cls in _FOREACH_ONLY_CLASSES:
        return (
            f"torch.optim.{cls}(model.parameters(), lr=..., foreach=True)"
            f"  # {cls} has no fused=True"
        )
    return code_change


def _known_class_without_fused(facts: Facts) -> bool:
    cls = facts.get("optimizer_class")
    return isinstance(cls, str) and bool(cls) and cls not in _FUSED_CLASSES


def skip_fused_without_kernels(facts: Facts, asked: bool) -> str | None:
    # The applier patches only the classes with fused kernels: on any other optimizer the
    # re-runs could only be refused, and their A/B rounds would time the unchanged script.
    if _known_class_without_fused(facts):
        return f"{facts.get('optimizer_class')} has no fused implementation in torch.optim"
    return None

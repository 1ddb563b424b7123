"""How a script's batch size can be changed at runtime without editing it (pure: no torch).

Two knobs, the script's own first:
- argument: the script takes a batch-size option (`--batch-size 32` on the command line, or
  an argparse `add_argument("--batch-size", ...)` in its source). A re-run passes another
  value: everything the script derives from it (steps per epoch, its own logging, an LR it
  scales) follows, as when the user changes it by hand.
- dataloader: the training DataLoader is built with a batch_size (no batch_sampler): the
  batch-size applier (collect/appliers/batch.py) rebuilds it with another, through the same
  DataLoader.__init__ patch the data appliers share. Only loaders built with the baseline's
  batch size change (the evaluation loader usually has another).
Neither: the script slices its batches by hand from a size perfdoctor cannot reach.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# The batch size a plan run's DataLoaders get, and the baseline batch they replace.
BATCH_ENV = "PERFDOCTOR_BATCH_SIZE"
BATCH_FROM_ENV = "PERFDOCTOR_BATCH_FROM"
# Micro-batches per optimizer step in a plan run (gradient accumulation keeps the effective
# batch); collect/appliers/batch.py.
ACCUMULATE_ENV = "PERFDOCTOR_ACCUMULATE"
# Spellings of a batch-size option, most specific first.
BATCH_OPTIONS = (
    "--batch-size",
    "--batch_size",
    "--train-batch-size",
    "--train_batch_size",
    "--per-device-train-batch-size",
    "--per_device_train_batch_size",
    "--bs",
    "-b",
)

KnobKind = Literal["argument", "dataloader", "none"]


@dataclass(frozen=True)
class BatchKnob:
    kind: KnobKind
    batch: int | None  # the script's own batch size
    option: str | None = None  # the argument's spelling (kind "argument")
    why: str = ""  # one line: how the batch is changed, or why it cannot be

    @property
    def changeable(self) -> bool:
        return self.kind != "none" and self.batch is not None and self.batch > 0


def _argv_value(argv: Sequence[str], option: str) -> int | Literal[False] | None:
    """The option's integer value in argv; None when absent; False when present but not an
    integer."""
    for i, arg in enumerate(argv):
        text = None
        if arg == option and i + 1 < len(argv):
            text = argv[i + 1]
        elif arg.startswith(option + "="):
            text = arg[len(option) + 1 :]
        if text is not None:
            try:
                return int(text)
            except ValueError:
                return False
    return None


def declared_option(source: str) -> str | None:
    """The batch-size option an argparse/click script declares in its source, if any."""
    for option in BATCH_OPTIONS:
        if re.search(r"""["']""" + re.escape(option) + r"""["']""", source):
            return option
    return None


def declared_default(source: str, option: str) -> int | None:
    """The integer default of `option` in an argparse declaration, when written literally
    (`add_argument("--batch_size", type=int, default=20, ...)`)."""
    pattern = r"""["']""" + re.escape(option) + r"""["'][^)]*?default\s*=\s*(\d+)"""
    match = re.search(pattern, source, re.DOTALL)
    return int(match[1]) if match else None


def find_knob(
    argv: Sequence[str],
    source: str | None,
    dataloaders: Sequence[Any],
    observed_batch: int | None,
) -> BatchKnob:
    """The knob for this script. `dataloaders`: the baseline's DataLoaderInfo records;
    `observed_batch`: the batch size its timed steps saw."""
    for option in BATCH_OPTIONS:
        value = _argv_value(argv, option)
        if value is False:
            continue
        if value is not None and value > 0:
            return BatchKnob("argument", value, option, f"the script's {option} argument")
    declared = declared_option(source or "")
    # The declared default, not the batch the steps saw: a sequence model's inputs are
    # (time, batch), and the first dimension the probes read is then the time.
    default = declared_default(source or "", declared) if declared is not None else None
    if declared is not None and (default or observed_batch):
        return BatchKnob(
            "argument",
            default or observed_batch,
            declared,
            f"the script's {declared} argument (its default)",
        )
    for loader in dataloaders:
        size = getattr(loader, "batch_size", None)
        explicit = getattr(loader, "explicit", None) or []
        if size and "batch_sampler" not in explicit and not getattr(loader, "iterable", False):
            where = getattr(loader, "location", None)
            at = f" at {where.file}:{where.line}" if where is not None and where.file else ""
            return BatchKnob("dataloader", int(size), None, f"the DataLoader{at} rebuilt")
    seen = f" (batch {observed_batch} seen)" if observed_batch else ""
    return BatchKnob(
        "none",
        observed_batch,
        None,
        "the batch size cannot be changed without editing the script: it takes no "
        f"batch-size argument and builds no DataLoader with a batch_size{seen}",
    )


def argv_with_batch(argv: Sequence[str], option: str, batch: int) -> tuple[str, ...]:
    """argv with the option set to `batch` (replaced where given, else appended)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == option and i + 1 < len(out):
            out[i + 1] = str(batch)
            return tuple(out)
        if arg.startswith(option + "="):
            out[i] = f"{option}={batch}"
            return tuple(out)
    return (*out, option, str(batch))

"""How a quantity reads as text wherever it is written: findings, verdict reasons, reports.

Pure, no imports from the rest of perfdoctor, so the rules, the verdicts and the renderers
can all share it.
"""

from __future__ import annotations

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: float) -> str:
    """Binary units (GiB, as nvidia-smi and torch.cuda.memory_summary show them)."""
    size = float(value)
    for unit in _BYTE_UNITS[:-1]:
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} {_BYTE_UNITS[-1]}"

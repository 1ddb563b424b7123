"""JSON-safe numbers for the oracle harnesses (_oracle_hta.py, _oracle_tbp.py), which run in
the tools' own venvs: standard library only, found beside them on sys.path."""

from __future__ import annotations

import math
from typing import Any


def num(x: Any) -> Any:
    """numpy/pandas scalars to Python numbers; NaN/inf (and non-numbers) to None."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if math.isnan(v) or math.isinf(v):
        return None
    return int(v) if v.is_integer() and abs(v) < 2**53 else v

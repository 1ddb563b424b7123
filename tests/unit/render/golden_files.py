"""Golden-file comparison. Regenerate with PERFDOCTOR_UPDATE_GOLDEN=1 after a deliberate
change to a renderer, then read the diff before committing it."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "PERFDOCTOR_UPDATE_GOLDEN"


def assert_matches_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path.name}: run with {UPDATE_ENV}=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} differs from its golden file; if the change is intended, "
        f"regenerate with {UPDATE_ENV}=1 and review the diff"
    )

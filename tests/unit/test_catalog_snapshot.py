"""The catalogs' user-visible ids against one checked-in snapshot (catalog_snapshot.json).

Rule ids, optimization ids and their kinds are stable and user-visible (`--only`, `--skip`,
report.json, `perfdoctor rules`): a change to them must be deliberate. The snapshot is that
deliberate step, one file for both catalogs. After adding, moving or removing a rule or an
optimization on purpose, refresh it and commit it with the change:

    python3 tests/unit/test_catalog_snapshot.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("catalog_snapshot.json")
REFRESH = "python3 tests/unit/test_catalog_snapshot.py"


def live_snapshot() -> dict[str, Any]:
    from perfdoctor.optimize.catalog import CATALOG
    from perfdoctor.rules import ALL_RULES

    return {
        "rules": {rule.id: rule.module for rule in ALL_RULES},
        "optimizations": {opt_id: entry.kind for opt_id, entry in CATALOG.items()},
    }


def _changes(kind: str, live: dict[str, str], saved: dict[str, str]) -> list[str]:
    lines = [f"new {kind} {i} ({live[i]})" for i in live if i not in saved]
    lines += [f"{kind} {i} is gone" for i in saved if i not in live]
    lines += [
        f"{kind} {i}: {saved[i]} -> {live[i]}" for i in live if i in saved and live[i] != saved[i]
    ]
    return lines


def test_the_catalogs_match_the_checked_in_snapshot() -> None:
    live = live_snapshot()
    saved = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changes = _changes("rule", live["rules"], saved["rules"])
    changes += _changes("optimization", live["optimizations"], saved["optimizations"])
    assert not changes, (
        "the catalogs differ from tests/unit/catalog_snapshot.json: "
        + "; ".join(changes)
        + f". If the change is deliberate, refresh the snapshot with `{REFRESH}` and commit it."
    )
    # Order is user-visible too (`perfdoctor rules`, `perfdoctor optimizations`).
    assert list(live["rules"]) == list(saved["rules"]), f"rule order changed: {REFRESH}"
    assert list(live["optimizations"]) == list(saved["optimizations"]), REFRESH


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(live_snapshot(), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")

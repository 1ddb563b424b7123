"""The catalog itself: ids, declared facts, topics, optimization ids, listing, no torch.

Which rule ids exist, and in which module, is pinned by tests/unit/catalog_snapshot.json."""

from __future__ import annotations

import re
import subprocess
import sys

from load_limits import scaled

from perfdoctor.analyze.fact_catalog import FACTS, LOCATION_TOPICS
from perfdoctor.optimize.catalog import CATALOG
from perfdoctor.rules import ALL_RULES, describe_rules

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
AREAS = {
    "input",
    "precision",
    "launch",
    "cudnn",
    "layout",
    "optimizer",
    "sync",
    "memory",
    "utilization",
    "multi-gpu",
    "debug",
    "cpu",
    "model",
    "jitter",
    "measurement",
}


def test_rule_ids_are_unique_and_kebab_case() -> None:
    ids = [rule.id for rule in ALL_RULES]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if not KEBAB.match(i)] == []


def test_needed_and_used_facts_are_documented() -> None:
    undocumented = {
        (rule.id, fact)
        for rule in ALL_RULES
        for fact in (*rule.needs, *rule.uses)
        if fact not in FACTS
    }
    assert undocumented == set()


def test_location_topics_are_documented() -> None:
    unknown = {(r.id, t) for r in ALL_RULES for t in r.topics if t not in LOCATION_TOPICS}
    assert unknown == set()


def test_optimization_ids_are_in_the_catalog() -> None:
    # The ids themselves are pinned by tests/unit/catalog_snapshot.json.
    used = {opt for rule in ALL_RULES for opt in rule.optimizations}
    assert used - set(CATALOG) == set()


def test_every_rule_is_documented() -> None:
    for rule in ALL_RULES:
        assert rule.area in AREAS, rule.id
        assert rule.title and rule.description and rule.source, rule.id
        assert rule.needs, rule.id
        assert all(isinstance(v, float) for v in rule.thresholds.values()), rule.id
        assert rule.device in ("any", "cuda", "cpu"), rule.id


def test_describe_rules_lists_every_rule_with_its_thresholds_and_source() -> None:
    rows = describe_rules()
    assert [row["id"] for row in rows] == [rule.id for rule in ALL_RULES]
    for row, rule in zip(rows, ALL_RULES, strict=True):
        assert row["needs"] == list(rule.needs)
        assert row["thresholds"] == dict(rule.thresholds)
        assert row["source"] == rule.source
        assert row["module"] == rule.module and rule.module.startswith("perfdoctor.rules.")
        assert {"id", "title", "area", "needs", "thresholds", "source"} <= set(row)


def test_rules_never_import_torch() -> None:
    code = (
        "import sys\n"
        "import perfdoctor.rules\n"
        "bad = sorted(m for m in ('torch', 'pynvml') if m in sys.modules)\n"
        "sys.stdout.write(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=scaled(60)
    )
    assert out.stdout == ""

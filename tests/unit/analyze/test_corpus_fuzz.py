"""A few dozen whole-diagnosis mutants of the real GPU corpus traces (corpus_fuzz.py): hostile
collective fields, extreme numbers, quotes and bidi characters in names. Each gives a report
or one corrupt-trace line. The 1,000-mutant run: `python -m tests.unit.analyze.corpus_fuzz`."""

from __future__ import annotations

import pytest

from .corpus_fuzz import run
from .gpu_corpus import corpus_traces

MUTANTS = 24


@pytest.mark.skipif(not corpus_traces(), reason="the shared GPU corpus is absent")
def test_corpus_mutants_diagnose_or_are_corrupt() -> None:
    found = run(corpus_traces(), MUTANTS, seed=20261206)
    assert found["crash"] == []
    assert found["report"] > 0

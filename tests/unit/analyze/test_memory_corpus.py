"""Real CUDA memory snapshots (gpu-corpus/snapshots, a Transformer LM course assignment)
checked against PyTorch's own memory tools on the same pickles.

Reserved, allocated and free bytes at the snapshot: `torch.cuda._memory_viz.segsum` (what
`python -m torch.cuda._memory_viz stats FILE` prints), run live, with its byte formatter
swapped for plain integers so that the comparison is exact.

Peaks over the history: PyTorch's viewer computes them in JavaScript
(torch/utils/viz/MemoryViz.js, `process_alloc_data`; the y-axis maximum of `trace_plot`'s
"Active Memory Timeline", and of "Active Cached Memory Timeline" with plot_segments for
reserved), which is not part of the torch wheel. The constants below were produced by running
that function under node on each pickle converted to JSON (annotate_snapshot, then
process_alloc_data(snapshot, 0, false / true), its max_size). perfdoctor must match exactly.

Skipped when the corpus is absent (set PERFDOCTOR_GPU_CORPUS to its directory).
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

from perfdoctor.analyze.memory import MAX_TIMELINE_POINTS, MemorySummary, load_memory

REPO = Path(__file__).resolve().parents[3]


def _corpus() -> Path | None:
    for candidate in (os.environ.get("PERFDOCTOR_GPU_CORPUS"), REPO.parent / "shared/gpu-corpus"):
        if candidate and (Path(candidate) / "snapshots").is_dir():
            return Path(candidate) / "snapshots"
    return None


SNAPSHOTS = _corpus()
pytestmark = pytest.mark.skipif(SNAPSHOTS is None, reason="gpu-corpus snapshots not present")

# name: (MemoryViz peak allocated, MemoryViz peak reserved)
MEMORYVIZ_PEAKS = {
    "cs336_ctx128_forward_mixed.pickle": (23_873_313_792, 24_245_174_272),
    "cs336_ctx128_fullstep.pickle": (54_802_667_524, 61_111_009_280),
    "cs336_ctx256_forward.pickle": (26_252_175_360, 26_545_750_016),
}


@pytest.fixture(scope="module")
def summaries() -> dict[str, MemorySummary]:
    assert SNAPSHOTS is not None
    return {name: load_memory(SNAPSHOTS / name) for name in MEMORYVIZ_PEAKS}


def _segsum(path: Path) -> dict[str, int]:
    viz = pytest.importorskip("torch.cuda._memory_viz")

    class Raw(int):
        def __str__(self) -> str:
            return str(int(self))

    original = viz.Bytes
    viz.Bytes = Raw
    try:
        with path.open("rb") as fh:
            text = viz.segsum(pickle.load(fh))  # torch's own reader
    finally:
        viz.Bytes = original
    fields = dict(re.findall(r"^(segments|total_\w+): (\d+)", text, re.M))
    return {k: int(v) for k, v in fields.items()}


@pytest.mark.parametrize("name", sorted(MEMORYVIZ_PEAKS))
def test_snapshot_state_matches_memory_viz_stats(
    summaries: dict[str, MemorySummary], name: str
) -> None:
    assert SNAPSHOTS is not None
    reference = _segsum(SNAPSHOTS / name)
    s = summaries[name]
    assert s.final_reserved_bytes == reference["total_reserved"]
    assert s.final_allocated_bytes == reference["total_allocated"]
    assert s.free_bytes == reference["total_free"]
    assert s.segments == reference["segments"]


@pytest.mark.parametrize("name", sorted(MEMORYVIZ_PEAKS))
def test_peaks_match_memory_viz(summaries: dict[str, MemorySummary], name: str) -> None:
    allocated, reserved = MEMORYVIZ_PEAKS[name]
    s = summaries[name]
    assert s.peak_allocated_bytes == allocated
    assert s.peak_reserved_bytes == reserved
    # The chart keeps the peak through its downsampling.
    assert len(s.timeline_allocated_bytes) <= MAX_TIMELINE_POINTS
    assert max(s.timeline_allocated_bytes) == allocated
    assert max(s.timeline_reserved_bytes) == reserved
    assert s.timeline_peak_index is not None
    assert s.timeline_allocated_bytes[s.timeline_peak_index] == allocated


def test_full_step_splits_into_parameters_gradients_and_adam_state(
    summaries: dict[str, MemorySummary],
) -> None:
    s = summaries["cs336_ctx128_fullstep.pickle"]
    cats = s.categories_at_peak
    # AdamW keeps two fp32 moments per parameter, and the gradients are the parameters' size;
    # the parameters were moved to the GPU before recording began (unknown).
    assert cats["optimizer_state"] == pytest.approx(2 * cats["gradients"], rel=0.01)
    assert cats["unknown"] == pytest.approx(cats["gradients"], rel=0.01)
    assert s.peak_during == "Optimizer.step"
    top = s.top_sites[0].location
    assert (top.file, top.line, top.function) == ("cs336_basics/optimizers.py", 82, "step")
    assert not s.expandable_segments


FORWARD_ONLY = ["cs336_ctx128_forward_mixed.pickle", "cs336_ctx256_forward.pickle"]


@pytest.mark.parametrize("name", FORWARD_ONLY)
def test_forward_only_holds_activations_and_user_lines(
    summaries: dict[str, MemorySummary], name: str
) -> None:
    s = summaries[name]
    cats = s.categories_at_peak
    assert cats["gradients"] == cats["optimizer_state"] == 0
    assert cats["activations"] + cats["autocast_copies"] > 0.4 * s.peak_allocated_bytes
    assert all(site.location.file == "cs336_basics/transformer.py" for site in s.top_sites)
    assert all(site.location.line > 0 for site in s.top_sites)


def test_autocast_keeps_bf16_copies_of_the_weights(summaries: dict[str, MemorySummary]) -> None:
    """Under autocast most of the forward's memory is autocast's cached bf16 weight copies
    (half the fp32 parameters, which predate the history and show as unknown), not
    activations; the fp32 forward has none."""
    mixed = summaries["cs336_ctx128_forward_mixed.pickle"].categories_at_peak
    assert mixed["autocast_copies"] > mixed["activations"]
    assert mixed["autocast_copies"] > 0.5 * mixed["unknown"]
    assert summaries["cs336_ctx256_forward.pickle"].categories_at_peak["autocast_copies"] == 0

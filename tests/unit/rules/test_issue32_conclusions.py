"""Issue 32's shapes at the rules: what the slow steps are comes before the DataLoader, the
stall leads over the shares it inflates, in-memory tensors get batch indexing, and loop work
survives a loaded machine."""

from __future__ import annotations

from perfdoctor.model import Finding, Scalar, SourceLocation
from perfdoctor.optimize.catalog import CATALOG
from perfdoctor.rules import ALL_RULES, evaluate

from .factsets import make_facts

RULES = {r.id: r for r in ALL_RULES}


def _one(rule_id: str, base: str = "cpu", **overrides: Scalar) -> Finding | None:
    results = evaluate(make_facts(base, **overrides), rules=(RULES[rule_id],))
    return results.findings[0] if results.findings else None


_JITTERY = {
    "step_jitter_ratio": 3.0,
    "step_ms_p50": 100.0,
    "step_ms_p90": 300.0,
    "step_ms_mean": 560.0,  # one 9.5 s step among 20
    "data_wait_frac": 0.08,
    "cpu_other_busy_cores": 0.1,
}


def test_a_compile_in_the_timed_steps_is_named_and_workers_are_not_promised_it() -> None:
    # timm train.py --torchcompile: the long step compiled the eval graph. Before: "the
    # DataLoader stalls", dataloader-workers "saves ~97%".
    finding = _one(
        "step-jitter",
        **_JITTERY,
        jitter_excess_cause="compile",
        jitter_excess_cause_frac=0.97,
        jitter_excess_data_frac=0.01,
        jitter_longest_step_index=12,
        jitter_longest_step_ms=9500.0,
    )
    assert finding is not None
    assert "step 12 took 9,500 ms; 97% of the slow steps' extra time is torch.compile" in (
        finding.explanation
    )
    assert "dataloader-workers" not in finding.optimizations
    assert "not what makes them slow" in finding.explanation


def test_evaluations_as_long_steps_are_named_before_the_loader() -> None:
    # minGPT's adder: its long steps are evaluations. Before: workers "~89%".
    finding = _one(
        "step-jitter",
        **_JITTERY,
        jitter_excess_cause="eval_forward",
        jitter_excess_cause_frac=0.85,
        jitter_excess_data_frac=0.05,
    )
    assert finding is not None and "evaluation" in finding.explanation
    assert finding.optimizations == ()


def test_workers_are_promised_only_the_data_waits_share_of_the_extra_time() -> None:
    finding = _one("step-jitter", **_JITTERY, jitter_excess_data_frac=0.4)
    assert finding is not None and finding.optimizations == ("dataloader-workers",)
    whole = (560.0 - 100.0) / 560.0
    assert finding.gain.step_time_frac is not None
    assert abs(finding.gain.step_time_frac - whole * 0.4) < 1e-3  # rounded to 4 places


def test_the_stall_leads_over_the_optimizer_share_it_inflates() -> None:
    # super_resolution under load: Adam 118-171 ms per step against 0.8 ms quiet. Before:
    # "single-tensor optimizer" led, the stall was not named.
    facts = make_facts(
        "cpu",
        optimizer_impl="single-tensor",
        optimizer_frac=0.6,
        optimizer_param_tensors=8,
        step_ms_p50=200.0,
        cpu_other_busy_cores=1.7,
        phase_stall_ratio=150.0,
        phase_stall_phase="optimizer",
        phase_stall_median_ms=120.0,
        phase_stall_fastest_ms=0.8,
    )
    findings = evaluate(facts).findings
    ids = [f.rule_id for f in findings]
    assert ids[0] == "intra-op-stall", ids
    lead = findings[0]
    assert "torch.set_num_threads(1)" in lead.explanation
    assert lead.gain.step_time_frac is not None and lead.gain.step_time_frac <= 1.0
    # Its fix is tried and named on the first screen (it read "No automatic fix").
    from perfdoctor.rules import ALL_RULES

    (rule,) = [r for r in ALL_RULES if r.id == "intra-op-stall"]
    assert rule.optimizations == ("cpu-threads",)


def test_in_memory_tensors_get_batch_indexing_not_workers() -> None:
    facts = make_facts(
        "cpu",
        data_wait_frac=0.19,
        data_wait_ms_p50=1.1,
        step_ms_p50=5.8,
        dataloader_num_workers=0,
        dataloader_dataset_class="TensorDataset",
        dataloader_sampler_class="RandomSampler",
        dataloader_batch_size=256,
        cpu_other_busy_cores=0.1,
    )
    facts = type(facts)(
        values=facts.values,
        locations={
            **facts.locations,
            "dataloader_construct": (SourceLocation("train.py", 10, "<module>"),),
        },
        settings=facts.settings,
    )
    finding = evaluate(facts, rules=(RULES["input-bound"],)).findings[0]
    assert "index-whole-batches" in finding.optimizations
    assert "dataloader-workers" not in finding.optimizations
    assert "BatchSampler" in finding.explanation
    entry = CATALOG["index-whole-batches"]
    assert entry.tailor is not None
    snippet = entry.tailor(facts, entry.code_change)
    assert snippet.startswith("# at train.py:10, where the DataLoader is built")
    assert "BatchSampler(RandomSampler(ds), batch_size=256" in snippet


def test_the_batch_indexing_snippet_gives_the_same_batches_as_rows() -> None:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    ds = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    rows = list(DataLoader(ds, batch_size=4))
    batches = BatchSampler(SequentialSampler(ds), batch_size=4, drop_last=False)
    whole = list(DataLoader(ds, sampler=batches, batch_size=None))
    assert len(rows) == len(whole) == 3
    for (xa, ya), (xb, yb) in zip(rows, whole, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_periodic_loop_work_on_a_loaded_machine_is_kept() -> None:
    finding = _one(
        "loop-work-outside-steps",
        loop_long_step_frac=0.14,
        loop_long_step_frac_fast_pace=None,
        loop_long_step_periodic_under_load=True,
        loop_load_stretch=7.3,
        loop_period_steps=10,
        loop_long_steps=3,
        loop_long_step_cost="other",
        loop_long_step_code="simulate() at rollout.py:18-20 (49% of the sampled CPU time)",
        cpu_other_busy_cores=1.7,
    )
    assert finding is not None
    assert finding.title.startswith("Long steps every 10 steps hold 14% of the loop")
    assert "in simulate() at rollout.py:18-20" in finding.title
    assert "7x its CPU time" in finding.explanation
    assert _one("loop-work-outside-steps", loop_long_step_frac=0.14) is None


def test_a_rollout_in_the_timed_steps_is_named_by_its_code() -> None:
    finding = _one(
        "step-jitter",
        **_JITTERY,
        jitter_excess_other_frac=0.9,
        jitter_excess_data_frac=0.02,
        loop_long_step_code="simulate() at rollout.py:18-20 (62% of the sampled CPU time)",
    )
    assert finding is not None
    assert "90% of the slow steps' extra time is the script's own code" in finding.explanation
    assert "simulate() at rollout.py:18-20" in finding.explanation
    assert finding.optimizations == ()

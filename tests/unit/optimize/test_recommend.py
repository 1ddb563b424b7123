"""Findings -> ranked recommendations, conflicts, device filtering, auto candidates."""

from __future__ import annotations

from perfdoctor.model import Facts, Finding, GainEstimate, SourceLocation
from perfdoctor.optimize.recommend import auto_candidates, recommend

CPU = Facts({"device_is_cuda": False, "cpu_cores_logical": 2})
H100 = Facts({"device_is_cuda": True, "gpu_compute_capability": "9.0", "host_syncs_per_step": 0})
V100 = Facts({"device_is_cuda": True, "gpu_compute_capability": "7.0"})


def finding(rule_id, *opts, gain=None, severity="warning", memory=None, locations=()):
    return Finding(
        rule_id=rule_id,
        severity=severity,
        title=rule_id,
        explanation="",
        evidence=(),
        optimizations=opts,
        gain=GainEstimate(step_time_frac=gain, memory_bytes=memory, method=f"{rule_id} est."),
        locations=locations,
    )


def ids(recs):
    return [r.optimization_id for r in recs]


def test_one_recommendation_per_id_ranked_by_expected_gain():
    where = SourceLocation("train.py", 40, "main")
    findings = [
        finding("dataloader-bound", "dataloader-workers", "faster-data-pipeline", gain=0.6,
                locations=(where,)),
        finding("debug-anomaly", "anomaly-off", gain=0.3),
        finding("single-tensor-optimizer", "fused-optimizer", gain=0.05),
        finding("input-heavy-collate", "faster-data-pipeline", gain=0.7),
    ]  # fmt: skip
    recs = recommend(findings, CPU)
    assert ids(recs) == ["faster-data-pipeline", "dataloader-workers", "anomaly-off",
                         "fused-optimizer"]  # fmt: skip
    pipeline = recs[0]
    assert pipeline.addresses == ("dataloader-bound", "input-heavy-collate")
    assert pipeline.expected_gain.step_time_frac == 0.7
    assert pipeline.kind == "manual" and pipeline.code_change
    assert recs[1].locations == (where,)


def test_severity_then_catalog_order_break_ties():
    findings = [
        finding("a", "zero-grad-set-to-none", severity="info"),
        finding("b", "fused-optimizer", severity="critical"),
        finding("c", "cpu-threads", severity="info"),
    ]
    assert ids(recommend(findings, CPU)) == ["fused-optimizer", "zero-grad-set-to-none",
                                             "cpu-threads"]  # fmt: skip


def test_cuda_only_fixes_are_dropped_on_a_cpu_run_and_cpu_only_on_gpu():
    findings = [finding("x", "amp-bf16", "pin-memory", "cpu-threads", "compile", gain=0.2)]
    assert ids(recommend(findings, CPU)) == ["compile", "cpu-threads"]
    assert ids(recommend(findings, H100)) == ["amp-bf16", "compile", "pin-memory"]


def test_mixed_precision_prefers_bf16_on_ampere_and_fp16_before():
    findings = [finding("fp32-matmul", "amp-fp16", "amp-bf16", "tf32", gain=0.4)]
    assert ids(recommend(findings, H100)) == ["amp-bf16", "tf32"]
    assert ids(recommend(findings, V100)) == ["amp-fp16"]  # no bf16, no TF32 before 8.0
    fp16 = next(r for r in recommend(findings, V100) if r.optimization_id == "amp-fp16")
    assert "exclusive with amp-bf16" in fp16.conflicts


def test_conflicts_are_named():
    facts = Facts({"device_is_cuda": True, "gpu_compute_capability": "9.0",
                   "host_syncs_per_step": 3, "anomaly_detection_enabled": True})  # fmt: skip
    findings = [
        finding("launch-bound", "compile-cudagraphs", "compile", gain=0.3),
        finding("anomaly", "anomaly-off", gain=0.2),
        finding("memory-peak", "activation-checkpointing", memory=2 << 30),
    ]
    recs = {r.optimization_id: r for r in recommend(findings, facts)}
    assert any("host syncs" in c for c in recs["compile-cudagraphs"].conflicts)
    assert any("exclusive with compile" in c for c in recs["compile-cudagraphs"].conflicts)
    assert any("anomaly detection" in c for c in recs["compile"].conflicts)
    assert any("trades time for memory" in c for c in recs["activation-checkpointing"].conflicts)


def test_workers_and_threads_name_which_change_is_whose():
    findings = [finding("input-bound", "dataloader-workers", gain=0.3)]
    findings.append(finding("cpu-threads-below-cores", "cpu-threads", gain=0.1))
    recs = {r.optimization_id: r for r in recommend(findings, CPU)}
    assert recs["dataloader-workers"].conflicts == (
        "workers take cores from the intra-op compute threads: this variant changes "
        "num_workers alone (threads stay the script's; cpu-threads changes them, measured "
        "apart)",
    )
    assert recs["cpu-threads"].conflicts == (
        "compute threads compete with DataLoader workers for CPU cores",
    )
    # On a GPU run, alone, the workers' cores are the GPU-idle main process's to spare.
    assert recommend(findings[:1], H100)[0].conflicts == ()


def test_unknown_ids_are_ignored():
    assert ids(recommend([finding("x", "warp-drive", "compile")], CPU)) == ["compile"]


def test_auto_candidates_are_runtime_and_env_in_rank_order():
    findings = [
        finding("a", "dataloader-workers", "faster-data-pipeline", gain=0.5),
        finding("b", "anomaly-off", gain=0.3),
        finding("c", "cpu-threads", gain=0.1),
    ]
    recs = recommend(findings, CPU)
    assert auto_candidates(recs, CPU) == ["dataloader-workers", "anomaly-off", "cpu-threads"]
    assert auto_candidates(recs, CPU, skip=["anomaly-off"]) == ["dataloader-workers",
                                                                 "cpu-threads"]  # fmt: skip


def test_only_restricts_and_can_force_an_unrecommended_id():
    recs = recommend([finding("a", "dataloader-workers", gain=0.5)], CPU)
    assert auto_candidates(recs, CPU, only=["compile", "dataloader-workers"]) == [
        "dataloader-workers",
        "compile",
    ]
    assert auto_candidates(recs, CPU, only=["pin-memory", "larger-batch"]) == []  # cuda/manual


def test_workers_are_not_tried_when_the_script_chose_a_count():
    # The applier never raises the script's num_workers: the run could only be refused.
    facts = Facts({"device_is_cuda": False, "cpu_cores_logical": 4, "dataloader_num_workers": 2})
    recs = recommend([finding("input", "dataloader-workers", gain=0.5)], facts)
    assert ids(recs) == ["dataloader-workers"]  # still recommended, as a change by hand
    assert auto_candidates(recs, facts) == []
    # A count that leaves the training process no core is lowered (sizing.fewer_workers).
    beyond = Facts({"device_is_cuda": False, "cpu_cores_logical": 2, "dataloader_num_workers": 2})
    recs = recommend([finding("input", "dataloader-workers", gain=0.5)], beyond)
    assert auto_candidates(recs, beyond) == ["dataloader-workers"]
    unset = Facts({"device_is_cuda": False, "cpu_cores_logical": 2, "dataloader_num_workers": 0})
    assert auto_candidates(recommend([finding("i", "dataloader-workers", gain=0.5)], unset), unset)


def test_cudagraphs_not_tried_with_host_syncs_unless_asked():
    facts = Facts({"device_is_cuda": True, "gpu_compute_capability": "9.0",
                   "host_syncs_per_step": 2})  # fmt: skip
    recs = recommend([finding("launch", "compile-cudagraphs", "compile", gain=0.3)], facts)
    assert auto_candidates(recs, facts) == ["compile"]
    assert auto_candidates(recs, facts, only=["compile-cudagraphs"]) == ["compile-cudagraphs"]


def test_expandable_segments_is_an_auto_candidate_on_cuda():
    recs = recommend([finding("fragmentation", "expandable-segments", memory=1 << 30)], H100)
    assert auto_candidates(recs, H100) == ["expandable-segments"]


def test_cpu_threads_is_not_tried_when_it_would_change_nothing():
    recs = recommend([finding("cpu-oversubscribed", "cpu-threads")], CPU)
    # 2 usable cores, 2 workers: the applier would set 1 thread; the script runs 2.
    two_workers = Facts(
        {**CPU.values, "torch_num_threads": 2, "dataloader_num_workers": 2},
        settings={"cpu": {"affinity_cores": 2, "logical_cores": 2}},
    )
    assert auto_candidates(recs, two_workers) == ["cpu-threads"]
    # No workers: the applier would hold 2 threads, which the script already runs.
    no_workers = Facts(
        {**CPU.values, "torch_num_threads": 2, "dataloader_num_workers": 0},
        settings={"cpu": {"affinity_cores": 2, "logical_cores": 2}},
    )
    assert auto_candidates(recs, no_workers) == []
    # Affinity narrower than the machine: 1 usable core, the script runs 2 threads.
    pinned = Facts(
        {**CPU.values, "torch_num_threads": 2, "cpu_cores_logical": 4},
        settings={"cpu": {"affinity_cores": 1, "logical_cores": 4}},
    )
    assert auto_candidates(recs, pinned) == ["cpu-threads"]


def test_fused_optimizer_snippet_names_the_scripts_own_optimizer():
    findings = [finding("single-tensor-optimizer", "fused-optimizer", gain=0.2)]
    (sgd,) = recommend(findings, Facts({**CPU.values, "optimizer_class": "SGD"}))
    assert sgd.code_change == "torch.optim.SGD(model.parameters(), lr=..., fused=True)"
    # A class without a fused implementation, or none known: the catalog's generic snippet.
    (other,) = recommend(findings, Facts({**CPU.values, "optimizer_class": "LBFGS"}))
    (unknown,) = recommend(findings, CPU)
    assert other.code_change == unknown.code_change and "fused=True" in unknown.code_change


def test_fused_optimizer_is_not_tried_on_an_optimizer_without_fused_kernels():
    """pytorch/examples' mnist uses Adadelta: the fused-optimizer applier was refused, yet
    its A/B rounds ran and the report showed a 0.54x 'speedup' of the unchanged script."""
    findings = [finding("single-tensor-optimizer", "fused-optimizer", gain=0.2)]
    adadelta = Facts({**CPU.values, "optimizer_class": "Adadelta"})
    (rec,) = recommend(findings, adadelta)
    assert rec.code_change.startswith("torch.optim.Adadelta(model.parameters(), lr=..., foreach")
    assert "fused=True)" not in rec.code_change
    assert auto_candidates([rec], adadelta) == []
    adam = Facts({**CPU.values, "optimizer_class": "Adam"})
    assert auto_candidates(recommend(findings, adam), adam) == ["fused-optimizer"]
    assert auto_candidates(recommend(findings, CPU), CPU) == ["fused-optimizer"]  # unknown


def test_a_runtime_fix_this_script_keeps_from_being_tried_says_why_in_the_report():
    # Issue 32: Adadelta has no fused kernel, so the fused-optimizer applier cannot switch
    # it; the recommendation was listed as a runtime fix and the reason was only in the log.
    facts = Facts({"device_is_cuda": False, "cpu_cores_logical": 2, "optimizer_class": "Adadelta"})
    (rec,) = recommend([finding("single-tensor-optimizer", "fused-optimizer", gain=0.1)], facts)
    assert rec.kind == "manual"
    assert "foreach=True" in rec.code_change
    assert any(
        "not tried at runtime" in c and "Adadelta has no fused implementation" in c
        for c in rec.conflicts
    )
    assert "fused-optimizer" not in auto_candidates([rec], facts)
    adam = Facts({"device_is_cuda": False, "cpu_cores_logical": 2, "optimizer_class": "Adam"})
    (tried,) = recommend([finding("single-tensor-optimizer", "fused-optimizer", gain=0.1)], adam)
    assert tried.kind == "runtime" and not any("not tried" in c for c in tried.conflicts)

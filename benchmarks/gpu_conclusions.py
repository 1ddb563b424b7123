"""GPU CONCLUSIONS (issue 32): the conclusion perfdoctor reaches on each GPU-trace shape of
the issue, one line per case, with whichever perfdoctor is importable first.

    python benchmarks/gpu_conclusions.py
    # before/after: the same cases with an older checkout's package first on the path
    PYTHONPATH=<old checkout> python benchmarks/gpu_conclusions.py

The cases are the tests' own hand-made traces (tests/unit/analyze: gemm_trace, comm_traces,
synthetic_trace, the three-device snapshot) and the DLRM ranks of the shared GPU corpus
(`$PERFDOCTOR_GPU_CORPUS`, else `<repo>/../shared/gpu-corpus`; skipped when absent). Values,
not timings: it never asserts.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit" / "analyze"))
sys.path.append(str(REPO))  # after an older checkout given on PYTHONPATH

from comm_traces import H100, collective_trace, sized  # noqa: E402
from gemm_trace import MM, gemm_trace  # noqa: E402
from synthetic_trace import input_bound_trace, write_trace  # noqa: E402

import perfdoctor  # noqa: E402
from perfdoctor.diagnose_traces import diagnose_traces  # noqa: E402
from perfdoctor.render import summary  # noqa: E402

TMP = Path(tempfile.mkdtemp())
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}
MI300X = {"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}
FPROP = "volta_scudnn_128x64_relu_interior_nn_v1"
DGRAD = "volta_scudnn_128x128_stridedB_splitK_small_nn_v1"
MIB = 1 << 20


def corpus() -> Path | None:
    env = os.environ.get("PERFDOCTOR_GPU_CORPUS")
    root = (Path(env) if env else REPO.parent / "shared" / "gpu-corpus") / "traces"
    return root if root.is_dir() else None


def diag(paths: list[Path], name: str) -> list[Any]:
    return diagnose_traces(paths, TMP / name)


def one(trace: dict[str, Any], name: str) -> Any:
    (done,) = diag([write_trace(TMP / f"{name}.pt.trace.json", trace)], name)
    return done.report


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def old_categories(trace: dict[str, Any]) -> dict[str, Any]:
    rename = {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime"}
    for e in trace["traceEvents"]:
        e["cat"] = rename.get(e["cat"], e["cat"])
    return trace


def deepep() -> None:
    names = [
        "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*, int)",
        "void dpsk::ep::internode::dispatch<false, 8, 128>(int4*, float*, int*)",
        "void dpsk::ep::internode::cached_notify(int, int, void**)",
        "void dpsk::ep::internode::combine<nv_bfloat16, 8>(int4*, float*)",
    ]
    trace = collective_trace(
        [{"name": n, "dur": 460.0} for n in names], device=H100, compute_us=530.0
    )
    r = one(trace, "moe")
    head = summary.headline(r)
    print(f"1 DeepEP under dpsk::ep::: comm_kernel_frac {pct(r.facts.get('comm_kernel_frac'))}")
    print(f"  headline: {head.slow[:100]}")
    print(f"  fix: {head.fix[:100]}")


def mfu_without_kernels() -> None:
    mm = ("aten::mm", [[4096, 4096], [4096, 4096]], ["float"] * 2, MM, 100.0)
    trace = gemm_trace([mm] * 4, device=A100)
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e["cat"] not in ("kernel", "cuda_runtime")
    ]
    r = one(trace, "infer")
    ops = (r.compute or {}).get("trace", {}).get("ops", [])
    print(
        f"2 A100 trace without kernels: MFU {pct(r.facts.get('mfu_frac'))}, achieved "
        f"{r.facts.get('achieved_tflops')}, aten::mm TFLOP/s {[o.get('tflops') for o in ops]}"
    )
    print(f"  no MFU because: {(r.facts.get('mfu_missing') or '-')[:100]}")


def conv_2021() -> None:
    x, w, grad = [32, 3, 224, 224], [64, 3, 7, 7], [32, 64, 112, 112]
    ops = [
        ("aten::cudnn_convolution", [x, w, [], [], [], [], [], []], ["float"] * 2, FPROP, 1500.0),
        ("aten::cudnn_convolution_backward", [x, grad, w, [], [], []], ["float"] * 3, DGRAD,
         3000.0),
    ]  # fmt: skip
    r = one(old_categories(gemm_trace(ops, device=V100, step_us=20_000.0)), "resnet")
    trace = (r.compute or {}).get("trace", {})
    stem = 2.0 * 32 * 112 * 112 * 64 * 3 * 49
    rates = [(o["op"], round(o["tflops"], 1) if o.get("tflops") else None) for o in trace["ops"]]
    print(
        f"3 V100 2021-era ResNet stem, forward + backward: {trace.get('flops', 0) / 1e9:.1f} "
        f"GFLOP counted (right: {3 * stem / 1e9:.1f}); per-op TFLOP/s {rates}"
    )
    big = [("aten::cudnn_convolution", [[256, 3, 224, 224], w], ["float"] * 2, FPROP, 400.0)]
    r = one(old_categories(gemm_trace(big, device=V100, step_us=20_000.0)), "big")
    trace = (r.compute or {}).get("trace", {})
    said = (trace.get("over_peak") or ["nothing"])[0]
    print(
        f"  a conv counted past the 15.7 TFLOP/s roof: printed TFLOP/s "
        f"{[o.get('tflops') for o in trace['ops']]}; said: {said[:90]}"
    )


def one_story() -> None:
    kernels = []
    for mib in (2, 5, 10, 25, 50, 100, 200):
        nbytes = mib * MIB
        kernels.append(
            {"name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
             "dur": nbytes * 1.75 / 20e9 * 1e6, "host": "nccl:all_reduce",
             "args": sized("allreduce", nbytes // 2, group=8, dtype="BFloat16")}
        )  # fmt: skip
    r = one(collective_trace(kernels, device=MI300X, compute_us=2000.0), "ddp")
    comm = next((f for f in r.findings if f.rule_id == "communication-heavy"), None)
    print(
        f"4 MI300X DDP, bf16 all-reduces following size: findings "
        f"{[f.rule_id for f in r.findings]}, verdict {r.facts.get('comm_wait_verdict')}, "
        f"compression advised {bool(comm and 'compression' in comm.explanation)}"
    )
    print(f"  title: {comm.title if comm else '-'}")
    fc = ("aten::addmm", [[1000], [100, 2048], [2048, 1000]], ["c10::BFloat16"] * 3,
          "Cijk_Alik_Bljk_BBS_BH_MT128x128x32", 200.0)  # fmt: skip
    r = one(gemm_trace([fc], device=MI300X), "resnet_fc")
    f = next((f for f in r.findings if f.rule_id == "misaligned-lowp-gemm"), None)
    print(
        f"  ResNet (no embedding), misaligned bf16 GEMM: vocabulary advised "
        f"{bool(f and 'vocabulary' in f.explanation)}"
    )


def fp32_tensor_cores() -> None:
    conv = ("aten::cudnn_convolution", [[32, 64, 56, 56], [64, 64, 3, 3]], ["float"] * 2, FPROP,
            300.0)  # fmt: skip
    relu = ("aten::relu_", [[32, 64, 56, 56]], ["float"], "elementwise_kernel", 150.0)
    r = one(gemm_trace([conv, relu] * 6, device=V100, step_us=5000.0), "fp32")
    f = next((f for f in r.findings if f.rule_id == "fp32-on-tensor-cores"), None)
    print(
        f"5 V100 fp32 convolutions: busy {pct(r.facts.get('gpu_busy_frac'))}, fp32 share "
        f"{pct(r.facts.get('fp32_matmul_conv_frac'))}: mixed-precision finding {bool(f)}, "
        f"gain {pct(f.gain.step_time_frac) if f else None}"
    )


def oom_snapshot() -> None:
    from tests.unit.analyze.test_multi_device_oom import three_devices

    path = TMP / "oom.pickle"
    path.write_bytes(pickle.dumps(three_devices(), protocol=4))
    (done,) = diag([path], "oom")
    f = next((f for f in done.report.findings if "alloc" in f.rule_id), None)
    text = f.explanation if f else ""
    print(f"6 three-device OOM snapshot: {f.title if f else '-'}")
    print(
        f"  'stalls the step' {'stalls the step' in text}, devices 0 and 2 named "
        f"{'device 0' in text and 'device 2' in text}"
    )


def dlrm() -> None:
    root = corpus()
    if root is None:
        print("7 DLRM: the shared GPU corpus is absent, skipped")
        return
    folder = TMP / "dlrm"
    folder.mkdir()
    for path in sorted(root.glob("param_dlrm_worker*.pt.trace.json.gz")):
        shutil.copy(path, folder / path.name)
    (done,) = diag([folder], "dlrm")
    r = done.report
    b = r.baseline
    data = b.breakdown_ms["data"] / (b.breakdown_ms["data"] + b.breakdown_ms["other"])
    print(
        f"7 DLRM 8 ranks: step p50 {b.step_ms_p50:.1f} ms (diagnosed rank's own "
        f"{r.ranks[0].step_ms_p50:.1f}); data wait {pct(r.facts.get('data_wait_frac'))}, "
        f"breakdown {pct(data)}, GPU idle in the DataLoader "
        f"{pct(r.facts.get('gpu_idle_host_data_frac'))}"
    )
    (cpu,) = root.glob("hta_cpu_only_rank-34*.json.gz")
    shutil.copy(cpu, folder / cpu.name)
    done = diag([folder], "dlrm_stray")
    r = done[0].report
    print(
        f"  with the stray CPU trace: {len(done)} report(s), {len(r.ranks)} ranks in the job, "
        f"spread {pct(r.facts.get('rank_step_ms_p50_spread_frac'))}, warned "
        f"{any('rank-34' in w for w in r.warnings)}"
    )
    lone = TMP / "lone"
    lone.mkdir()
    write_trace(lone / "llama_rank0.json", input_bound_trace(rank=0))
    (done,) = diag([lone], "lone")
    print(f"  a lone rank-0 file is titled {done.report.script}")


def main() -> None:
    print("perfdoctor from", Path(perfdoctor.__file__).parent)
    for case in (deepep, mfu_without_kernels, conv_2021, one_story, fp32_tensor_cores,
                 oom_snapshot, dlrm):  # fmt: skip
        case()


if __name__ == "__main__":
    main()

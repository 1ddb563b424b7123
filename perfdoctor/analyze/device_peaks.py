"""Dense peak FLOP/s per precision of datacenter GPUs, and an estimate for a CPU.

Dense, never sparse: NVIDIA's datasheets for Ampere and later print the tensor-core figures
"with sparsity" (2:4 structured, twice the dense rate) and mark them with an asterisk;
training and inference on dense weights cannot reach them, so the figures here are the
sparse ones halved where the sheet gives only those. MFU against a sparse peak is half what
it should be. AMD's sheets give dense figures beside the sparse ones.

Keys: fp64, fp32 (vector/SIMT), fp32_matrix (AMD MFMA fp32), tf32, bf16, fp16, fp8, int8,
fp4, mx (block-scaled MXFP4/NVFP4). A precision a part lacks is absent: MFU for it is not
computed rather than measured against the wrong figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DevicePeak:
    name: str  # the part as the report names it ("H100 SXM")
    tflops: dict[str, float]  # precision -> dense peak TFLOP/s
    source: str
    estimate: bool = False  # a CPU figure computed from its core count and vector width

    def peak(self, precision: str, matrix_cores: bool | None = None) -> float | None:
        """TFLOP/s for `precision`: an fp32 op on AMD matrix cores uses the MFMA fp32 rate,
        one on SIMT lanes the vector rate; MX falls back to fp4 where only that is listed."""
        if precision == "fp32" and matrix_cores and "fp32_matrix" in self.tflops:
            return self.tflops["fp32_matrix"]
        if precision == "mx" and "mx" not in self.tflops:
            return self.tflops.get("fp4")
        return self.tflops.get(precision)


def _nv(
    fp32: float, tf32: float | None, bf16: float | None, fp16: float, **more: float
) -> dict[str, float]:
    out = {"fp32": fp32, "fp16": fp16, **more}
    if tf32 is not None:
        out["tf32"] = tf32
    if bf16 is not None:
        out["bf16"] = bf16
    return out


_H100_SXM = _nv(67.0, 494.5, 989.5, 989.5, fp8=1978.5, int8=1978.5, fp64=34.0)
_H100_NVL = _nv(60.0, 417.5, 835.5, 835.5, fp8=1670.5, int8=1670.5, fp64=30.0)
_HALVED = "tensor-core figures are the sheet's sparse ones halved"

# (pattern over the lower-cased device name, peak). First match wins: the more specific
# names (A100 before A10, L40S before L4, H100 PCIe/NVL before H100) come first.
_TABLE: tuple[tuple[re.Pattern[str], DevicePeak], ...] = (
    (
        re.compile(r"v100.*pcie"),
        DevicePeak(
            "V100 PCIe",
            _nv(14.0, None, None, 112.0, fp64=7.0),
            "NVIDIA Tesla V100 datasheet (PCIe: 7 FP64, 14 FP32, 112 tensor TFLOPS)",
        ),
    ),
    (
        re.compile(r"v100"),
        DevicePeak(
            "V100 SXM2",
            _nv(15.7, None, None, 125.0, fp64=7.8),
            "NVIDIA Tesla V100 datasheet (SXM2: 7.8 FP64, 15.7 FP32, 125 tensor TFLOPS)",
        ),
    ),
    (
        re.compile(r"a100"),
        DevicePeak(
            "A100",
            _nv(19.5, 156.0, 312.0, 312.0, int8=624.0, fp64=9.7),
            "NVIDIA A100 Tensor Core GPU datasheet (dense column; SXM and PCIe alike)",
        ),
    ),
    (
        re.compile(r"h100.*pcie"),
        DevicePeak(
            "H100 PCIe",
            _nv(51.0, 378.0, 756.0, 756.0, fp8=1513.0, int8=1513.0, fp64=26.0),
            f"NVIDIA H100 Tensor Core GPU datasheet, PCIe column; {_HALVED}",
        ),
    ),
    (
        re.compile(r"h100.*nvl"),
        DevicePeak("H100 NVL", _H100_NVL, f"NVIDIA H100 datasheet, NVL column; {_HALVED}"),
    ),
    (
        re.compile(r"h100"),
        DevicePeak("H100 SXM", _H100_SXM, f"NVIDIA H100 datasheet, SXM column; {_HALVED}"),
    ),
    (
        re.compile(r"h200.*nvl"),
        DevicePeak("H200 NVL", _H100_NVL, f"NVIDIA H200 datasheet, NVL column; {_HALVED}"),
    ),
    (
        re.compile(r"h200"),
        DevicePeak("H200 SXM", _H100_SXM, f"NVIDIA H200 datasheet, SXM column; {_HALVED}"),
    ),
    (
        re.compile(r"h800"),
        DevicePeak(
            "H800 SXM",
            {k: v for k, v in _H100_SXM.items() if k != "fp64"},
            f"NVIDIA H800 product brief: H100 SXM tensor and FP32 rates; {_HALVED}",
        ),
    ),
    (
        re.compile(r"b200"),
        DevicePeak(
            "B200",
            _nv(75.0, 1125.0, 2250.0, 2250.0, fp8=4500.0, int8=4500.0, fp4=9000.0, fp64=37.0),
            f"NVIDIA HGX B200 datasheet, 8-GPU figures divided by 8; {_HALVED}",
        ),
    ),
    (
        re.compile(r"l40s"),
        DevicePeak(
            "L40S",
            _nv(91.6, 183.0, 362.05, 362.05, fp8=733.0, int8=733.0),
            f"NVIDIA L40S datasheet; {_HALVED}",
        ),
    ),
    (
        re.compile(r"\bl4\b"),
        DevicePeak(
            "L4",
            _nv(30.3, 60.0, 121.0, 121.0, fp8=242.5, int8=242.5),
            f"NVIDIA L4 Tensor Core GPU datasheet; {_HALVED}",
        ),
    ),
    (
        re.compile(r"\ba10\b"),
        DevicePeak(
            "A10",
            _nv(31.2, 62.5, 125.0, 125.0, int8=250.0),
            f"NVIDIA A10 Tensor Core GPU datasheet; {_HALVED}",
        ),
    ),
    (
        re.compile(r"\bt4\b"),
        DevicePeak(
            "T4",
            _nv(8.1, None, None, 65.0, int8=130.0),
            "NVIDIA T4 datasheet (8.1 FP32, 65 FP16 mixed precision, 130 INT8 TOPS)",
        ),
    ),
    (
        re.compile(r"rtx 4090"),
        DevicePeak(
            "RTX 4090",
            _nv(82.6, 82.6, 165.2, 165.2, fp8=330.3, int8=660.6),
            "NVIDIA Ada Lovelace architecture whitepaper, appendix A (FP32 accumulate, "
            f"which PyTorch uses); {_HALVED}",
        ),
    ),
    (
        re.compile(r"mi355"),
        DevicePeak(
            "MI355X",
            {
                "fp64": 78.6,
                "fp32": 157.3,
                "fp32_matrix": 157.3,
                "bf16": 2516.6,
                "fp16": 2516.6,
                "fp8": 5033.2,
                "int8": 5033.2,
                "fp4": 10066.3,
                "mx": 10066.3,
            },
            "AMD Instinct MI355X datasheet (dense figures; no TF32)",
        ),
    ),
    (
        re.compile(r"mi325"),
        DevicePeak(
            "MI325X",
            {
                "fp64": 81.7,
                "fp32": 163.4,
                "fp32_matrix": 163.4,
                "tf32": 653.7,
                "bf16": 1307.4,
                "fp16": 1307.4,
                "fp8": 2614.9,
                "int8": 2614.9,
            },
            "AMD Instinct MI325X datasheet (dense figures)",
        ),
    ),
    (
        re.compile(r"mi300x"),
        DevicePeak(
            "MI300X",
            {
                "fp64": 81.7,
                "fp32": 163.4,
                "fp32_matrix": 163.4,
                "tf32": 653.7,
                "bf16": 1307.4,
                "fp16": 1307.4,
                "fp8": 2614.9,
                "int8": 2614.9,
            },
            "AMD Instinct MI300X datasheet (dense figures)",
        ),
    ),
    (
        re.compile(r"mi250x"),
        DevicePeak(
            "MI250X (one GCD)",
            {
                "fp64": 23.95,
                "fp32": 23.95,
                "fp32_matrix": 47.85,
                "bf16": 191.5,
                "fp16": 191.5,
                "int8": 191.5,
            },
            "AMD Instinct MI250X datasheet halved: PyTorch sees each of its two GCDs as a device",
        ),
    ),
)
# An MI250/MI250X/MI210 often calls itself "AMD Radeon Graphics": gfx90a (HIP 9.0) with its
# compute-unit count tells them apart. 110 CUs: one MI250X GCD; 104 CUs: one MI250 GCD or an
# MI210, whose peaks are the same (MI210 datasheet: 181 FP16/BF16, 45.3 FP32 matrix).
_MI210 = DevicePeak(
    "MI210 / MI250 (one GCD)",
    {
        "fp64": 22.6,
        "fp32": 22.6,
        "fp32_matrix": 45.3,
        "bf16": 181.0,
        "fp16": 181.0,
        "int8": 181.0,
    },
    "AMD Instinct MI210 datasheet (= one GCD of an MI250, half its datasheet figures)",
)


def find_peak(
    name: str | None, *, gfx: tuple[int, int] | None = None, compute_units: int | None = None
) -> DevicePeak | None:
    """The peak row for a device name as the trace or torch reports it."""
    low = (name or "").lower()
    for pattern, peak in _TABLE:
        if pattern.search(low):
            return peak
    if gfx == (9, 0) and compute_units in (104, 110):
        return _MI210 if compute_units == 104 else _TABLE[-1][1]  # MI250X, last row
    return None


def cpu_peak(info: dict[str, Any]) -> DevicePeak | None:
    """An fp32 peak for a CPU: cores x clock x FMA lanes x 2 FLOPs x 2 FMA units per core.

    An estimate, labelled so: the clock is the base/max frequency the kernel reports (turbo
    and AVX-512 down-clocking move it either way) and two FMA units per core is the server
    parts' count (some client parts have one for AVX-512)."""
    cores = info.get("cores")
    mhz = info.get("mhz")
    flags = set(str(info.get("flags") or "").split())
    if not isinstance(cores, int) or not isinstance(mhz, (int, float)) or cores <= 0 or mhz <= 0:
        return None
    lanes, isa = 4, "SSE"
    if "avx512f" in flags:
        lanes, isa = 16, "AVX-512"
    elif "avx2" in flags and "fma" in flags:
        lanes, isa = 8, "AVX2+FMA"
    elif "asimd" in flags:
        lanes, isa = 4, "NEON"
    fp32 = cores * mhz / 1e6 * lanes * 2 * 2
    return DevicePeak(
        name=f"CPU, {cores} cores",
        tflops={"fp32": fp32, "fp64": fp32 / 2},
        source=(
            f"estimate: {cores} cores x {mhz / 1000:.2f} GHz x {lanes} fp32 lanes ({isa}) x 2 "
            "FLOPs per FMA x 2 FMA units"
        ),
        estimate=True,
    )


# Peak memory bandwidth, TB/s, from the same datasheets (the roofline's sloped roof). Keyed by
# DevicePeak.name; an A100 depends on its memory (40 GB: 1.555, 80 GB SXM: 2.039).
_BANDWIDTH_TBPS = {
    "V100 PCIe": 0.9,
    "V100 SXM2": 0.9,
    "H100 PCIe": 2.0,
    "H100 NVL": 3.9,
    "H100 SXM": 3.35,
    "H200 NVL": 4.8,
    "H200 SXM": 4.8,
    "H800 SXM": 3.35,
    "B200": 8.0,
    "L40S": 0.864,
    "L4": 0.3,
    "A10": 0.6,
    "T4": 0.32,
    "RTX 4090": 1.008,
    "MI355X": 8.0,
    "MI325X": 6.0,
    "MI300X": 5.3,
    "MI250X (one GCD)": 1.6,
    "MI210 / MI250 (one GCD)": 1.6,
}


def memory_bandwidth_tbps(peak: DevicePeak, device_name: str | None = None) -> float | None:
    """The device's peak memory bandwidth (None for a CPU or a part not listed)."""
    if peak.name == "A100":
        return 2.039 if "80gb" in (device_name or "").lower() else 1.555
    return _BANDWIDTH_TBPS.get(peak.name)

"""NvmlSampler against a fake pynvml that raises the REAL pynvml exception classes.

The fake implements only the NVML calls the sampler makes; its handles are FakeGpu objects.
Real pynvml exception classes construct and str() without the NVML library (mechanics §5),
so the sampler's error handling is exercised exactly as on a GPU machine.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from load_limits import scaled

from perfdoctor.collect.nvml import NvmlSampler, parse_visible_devices
from perfdoctor.collect.sampling import SamplingThread


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    mig: bool = False
    parent: FakeGpu | None = None
    gpm: bool = False
    # NVML function name -> exception instance it raises (every call)
    errors: dict[str, Exception] = field(default_factory=dict)
    # NVML function name -> exception raised on the first call only
    errors_once: dict[str, Exception] = field(default_factory=dict)
    energy_mj: int = 1_000_000


class FakeMetricsGet:
    """Stands in for pynvml.c_nvmlGpmMetricsGet_t (a ctypes struct with a metrics array)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]


GPM_PERCENT = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 80.0,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 20.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 30.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 50.0,
}


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    NVML_GPM_METRIC_SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_SM_OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    NVML_GPM_METRIC_DRAM_BW_UTIL = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: Exception | None = None,
        migs: tuple[FakeGpu, ...] = (),
    ) -> None:
        self.gpus = gpus
        self.migs = list(migs)
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.shutdown = False
        self.freed = 0

    def _call(self, name: str, gpu: FakeGpu) -> None:
        self.calls[name] += 1
        if name in gpu.errors:
            raise gpu.errors[name]
        if name in gpu.errors_once:
            raise gpu.errors_once.pop(name)

    # -- library
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    # -- discovery
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self.calls["nvmlDeviceGetHandleByIndex"] += 1
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        self.calls["nvmlDeviceGetHandleByUUID"] += 1
        for gpu in [*self.gpus, *self.migs]:
            if gpu.uuid == uuid:
                return gpu
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceIsMigDeviceHandle(self, gpu: FakeGpu) -> int:
        return int(gpu.mig)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, gpu: FakeGpu) -> FakeGpu:
        assert gpu.parent is not None
        return gpu.parent

    def nvmlDeviceGetGpuInstanceId(self, gpu: FakeGpu) -> int:
        return 3

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        return 1980 if clock == pynvml.NVML_CLOCK_SM else 2619

    # -- per-tick fields
    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        self._call("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        self._call("nvmlDeviceGetMemoryInfo", gpu)
        return SimpleNamespace(used=30 * 2**30, total=80 * 2**30, free=50 * 2**30)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._call("nvmlDeviceGetClockInfo", gpu)
        return 1755 if clock == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetPowerUsage", gpu)
        return 412_300

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature", gpu)
        return 61

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption", gpu)
        gpu.energy_mj += 41_230
        return gpu.energy_mj

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        return 0x4  # SwPowerCap

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        return 0x20  # SwThermal

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        self._call("nvmlDeviceGetPcieThroughput", gpu)
        return 1200 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 3400

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(isSupportedDevice=int(gpu.gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(taken_from=None)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed += 1

    def nvmlGpmSampleGet(self, gpu: FakeGpu, sample: Any) -> Any:
        self._call("nvmlGpmSampleGet", gpu)
        sample.taken_from = gpu.uuid
        return sample

    def nvmlGpmMigSampleGet(self, gpu: FakeGpu, instance: int, sample: Any) -> Any:
        self.calls["nvmlGpmMigSampleGet"] += 1
        sample.taken_from = f"{gpu.uuid}/gi{instance}"
        return sample

    def nvmlGpmMetricsGet(self, request: FakeMetricsGet) -> FakeMetricsGet:
        assert request.sample1 is not request.sample2
        assert request.sample1.taken_from is not None and request.sample2.taken_from is not None
        for metric in request.metrics[: request.numMetrics]:
            metric.value = GPM_PERCENT[metric.metricId]
        return request


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gpu_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == "gpu"]


def notes(rows: list[dict[str, Any]]) -> list[str]:
    return [r["message"] for r in rows if r["kind"] == "note"]


def started(fake: FakeNvml, **kwargs: Any) -> tuple[NvmlSampler, list[dict[str, Any]]]:
    sampler = NvmlSampler(fake, **kwargs)  # type: ignore[arg-type]
    return sampler, sampler.start()


# --------------------------------------------------------------------------- normal GPU


def test_normal_gpu_rows_have_power_util_energy_and_the_rest() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa")])
    clock = FakeClock()
    sampler, start_rows = started(fake, clock=clock)
    info = [r for r in start_rows if r["kind"] == "gpu_info"]
    assert info == [
        {
            "kind": "gpu_info",
            "index": 0,
            "nvml_index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-aaaa",
            "power_limit_w": 700.0,
            "sm_clock_max_mhz": 1980,
            "mem_clock_max_mhz": 2619,
            "mig": False,
            "gpm": False,
        }
    ]
    first = sampler.sample()
    clock.now += 0.1
    second = sampler.sample()
    assert notes(first) == [] and notes(second) == []
    row = gpu_rows(first)[0]
    assert row["index"] == 0
    assert row["power_w"] == pytest.approx(412.3)
    assert (row["util_gpu"], row["util_mem"]) == (97, 40)
    assert (row["mem_used_bytes"], row["mem_total_bytes"]) == (30 * 2**30, 80 * 2**30)
    assert (row["sm_clock_mhz"], row["mem_clock_mhz"]) == (1755, 2619)
    assert row["temp_c"] == 61
    assert row["throttle_reasons"] == 0x4  # the new "clocks event" call, not the deprecated one
    assert (row["pcie_tx_kbs"], row["pcie_rx_kbs"]) == (1200, 3400)
    assert gpu_rows(second)[0]["energy_mj"] - row["energy_mj"] == 41_230
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0
    sampler.stop()
    assert fake.shutdown


def test_pcie_is_read_at_most_once_per_period() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa")])
    clock = FakeClock()
    sampler, _ = started(fake, clock=clock, pcie_period_s=1.0)
    with_pcie = []
    for _ in range(25):  # 2.5 s of 100 ms ticks
        with_pcie.append("pcie_tx_kbs" in gpu_rows(sampler.sample())[0])
        clock.now += 0.1
    assert sum(with_pcie) == 3  # t = 0, ~1.0, ~2.0
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 6  # TX and RX each time


def test_pcie_blocks_for_one_gpu_per_tick_only() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa"), FakeGpu("GPU-bbbb")])
    clock = FakeClock()
    sampler, _ = started(fake, clock=clock)
    first = gpu_rows(sampler.sample())
    clock.now += 0.1
    second = gpu_rows(sampler.sample())
    assert ["pcie_tx_kbs" in r for r in first] == [True, False]
    assert ["pcie_tx_kbs" in r for r in second] == [False, True]


# --------------------------------------------------------------------------- unsupported fields


def test_not_supported_field_is_disabled_after_first_failure() -> None:
    gpu = FakeGpu("GPU-aaaa", errors={"nvmlDeviceGetPowerUsage": pynvml.NVMLError_NotSupported()})
    fake = FakeNvml([gpu])
    sampler, _ = started(fake)
    first = sampler.sample()
    later = [sampler.sample() for _ in range(4)]
    assert notes(first) == ["GPU 0: power not sampled (NVMLError_NotSupported)"]
    assert all(notes(rows) == [] for rows in later)
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    for rows in [first, *later]:
        row = gpu_rows(rows)[0]
        assert "power_w" not in row
        assert row["util_gpu"] == 97  # the other fields go on


def test_transient_error_skips_one_tick_without_disabling() -> None:
    gpu = FakeGpu("GPU-aaaa", errors_once={"nvmlDeviceGetTemperature": pynvml.NVMLError_Unknown()})
    fake = FakeNvml([gpu])
    sampler, _ = started(fake)
    first, second = sampler.sample(), sampler.sample()
    assert "temp_c" not in gpu_rows(first)[0]
    assert gpu_rows(second)[0]["temp_c"] == 61
    assert notes(first) == notes(second) == []


def test_throttle_falls_back_to_deprecated_name_on_old_driver() -> None:
    gpu = FakeGpu(
        "GPU-aaaa",
        errors={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVMLError_FunctionNotFound()},
    )
    fake = FakeNvml([gpu])
    sampler, _ = started(fake)
    rows = [gpu_rows(sampler.sample())[0] for _ in range(3)]
    assert [r["throttle_reasons"] for r in rows] == [0x20, 0x20, 0x20]
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1


def test_lost_gpu_is_dropped_with_a_note() -> None:
    gpu = FakeGpu("GPU-aaaa", errors={"nvmlDeviceGetMemoryInfo": pynvml.NVMLError_GpuIsLost()})
    fake = FakeNvml([gpu, FakeGpu("GPU-bbbb")])
    sampler, _ = started(fake)
    first = sampler.sample()
    assert notes(first) == ["GPU 0: lost (NVMLError_GpuIsLost); no longer sampled"]
    assert [r["index"] for r in gpu_rows(first)] == [1]
    assert [r["index"] for r in gpu_rows(sampler.sample())] == [1]


# --------------------------------------------------------------------------- NVML refusing


@pytest.mark.parametrize(
    "error",
    [
        pynvml.NVMLError_LibraryNotFound(),
        pynvml.NVMLError_DriverNotLoaded(),
        pynvml.NVMLError_NoPermission(),
    ],
)
def test_nvml_refusing_gives_one_note_then_nothing(error: Exception) -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa")], init_error=error)
    sampler, rows = started(fake)
    assert rows == [{"kind": "note", "message": f"NVML unavailable: {type(error).__name__}"}]
    assert sampler.sample() == []
    assert sampler.gpu_count == 0
    sampler.stop()
    assert not fake.shutdown  # never initialized, so nothing to shut down


def test_library_not_found_in_the_sampling_thread_writes_one_note(tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa")], init_error=pynvml.NVMLError_LibraryNotFound())
    out = tmp_path / "samples.jsonl"
    thread = SamplingThread(
        [NvmlSampler(fake)],  # type: ignore[arg-type]
        out,
        origin=0.0,
        period_s=0.01,
        clock=iter(x * 0.01 for x in range(10**6)).__next__,
    )
    thread.start()
    deadline = time.monotonic() + scaled(10)
    while thread.ticks < 5 and time.monotonic() < deadline:
        time.sleep(0.001)
    thread.stop()
    assert thread.ticks >= 5
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["note"]
    assert rows[0]["message"] == "NVML unavailable: NVMLError_LibraryNotFound"
    assert isinstance(rows[0]["t"], float)


def test_real_pynvml_degrades_gracefully_without_a_gpu() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine: the live path is covered by tests/gpu")
    sampler = NvmlSampler()  # imports the real pynvml itself
    rows = sampler.start()
    assert len(rows) == 1 and rows[0]["kind"] == "note"
    assert rows[0]["message"].startswith("NVML unavailable: NVMLError_")
    assert sampler.sample() == []
    sampler.stop()


# --------------------------------------------------------------------------- MIG


def test_mig_device_utilization_unsupported_is_said_once_and_memory_goes_on() -> None:
    parent = FakeGpu("GPU-aaaa", gpm=True)
    mig = FakeGpu(
        "MIG-1111",
        mig=True,
        parent=parent,
        errors={
            "nvmlDeviceGetUtilizationRates": pynvml.NVMLError_NotSupported(),
            "nvmlDeviceGetPowerUsage": pynvml.NVMLError_NotSupported(),
        },
    )
    fake = FakeNvml([parent], migs=(mig,))
    sampler, start_rows = started(fake, visible_devices="MIG-1111")
    info = next(r for r in start_rows if r["kind"] == "gpu_info")
    assert info["mig"] is True and info["uuid"] == "MIG-1111"
    first, second, third = sampler.sample(), sampler.sample(), sampler.sample()
    assert notes(first) == [
        "GPU 0 (MIG): utilization not sampled (NVMLError_NotSupported)",
        "GPU 0 (MIG): power not sampled (NVMLError_NotSupported)",
    ]
    assert notes(second) == notes(third) == []
    row = gpu_rows(second)[0]
    assert "util_gpu" not in row and "power_w" not in row
    assert row["mem_used_bytes"] == 30 * 2**30
    # GPM activity of a MIG slice comes from the parent GPU's per-instance samples.
    assert row["gpm_sm_active"] == pytest.approx(0.8)
    assert fake.calls["nvmlGpmMigSampleGet"] == 3
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 1


# --------------------------------------------------------------------------- GPM


def test_gpm_metrics_from_two_consecutive_samples_as_fractions() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa", gpm=True)])
    sampler, start_rows = started(fake)
    assert [r["gpm"] for r in start_rows if r["kind"] == "gpu_info"] == [True]
    first = gpu_rows(sampler.sample())[0]
    second = gpu_rows(sampler.sample())[0]
    assert not any(key.startswith("gpm_") for key in first)  # one sample is not a rate yet
    assert second["gpm_sm_active"] == pytest.approx(0.8)
    assert second["gpm_sm_occupancy"] == pytest.approx(0.2)
    assert second["gpm_tensor_active"] == pytest.approx(0.3)
    assert second["gpm_dram_bw"] == pytest.approx(0.5)
    sampler.stop()
    assert fake.freed == 2


def test_gpm_absent_where_unsupported() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa", gpm=False)])
    sampler, _ = started(fake)
    rows = [gpu_rows(sampler.sample())[0] for _ in range(3)]
    assert not any(key.startswith("gpm_") for row in rows for key in row)
    assert fake.calls["nvmlGpmSampleGet"] == 0


# --------------------------------------------------------------------------- which GPUs


def test_cuda_visible_devices_uuid_selects_that_gpu_only() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa-1111"), FakeGpu("GPU-bbbb-2222", name="second")])
    sampler, start_rows = started(fake, visible_devices="GPU-bbbb-2222")
    info = [r for r in start_rows if r["kind"] == "gpu_info"]
    assert [(r["index"], r["uuid"], r["name"]) for r in info] == [(0, "GPU-bbbb-2222", "second")]
    assert fake.calls["nvmlDeviceGetHandleByUUID"] == 1
    assert [r["index"] for r in gpu_rows(sampler.sample())] == [0]  # cuda:0 in the child


def test_cuda_visible_devices_uuid_prefix_like_cuda() -> None:
    fake = FakeNvml([FakeGpu("GPU-aaaa-1111"), FakeGpu("GPU-bbbb-2222")])
    _, start_rows = started(fake, visible_devices="GPU-bbbb")
    info = [r for r in start_rows if r["kind"] == "gpu_info"]
    assert [(r["uuid"], r["nvml_index"]) for r in info] == [("GPU-bbbb-2222", 1)]


def test_cuda_visible_devices_indices_map_to_nvml_indices() -> None:
    fake = FakeNvml([FakeGpu("GPU-a"), FakeGpu("GPU-b"), FakeGpu("GPU-c")])
    _, start_rows = started(fake, visible_devices="2,0")
    info = [r for r in start_rows if r["kind"] == "gpu_info"]
    assert [(r["index"], r["nvml_index"], r["uuid"]) for r in info] == [
        (0, 2, "GPU-c"),
        (1, 0, "GPU-a"),
    ]


def test_no_visible_gpu_gives_a_note_and_shuts_nvml_down() -> None:
    fake = FakeNvml([FakeGpu("GPU-a")])
    sampler, rows = started(fake, visible_devices="")
    assert len(notes(rows)) == 1 and "no GPU visible" in notes(rows)[0]
    assert sampler.sample() == []
    assert fake.shutdown


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", []),
        ("0", [0]),
        ("1,0", [1, 0]),
        ("1gpu,2", [1, 2]),
        ("0,-1,2", [0]),
        ("0,0", []),
        ("GPU-aa,GPU-bb", ["GPU-aa", "GPU-bb"]),
        ("GPU-aa,3", ["GPU-aa"]),
        ("MIG-xx", ["MIG-xx"]),
    ],
)
def test_parse_visible_devices_like_torch(value: str | None, expected: list[Any] | None) -> None:
    assert parse_visible_devices(value) == expected

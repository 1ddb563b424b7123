"""NVML sampler (nvidia-ml-py, `import pynvml`), run in the parent's sampling thread.

Samples only the GPUs the child can see (its CUDA_VISIBLE_DEVICES: indices, GPU-/MIG- UUIDs
or UUID prefixes, parsed the way CUDA and torch do). One `gpu` row per device per tick
(docs/run-directory.md); a `gpu_info` row per device once at start.

Robustness rules (mechanics §5):
- NVML missing or refusing (no library, no driver, no permission) -> one `note` row, then
  nothing: the CPU sampler still runs.
- A field that raises NVMLError_NotSupported (e.g. utilization on a MIG device) is disabled
  for good after its first failure, with one `note` row saying so; the other fields go on.
- PCIe throughput blocks ~20 ms per call inside NVML, so it is read at most once per
  `pcie_period_s` and for one GPU per tick.
- GPM metrics (Hopper+: SM activity, tensor activity, DRAM bandwidth) are computed from two
  consecutive GPM samples, where nvmlGpmQueryDeviceSupport says the GPU supports them.

The module is injected (`nvml=`) so tests can pass a fake that raises the real exception
classes; by default `pynvml` is imported lazily, in the sampling thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from perfdoctor.collect.sampling import Row, note

logger = logging.getLogger(__name__)

DEFAULT_PCIE_PERIOD_S = 1.0
# Errors other than "not supported" may be transient (a busy driver); a field that fails this
# many ticks in a row is disabled rather than retried for the whole run.
_TRANSIENT_FAILURE_LIMIT = 10
# NVML errors that will not go away by asking again.
_PERMANENT_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoPermission",
    "NVMLError_InvalidArgument",
)
# Row key -> NVML GPM metric constant name. NVML reports percentages; rows hold fractions.
_GPM_METRICS = {
    "gpm_sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "gpm_sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "gpm_tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "gpm_dram_bw": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: None = every GPU; [] = none.

    Mirrors torch.cuda._parse_visible_devices: integers are read like strtoul ("1gpu" is 1),
    a negative or unparsable entry ends the list, a repeated entry empties it, and a list
    that starts with GPU- or MIG- holds UUIDs (possibly unique prefixes).
    """
    if value is None:
        return None
    for prefix in ("GPU-", "MIG-"):
        if value.startswith(prefix):
            uuids: list[str] = []
            for entry in value.split(","):
                entry = entry.strip()
                if entry in uuids:
                    return []
                if not entry.startswith(prefix):
                    break
                uuids.append(entry)
            return uuids
    indices: list[int] = []
    for entry in value.split(","):
        parsed = _leading_int(entry.strip())
        if parsed in indices:
            return []
        if parsed < 0:
            break
        indices.append(parsed)
    return indices


def _leading_int(text: str) -> int:
    digits = ""
    for pos, char in enumerate(text):
        if char.isdigit() or (pos == 0 and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


# --------------------------------------------------------------------------- per-GPU state


@dataclass
class _Gpu:
    index: int  # the CUDA ordinal the child sees (cuda:N)
    handle: Any
    mig: bool
    nvml_index: int | None = None
    disabled: set[str] = field(default_factory=set)
    failures: dict[str, int] = field(default_factory=dict)
    deprecated_throttle_call: bool = False
    pcie_due_s: float = 0.0
    gpm: _GpmReader | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (" (MIG)" if self.mig else "")


class _GpmReader:
    """Two GPM sample buffers used alternately; a metric needs the previous and current one."""

    def __init__(self, nvml: ModuleType, handle: Any, mig_parent: Any, instance_id: int | None):
        self._nvml = nvml
        self._handle = handle
        self._mig_parent = mig_parent
        self._instance_id = instance_id
        self._samples: list[Any] = []
        self._next = 0
        self._have_previous = False

    def open(self) -> None:
        self._samples = [self._nvml.nvmlGpmSampleAlloc(), self._nvml.nvmlGpmSampleAlloc()]

    def read(self) -> Row:
        nvml = self._nvml
        current = self._samples[self._next]
        if self._mig_parent is not None:
            nvml.nvmlGpmMigSampleGet(self._mig_parent, self._instance_id, current)
        else:
            nvml.nvmlGpmSampleGet(self._handle, current)
        previous = self._samples[1 - self._next]
        ready = self._have_previous
        self._have_previous = True
        self._next = 1 - self._next
        if not ready:
            return {}
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.sample1 = previous
        request.sample2 = current
        keys = [key for key, const in _GPM_METRICS.items() if hasattr(nvml, const)]
        request.numMetrics = len(keys)
        for slot, key in enumerate(keys):
            request.metrics[slot].metricId = getattr(nvml, _GPM_METRICS[key])
        nvml.nvmlGpmMetricsGet(request)
        row: Row = {}
        for slot, key in enumerate(keys):
            metric = request.metrics[slot]
            if metric.nvmlReturn == 0:
                row[key] = round(float(metric.value) / 100.0, 4)
        return row

    def close(self) -> None:
        for sample in self._samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except Exception:
                logger.debug("nvmlGpmSampleFree failed", exc_info=True)
        self._samples = []


# --------------------------------------------------------------------------- the sampler


class NvmlSampler:
    name = "nvml"

    def __init__(
        self,
        nvml: ModuleType | None = None,
        *,
        visible_devices: str | None = None,
        pcie_period_s: float = DEFAULT_PCIE_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._visible_devices = visible_devices
        self._pcie_period_s = pcie_period_s
        self._clock = clock
        self._gpus: list[_Gpu] = []
        self._initialized = False

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    # ---- lifecycle

    def start(self) -> list[Row]:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                return [note("NVML unavailable: nvidia-ml-py (pynvml) is not installed")]
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            return [note(f"NVML unavailable: {type(err).__name__}")]
        self._initialized = True
        try:
            gpus, notes = self._resolve_devices()
        except nvml.NVMLError as err:
            self.stop()
            return [note(f"NVML unavailable: {type(err).__name__}")]
        if not gpus:
            self.stop()
            shown = f"CUDA_VISIBLE_DEVICES={self._visible_devices!r}"
            return [*notes, note(f"NVML: no GPU visible to the child ({shown})")]
        self._gpus = gpus
        infos = [self._gpu_info(gpu) for gpu in gpus]
        return [*notes, *infos]

    def sample(self) -> list[Row]:
        rows: list[Row] = []
        notes: list[Row] = []
        pcie_budget = 1  # see the module docstring: one blocking PCIe read per tick
        for gpu in list(self._gpus):
            row: Row = {"kind": "gpu", "index": gpu.index}
            for name, reader in self._READERS:
                if name == "pcie" and name not in gpu.disabled:
                    now = self._clock()
                    if pcie_budget == 0 or now < gpu.pcie_due_s:
                        continue
                    pcie_budget -= 1
                    gpu.pcie_due_s = now + self._pcie_period_s
                if name == "gpm" and gpu.gpm is None:
                    continue
                values = self._read(gpu, name, reader, notes)
                if values is None:  # the GPU is gone
                    row = {}
                    break
                row.update(values)
            if row:
                rows.append(row)
        return [*notes, *rows]

    def stop(self) -> None:
        for gpu in self._gpus:
            if gpu.gpm is not None:
                gpu.gpm.close()
                gpu.gpm = None
        self._gpus = []
        if self._initialized and self._nvml is not None:
            self._initialized = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                logger.debug("nvmlShutdown failed", exc_info=True)

    # ---- device discovery

    def _resolve_devices(self) -> tuple[list[_Gpu], list[Row]]:
        nvml = self._nvml
        assert nvml is not None
        count = nvml.nvmlDeviceGetCount()
        visible = parse_visible_devices(self._visible_devices)
        notes: list[Row] = []
        found: list[tuple[Any, int | None]] = []
        if visible is None:
            found = [(nvml.nvmlDeviceGetHandleByIndex(i), i) for i in range(count)]
        elif all(isinstance(entry, int) for entry in visible):
            for entry in visible:
                if entry >= count:  # CUDA ignores this entry and every later one
                    notes.append(note(f"CUDA_VISIBLE_DEVICES: no GPU {entry} (NVML sees {count})"))
                    break
                found.append((nvml.nvmlDeviceGetHandleByIndex(entry), entry))
        else:
            for entry in visible:
                handle = self._handle_for_uuid(str(entry), count)
                if handle is None:
                    notes.append(note(f"CUDA_VISIBLE_DEVICES: no unique GPU matches {entry}"))
                    break
                found.append(handle)
        gpus = [
            self._make_gpu(ordinal, handle, nvml_index)
            for ordinal, (handle, nvml_index) in enumerate(found)
        ]
        return gpus, notes

    def _handle_for_uuid(self, entry: str, count: int) -> tuple[Any, int | None] | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            # Also resolves MIG-<uuid> to the MIG device handle.
            return nvml.nvmlDeviceGetHandleByUUID(entry), None
        except nvml.NVMLError:
            pass
        # CUDA also accepts a unique prefix of a GPU UUID.
        matches = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                uuid = nvml.nvmlDeviceGetUUID(handle)
            except nvml.NVMLError:
                continue
            if str(uuid).startswith(entry):
                matches.append((handle, index))
        return matches[0] if len(matches) == 1 else None

    def _make_gpu(self, ordinal: int, handle: Any, nvml_index: int | None) -> _Gpu:
        nvml = self._nvml
        assert nvml is not None
        mig = bool(_value(self._optional(lambda: nvml.nvmlDeviceIsMigDeviceHandle(handle), 0)))
        gpu = _Gpu(index=ordinal, handle=handle, mig=mig, nvml_index=nvml_index)
        gpu.gpm = self._open_gpm(handle, mig)
        return gpu

    def _open_gpm(self, handle: Any, mig: bool) -> _GpmReader | None:
        nvml = self._nvml
        assert nvml is not None
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            return None
        try:
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if mig else None
            instance = _value(nvml.nvmlDeviceGetGpuInstanceId(handle)) if mig else None
            support = nvml.nvmlGpmQueryDeviceSupport(parent if mig else handle)
            if not _value(support.isSupportedDevice):
                return None
            reader = _GpmReader(nvml, handle, parent, instance)
            reader.open()
        except (nvml.NVMLError, AttributeError):
            logger.debug("GPM unavailable", exc_info=True)
            return None
        return reader

    def _gpu_info(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        assert nvml is not None
        handle = gpu.handle
        info: Row = {"kind": "gpu_info", "index": gpu.index, "nvml_index": gpu.nvml_index}
        optional: dict[str, Callable[[], Any]] = {
            "name": lambda: str(nvml.nvmlDeviceGetName(handle)),
            "uuid": lambda: str(nvml.nvmlDeviceGetUUID(handle)),
            "power_limit_w": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
            "sm_clock_max_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_max_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(
                handle, nvml.NVML_CLOCK_MEM
            ),
        }
        for key, read in optional.items():
            value = self._optional(read, None)
            if value is not None:
                info[key] = value
        info["mig"] = gpu.mig
        info["gpm"] = gpu.gpm is not None
        return info

    def _optional(self, read: Callable[[], Any], default: Any) -> Any:
        nvml = self._nvml
        assert nvml is not None
        try:
            return read()
        except (nvml.NVMLError, AttributeError):
            return default

    # ---- one field of one GPU

    def _read(
        self, gpu: _Gpu, name: str, reader: Callable[[NvmlSampler, _Gpu], Row], notes: list[Row]
    ) -> Row | None:
        """The field's values; {} when it failed or is disabled; None when the GPU is lost."""
        nvml = self._nvml
        assert nvml is not None
        if name in gpu.disabled:
            return {}
        try:
            values = reader(self, gpu)
        except nvml.NVMLError as err:
            kind = type(err).__name__
            if kind == "NVMLError_GpuIsLost":
                self._gpus.remove(gpu)
                notes.append(note(f"{gpu.label}: lost ({kind}); no longer sampled"))
                return None
            failures = gpu.failures.get(name, 0) + 1
            gpu.failures[name] = failures
            if kind in _PERMANENT_ERRORS or failures >= _TRANSIENT_FAILURE_LIMIT:
                self._disable(gpu, name, kind, notes)
            return {}
        except AttributeError:
            # This pynvml lacks the function (older nvidia-ml-py).
            self._disable(gpu, name, "missing from this nvidia-ml-py", notes)
            return {}
        gpu.failures[name] = 0
        return values

    def _disable(self, gpu: _Gpu, name: str, why: str, notes: list[Row]) -> None:
        gpu.disabled.add(name)
        if name == "gpm" and gpu.gpm is not None:
            gpu.gpm.close()
            gpu.gpm = None
        notes.append(note(f"{gpu.label}: {name} not sampled ({why})"))
        logger.debug("%s: %s disabled (%s)", gpu.label, name, why)

    def _read_utilization(self, gpu: _Gpu) -> Row:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(gpu.handle)
        return {"util_gpu": rates.gpu, "util_mem": rates.memory}

    def _read_memory(self, gpu: _Gpu) -> Row:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
        return {"mem_used_bytes": memory.used, "mem_total_bytes": memory.total}

    def _read_sm_clock(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        return {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(gpu.handle, nvml.NVML_CLOCK_SM)}

    def _read_mem_clock(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        return {"mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(gpu.handle, nvml.NVML_CLOCK_MEM)}

    def _read_power(self, gpu: _Gpu) -> Row:
        return {"power_w": self._nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000.0}

    def _read_temperature(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        return {"temp_c": nvml.nvmlDeviceGetTemperature(gpu.handle, nvml.NVML_TEMPERATURE_GPU)}

    def _read_energy(self, gpu: _Gpu) -> Row:
        return {"energy_mj": self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)}

    def _read_throttle(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        current = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if current is not None and not gpu.deprecated_throttle_call:
            try:
                return {"throttle_reasons": int(current(gpu.handle))}
            except nvml.NVMLError_FunctionNotFound:
                # New nvidia-ml-py on a driver older than the "clocks event" rename.
                gpu.deprecated_throttle_call = True
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(gpu.handle)
        return {"throttle_reasons": int(reasons)}

    def _read_pcie(self, gpu: _Gpu) -> Row:
        nvml = self._nvml
        tx = nvml.nvmlDeviceGetPcieThroughput(gpu.handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = nvml.nvmlDeviceGetPcieThroughput(gpu.handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        return {"pcie_tx_kbs": tx, "pcie_rx_kbs": rx}

    def _read_gpm(self, gpu: _Gpu) -> Row:
        return gpu.gpm.read() if gpu.gpm is not None else {}

    _READERS: tuple[tuple[str, Callable[[NvmlSampler, _Gpu], Row]], ...] = (
        ("utilization", _read_utilization),
        ("memory", _read_memory),
        ("sm_clock", _read_sm_clock),
        ("mem_clock", _read_mem_clock),
        ("power", _read_power),
        ("temperature", _read_temperature),
        ("energy", _read_energy),
        ("throttle", _read_throttle),
        ("pcie", _read_pcie),
        ("gpm", _read_gpm),
    )


def _value(obj: Any) -> Any:
    """ctypes results (c_uint) carry their number in .value; fakes return plain ints."""
    return getattr(obj, "value", obj)

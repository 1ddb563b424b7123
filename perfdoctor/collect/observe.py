"""Snapshots of what the script configured: torch settings, cores, device, models, loaders.

Each function reads state and returns plain JSON values for observations.json
(docs/run-directory.md); none changes anything, and none initialises CUDA.
"""

from __future__ import annotations

import itertools
import logging
import os
import platform
import sys
from typing import Any

from perfdoctor.collect.cpu_features import native_low_precision_flags

log = logging.getLogger(__name__)


def _safe(fn: Any, default: Any = None) -> Any:
    try:
        return fn()
    except Exception:
        return default


def cuda_in_use(torch: Any) -> bool:
    """The script initialised CUDA (we never do it for a CPU script)."""
    return bool(_safe(lambda: torch.cuda.is_available() and torch.cuda.is_initialized(), False))


# --------------------------------------------------------------------------- torch settings


def torch_settings(torch: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "version": torch.__version__,
        "num_threads": _safe(torch.get_num_threads),
        "num_interop_threads": _safe(torch.get_num_interop_threads),
        "anomaly_enabled": _safe(torch.is_anomaly_enabled),
        "cudnn_enabled": _safe(lambda: bool(torch.backends.cudnn.enabled)),
        "cudnn_benchmark": _safe(lambda: bool(torch.backends.cudnn.benchmark)),
        "cudnn_deterministic": _safe(lambda: bool(torch.backends.cudnn.deterministic)),
        "deterministic_algorithms": _safe(torch.are_deterministic_algorithms_enabled),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
        "grad_enabled": _safe(torch.is_grad_enabled),
    }
    settings.update(_tf32_settings(torch))
    return settings


def _tf32_settings(torch: Any) -> dict[str, Any]:
    """TF32 flags, read through one API only: after a script mixed the legacy and the new
    (`fp32_precision`) setters, reading the legacy flag raises (mechanics §3.c)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        top = _safe(lambda: torch.backends.fp32_precision, "none")
        matmul_prec = _safe(lambda: matmul.fp32_precision, "none")
        conv_prec = _safe(lambda: torch.backends.cudnn.conv.fp32_precision, "none")
        matmul_eff = top if matmul_prec in (None, "none") else matmul_prec
        conv_eff = top if conv_prec in (None, "none") else conv_prec
        return {
            "tf32_api": "fp32_precision",
            "fp32_precision_matmul": matmul_prec,
            "fp32_precision_conv": conv_prec,
            "tf32_matmul": matmul_eff == "tf32",
            "tf32_cudnn": conv_eff == "tf32",
        }
    return {
        "tf32_api": "allow_tf32",
        "tf32_matmul": _safe(lambda: bool(matmul.allow_tf32)),
        "tf32_cudnn": _safe(lambda: bool(torch.backends.cudnn.allow_tf32)),
    }


# --------------------------------------------------------------------------- machine


def cpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"logical_cores": os.cpu_count()}
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        info["affinity_cores"] = _safe(lambda: len(affinity(0)))
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
        info["logical_cores"] = psutil.cpu_count(logical=True) or info["logical_cores"]
    except Exception:
        info["physical_cores"] = None
    info["name"] = _cpu_name()
    info.update(_cpu_clock_and_isa())
    info["low_precision_flags"] = _safe(native_low_precision_flags)
    return info


# The /proc/cpuinfo flags that set a core's FMA width (device_peaks.cpu_peak).
_ISA_FLAGS = ("avx512f", "avx2", "fma", "asimd", "avx512_bf16", "amx_bf16")


def _cpu_clock_and_isa() -> dict[str, Any]:
    """The clock (the kernel's max frequency, else the current "cpu MHz") and vector ISA."""
    out: dict[str, Any] = {}
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as fh:
            out["mhz"] = int(fh.read().strip()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "cpu MHz" and "mhz" not in out:
                    out["mhz"] = float(value)
                elif key in ("flags", "Features") and "isa_flags" not in out:
                    have = set(value.split())
                    out["isa_flags"] = [f for f in _ISA_FLAGS if f in have]
                if "mhz" in out and "isa_flags" in out:
                    break
    except (OSError, ValueError):
        pass
    return out


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(torch: Any, cpu: dict[str, Any]) -> dict[str, Any]:
    """The training device: CUDA when the script initialised it, else the CPU."""
    if cuda_in_use(torch):
        index = _safe(torch.cuda.current_device, 0)
        props = _safe(lambda: torch.cuda.get_device_properties(index))
        return {
            "kind": "cuda",
            "name": _safe(lambda: torch.cuda.get_device_name(index), "cuda"),
            "count": _safe(torch.cuda.device_count, 1),
            "index": index,
            "total_memory_bytes": getattr(props, "total_memory", None),
            "compute_capability": (f"{props.major}.{props.minor}" if props is not None else None),
            "cuda_version": torch.version.cuda,
        }
    return {
        "kind": "cpu",
        "name": cpu.get("name") or "cpu",
        "count": 1,
        "total_memory_bytes": _safe(_system_memory),
        "compute_capability": None,
        "cuda_available": _safe(torch.cuda.is_available, False),
    }


def _system_memory() -> int | None:
    import psutil

    return int(psutil.virtual_memory().total)


def cuda_memory(torch: Any) -> dict[str, Any]:
    if not cuda_in_use(torch):
        return {"max_allocated_bytes": None, "max_reserved_bytes": None, "total_bytes": None}
    index = _safe(torch.cuda.current_device, 0)
    return {
        "max_allocated_bytes": _safe(lambda: int(torch.cuda.max_memory_allocated(index))),
        "max_reserved_bytes": _safe(lambda: int(torch.cuda.max_memory_reserved(index))),
        "total_bytes": _safe(lambda: int(torch.cuda.get_device_properties(index).total_memory)),
        "alloc_retries": _safe(
            lambda: int(torch.cuda.memory_stats(index).get("num_alloc_retries", 0))
        ),
        "ooms": _safe(lambda: int(torch.cuda.memory_stats(index).get("num_ooms", 0))),
        **allocator_calls(torch, index),
    }


# The caching allocator is off when one of these is "1" (c10 CUDACachingAllocator reads the
# HIP name on ROCm builds): every tensor is then a cudaMalloc and every free a cudaFree.
NO_CACHING_ENV = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING")


def allocator_calls(torch: Any, index: int) -> dict[str, Any]:
    """Device malloc/free calls over the run (memory_stats num_device_alloc/free, present in
    torch >= 2.1) and whether caching was turned off in the environment."""
    stats = _safe(lambda: dict(torch.cuda.memory_stats(index)), {}) or {}

    def count(key: str) -> int | None:
        value = stats.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    return {
        "device_allocs": count("num_device_alloc"),
        "device_frees": count("num_device_free"),
        "caching_disabled": any(os.environ.get(k) == "1" for k in NO_CACHING_ENV),
    }


def dist_info(torch: Any) -> dict[str, Any]:
    dist = getattr(torch, "distributed", None)
    if dist is None or not _safe(dist.is_available, False) or not _safe(dist.is_initialized, False):
        return {"initialized": False, "backend": None, "world_size": 1}
    return {
        "initialized": True,
        "backend": _safe(lambda: str(dist.get_backend())),
        "world_size": _safe(dist.get_world_size, 1),
        "rank": _safe(dist.get_rank, 0),
    }


def compile_info() -> dict[str, Any]:
    """torch.compile activity; read only if the script imported dynamo (importing it is slow)."""
    if "torch._dynamo" not in sys.modules:
        return {"used": False, "recompiles": 0, "graph_breaks": 0}
    info: dict[str, Any] = {"used": False, "recompiles": None, "graph_breaks": None}
    try:
        from torch._dynamo.utils import counters

        frames_ok = int(counters["frames"].get("ok", 0))
        info["used"] = frames_ok > 0
        info["frames_compiled"] = frames_ok
        info["unique_graphs"] = int(counters["stats"].get("unique_graphs", 0))
        info["graph_breaks"] = int(sum(counters["graph_break"].values()))
    except Exception:
        log.debug("dynamo counters unreadable", exc_info=True)
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    per_frame = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
    if per_frame is not None:
        # Every compilation of a frame after its first one is a recompilation.
        info["recompiles"] = int(sum(max(int(n) - 1, 0) for n in per_frame.values()))
    return info


# --------------------------------------------------------------------------- objects


def describe_root(module: Any, torch: Any) -> dict[str, Any]:
    nn = torch.nn
    params = list(module.parameters())
    trainable = [p for p in params if p.requires_grad]
    convs = [m for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
    four_d = [p for p in params if p.dim() == 4]
    ddp_cls = _safe(lambda: nn.parallel.DistributedDataParallel)
    data_parallel = isinstance(module, nn.DataParallel)
    ddp = ddp_cls is not None and isinstance(module, ddp_cls)
    orig = getattr(module, "_orig_mod", None)  # torch.compile's OptimizedModule
    inner = orig if orig is not None else (module.module if data_parallel or ddp else None)
    compiled = orig is not None or getattr(module, "_compiled_call_impl", None) is not None
    dtype = next(
        (str(p.dtype).replace("torch.", "") for p in params if p.is_floating_point()), None
    )
    return {
        "class": type(inner if inner is not None else module).__name__,
        "wrapper": type(module).__name__ if inner is not None else None,
        "param_count": int(sum(p.numel() for p in params)),
        "param_tensors": len(params),
        "trainable_param_count": int(sum(p.numel() for p in trainable)),
        "conv_count": len(convs),
        "channels_last": (
            all(p.is_contiguous(memory_format=torch.channels_last) for p in four_d)
            if four_d
            else False
        ),
        "compiled": compiled,
        "dtype": dtype,
        "device": str(params[0].device) if params else None,
        "conv_bias_before_bn": conv_bias_before_bn(module, torch),
        "data_parallel": data_parallel,
        "ddp": ddp,
    }


def conv_bias_before_bn(module: Any, torch: Any) -> int:
    """Convs with a bias registered directly before a BatchNorm in the same parent (the BN's
    mean subtraction cancels the bias: wasted work and parameters)."""
    nn = torch.nn
    pairs = ((nn.Conv1d, nn.BatchNorm1d), (nn.Conv2d, nn.BatchNorm2d), (nn.Conv3d, nn.BatchNorm3d))
    count = 0
    for parent in module.modules():
        children = list(parent.children())
        for first, second in itertools.pairwise(children):
            for conv_cls, bn_cls in pairs:
                if (
                    isinstance(first, conv_cls)
                    and isinstance(second, bn_cls)
                    and first.bias is not None
                ):
                    count += 1
    return count


def describe_optimizer(opt: Any, torch: Any) -> dict[str, Any]:
    defaults = getattr(opt, "defaults", {}) or {}
    group = opt.param_groups[0] if getattr(opt, "param_groups", None) else {}
    fused = group.get("fused", defaults.get("fused"))
    foreach = group.get("foreach", defaults.get("foreach"))
    params = [p for g in getattr(opt, "param_groups", []) for p in g.get("params", [])]
    return {
        "class": type(opt).__name__,
        "module": type(opt).__module__,
        "impl": _optimizer_impl(opt, fused, foreach, params, defaults),
        "fused": fused,
        "foreach": foreach,
        "param_count": int(sum(p.numel() for p in params)),
        "param_tensors": len(params),
        "param_groups": len(getattr(opt, "param_groups", [])),
        "lr": group.get("lr"),
    }


def _optimizer_impl(
    opt: Any, fused: Any, foreach: Any, params: list[Any], defaults: dict[str, Any]
) -> str | None:
    if fused:
        return "fused"
    if foreach:
        return "foreach"
    if "foreach" not in defaults:
        return None  # an optimizer without multi-tensor variants (LBFGS, third-party)
    if foreach is None:
        # Left to torch: it picks foreach on CUDA and the single-tensor loop elsewhere.
        try:
            from torch.optim.optimizer import _default_to_fused_or_foreach

            differentiable = bool(defaults.get("differentiable", False))
            _, use_foreach = _default_to_fused_or_foreach(params, differentiable, False)
            return "foreach" if use_foreach else "single_tensor"
        except Exception:
            return None
    return "single_tensor"


DATALOADER_FIELDS = (
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "batch_size",
    "drop_last",
    "timeout",
    "in_order",
)


def describe_dataloader(loader: Any, torch: Any) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for name in DATALOADER_FIELDS:
        if hasattr(loader, name):
            value = getattr(loader, name)
            info[name] = value if isinstance(value, (bool, int, float, str, type(None))) else None
    dataset = getattr(loader, "dataset", None)
    info["dataset_class"] = type(dataset).__name__ if dataset is not None else None
    info["iterable"] = isinstance(dataset, torch.utils.data.IterableDataset)
    context = _safe(lambda: loader.multiprocessing_context)
    info["multiprocessing_context"] = _context_name(context)
    collate = getattr(loader, "collate_fn", None)
    info["collate_fn"] = getattr(collate, "__name__", type(collate).__name__) if collate else None
    sampler = getattr(loader, "sampler", None)
    info["sampler_class"] = type(sampler).__name__ if sampler is not None else None
    info["dataset_length"] = _safe(lambda: len(dataset)) if dataset is not None else None
    return info


def _context_name(context: Any) -> str | None:
    if context is None:
        return None
    if isinstance(context, str):
        return context
    get = getattr(context, "get_start_method", None)
    return _safe(get) if get is not None else type(context).__name__

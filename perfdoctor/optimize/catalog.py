"""The optimization catalog: every fix perfdoctor can recommend, as data plus hooks.

Rules name these ids in `Finding.optimizations`; `recommend.py` turns them into ranked
recommendations; `collect/appliers` holds one runtime applier per "runtime"/"env" id. Ids are
stable and user-visible (`--only`, `--skip`, report.json): never rename one.

What is particular about one optimization is on its entry, never in an `if opt_id ==` chain
elsewhere: its trade-offs with the measured run or the other picks (`conflicts`), when not to
try it automatically (`skip_auto`), the alternative to recommend on this device
(`stand_in`), its by-hand change written for this script (`tailor`), all pure functions in
`optimize/policies.py`, and the sizing the parent measures for its applier (`sizing`,
`optimize/sizing.py`), passed to the child in its environment.

Numerics tolerance categories (relative loss difference a variant may show against the
baseline run with the same seed, see `optimize/numerics.py`):
    exact          ~1e-4  fp32-exact transforms: only summation order may change
    tf32           ~1e-3  fp32 matmuls/convs with a 10-bit mantissa
    low-precision  ~1e-2  bf16/fp16 autocast
    data-order     ~1e-1  the per-sample RNG streams change (e.g. augmentations in workers);
                          the data order itself is unchanged, so only the noise differs
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perfdoctor.model import Facts
from perfdoctor.optimize import policies, snippets
from perfdoctor.optimize.policies import ConflictHook, SkipAutoHook, StandInHook, TailorHook
from perfdoctor.optimize.sizing import Sizing, size_cpu_threads, size_dataloader_workers

OptimizationKind = Literal["runtime", "env", "manual"]
DeviceScope = Literal["any", "cuda", "cpu"]
ToleranceCategory = Literal["exact", "tf32", "low-precision", "data-order"]
Goal = Literal["speed", "memory"]
SizingHook = Callable[[Facts, int], "Sizing | None"]  # (baseline facts, usable cores)

TOLERANCES: dict[str, float] = {
    "exact": 1e-4,
    "tf32": 1e-3,
    "low-precision": 1e-2,
    "data-order": 1e-1,
}


@dataclass(frozen=True)
class Optimization:
    id: str
    title: str
    kind: OptimizationKind
    risk: str
    code_change: str  # the by-hand change, as a short snippet
    applies_when: str
    device: DeviceScope
    verify: str  # how the runtime applier proves it took effect ("" for manual ones)
    numerics_tolerance: ToleranceCategory = "exact"
    # "memory" optimizations are judged on peak memory saved, not on speed.
    goal: Goal = "speed"
    env: Mapping[str, str] = field(default_factory=dict)  # child environment (kind "env")
    min_compute_capability: float | None = None  # CUDA only; None = any
    # Ids that cannot be applied together with this one (one of them is kept).
    excludes: tuple[str, ...] = ()
    # Hooks (see the module docstring); None where the entry needs none.
    conflicts: ConflictHook | None = None
    skip_auto: SkipAutoHook | None = None
    stand_in: StandInHook | None = None
    tailor: TailorHook | None = None
    sizing: SizingHook | None = None

    @property
    def auto_applicable(self) -> bool:
        return self.kind in ("runtime", "env")

    @property
    def tolerance(self) -> float:
        return TOLERANCES[self.numerics_tolerance]

    @property
    def hooks(self) -> tuple[str, ...]:
        """The names of the hooks this entry carries (for listings and the snapshot)."""
        names = ("conflicts", "skip_auto", "stand_in", "tailor", "sizing")
        return tuple(name for name in names if getattr(self, name) is not None)


def _runtime(**kw: Any) -> Optimization:
    return Optimization(kind="runtime", **kw)


def _manual(**kw: Any) -> Optimization:
    return Optimization(kind="manual", verify="", **kw)


_ENTRIES: tuple[Optimization, ...] = (
    # ------------------------------------------------------------------ precision
    _runtime(
        id="amp-bf16",
        title="Mixed precision (bf16 autocast)",
        risk="changes numerics (bf16 has an 8-bit mantissa)",
        code_change=(
            "with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n"
            "    loss = loss_fn(model(x), y)"
        ),
        applies_when="fp32 matmul/conv time dominates on an Ampere or newer GPU",
        device="cuda",
        verify="Linear/Conv outputs of the root model are bfloat16 after the first step",
        numerics_tolerance="low-precision",
        min_compute_capability=8.0,
        excludes=("amp-fp16",),
        conflicts=policies.amp_conflicts("amp-fp16"),
        stand_in=policies.preferred_amp,
    ),
    _runtime(
        id="amp-fp16",
        title="Mixed precision (fp16 autocast + GradScaler)",
        risk="changes numerics; overflow skips steps (GradScaler); grads seen by user code "
        "are scaled unless unscaled first",
        code_change=(
            "scaler = torch.amp.GradScaler('cuda')\n"
            "with torch.autocast(device_type='cuda', dtype=torch.float16):\n"
            "    loss = loss_fn(model(x), y)\n"
            "scaler.scale(loss).backward()\n"
            "scaler.unscale_(opt)  # before clip_grad_norm_\n"
            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "scaler.step(opt); scaler.update()"
        ),
        applies_when="fp32 matmul/conv time dominates on a tensor-core GPU without bf16 (CC 7.x)",
        device="cuda",
        verify="root outputs are float16 inside the model and a GradScaler steps every optimizer",
        numerics_tolerance="low-precision",
        min_compute_capability=7.0,
        excludes=("amp-bf16",),
        conflicts=policies.amp_conflicts("amp-bf16"),
        stand_in=policies.preferred_amp,
    ),
    _runtime(
        id="tf32",
        title="TF32 for fp32 matmuls and convolutions",
        risk="changes numerics (10-bit mantissa in fp32 matmuls)",
        code_change="torch.set_float32_matmul_precision('high')",
        applies_when="fp32 matmuls on an Ampere or newer GPU with TF32 off",
        device="cuda",
        verify="matmul precision getter reads 'high'/'tf32' at a later step",
        numerics_tolerance="tf32",
        min_compute_capability=8.0,
    ),
    # ------------------------------------------------------------------ cuDNN
    _runtime(
        id="cudnn-benchmark",
        title="cuDNN autotuning (cudnn.benchmark)",
        risk="non-deterministic algorithm choice; re-tunes on every new input shape",
        code_change="torch.backends.cudnn.benchmark = True",
        applies_when="convolutions at stable input shapes with cudnn.benchmark off",
        device="cuda",
        verify="torch.backends.cudnn.benchmark is still True at a later step",
        numerics_tolerance="tf32",
        conflicts=policies.cudnn_benchmark_conflicts,
    ),
    _runtime(
        id="cudnn-nondeterministic",
        title="Allow non-deterministic cuDNN algorithms",
        risk="runs are no longer bit-reproducible",
        code_change=(
            "torch.backends.cudnn.deterministic = False\ntorch.use_deterministic_algorithms(False)"
        ),
        applies_when="cudnn.deterministic or deterministic algorithms are on",
        device="cuda",
        verify="cudnn.deterministic and are_deterministic_algorithms_enabled() are False later",
        numerics_tolerance="tf32",
        conflicts=policies.always("gives up bit-reproducibility that the script asked for"),
    ),
    # ------------------------------------------------------------------ model transforms
    _runtime(
        id="channels-last",
        title="channels_last memory format for convolutions",
        risk="view() on activations may fail; ops without NHWC kernels add copies",
        code_change=(
            "model = model.to(memory_format=torch.channels_last)\n"
            "x = x.to(memory_format=torch.channels_last)"
        ),
        applies_when="convolution-heavy model with NCHW tensors",
        device="any",
        verify="4-D parameters of the root are channels_last-contiguous",
        numerics_tolerance="exact",
    ),
    _runtime(
        id="compile",
        title="torch.compile the model",
        risk="compile time on the first steps; recompiles on shape changes; graph breaks",
        code_change="model.compile()  # in place; keeps state_dict keys",
        applies_when="many small ops / Python overhead per step (launch-bound or host-bound)",
        device="any",
        verify="dynamo compiled at least one frame of the root (torch._dynamo counters)",
        numerics_tolerance="tf32",
        excludes=("compile-cudagraphs",),
        conflicts=policies.compile_conflicts("compile-cudagraphs"),
    ),
    _runtime(
        id="compile-cudagraphs",
        title="torch.compile with CUDA graphs (mode='reduce-overhead')",
        risk="needs static shapes and no host syncs in the step; extra memory pool; "
        "outputs are overwritten by the next replay",
        code_change="model.compile(mode='reduce-overhead')",
        applies_when="launch-bound step (many tiny kernels, GPU waits for the host)",
        device="cuda",
        verify="dynamo compiled the root and inductor reported no cudagraph skips",
        numerics_tolerance="tf32",
        excludes=("compile",),
        conflicts=policies.cudagraph_conflicts,
        skip_auto=policies.skip_cudagraphs_with_host_syncs,
    ),
    _runtime(
        id="compile-lift-disable",
        title="Trace the torch.compiler.disable'd helpers into the graph",
        risk="the helper was disabled for a reason: code dynamo cannot trace breaks the graph "
        "inside it instead, and a data-dependent helper may recompile",
        code_change=(
            "# drop the decorator (or the torch.compiler.disable(...) call) on the helper:\n"
            "smooth = _smooth  # was: smooth = torch.compiler.disable(_smooth)"
        ),
        applies_when="a graph break at a call of a function of the script that it wrapped in "
        "torch.compiler.disable / torch._dynamo.disable",
        device="any",
        verify="dynamo traced a lifted function of the script into a compiled graph",
        numerics_tolerance="tf32",
    ),
    _runtime(
        id="activation-checkpointing",
        title="Activation checkpointing on repeated blocks",
        risk="about 20-30% more compute; forward side effects run twice",
        code_change=(
            "from torch.utils.checkpoint import checkpoint\n"
            "x = checkpoint(block, x, use_reentrant=False)  # for each repeated block"
        ),
        applies_when="peak memory near the device limit with repeated blocks in a "
        "ModuleList/Sequential",
        device="cuda",
        verify="repeated blocks run under torch.utils.checkpoint",
        numerics_tolerance="exact",
        goal="memory",
        conflicts=policies.always("trades time for memory: about 20-30% more compute per step"),
    ),
    # ------------------------------------------------------------------ input pipeline
    _runtime(
        id="dataloader-workers",
        title="DataLoader worker processes (num_workers)",
        risk="changes per-sample RNG streams (augmentations); unsafe for IterableDataset "
        "without sharding and for unpicklable datasets under spawn",
        code_change=(
            "# workers from the measured split: data ms per batch (the wait with\n"
            "# num_workers=0) vs compute ms. CPU: up to one per usable core when loading\n"
            "# dominates (the main process mostly waits); GPU: data / compute + 1, at most\n"
            "# cores - 1. The intra-op threads stay as they are (cpu-threads changes them)\n"
            "DataLoader(ds, batch_size=..., num_workers=workers)"
        ),
        applies_when="steps wait for the DataLoader and num_workers is 0 (the applier sets "
        "num_workers alone, sized from the baseline's data wait and compute time per batch "
        "and the usable cores; the script's intra-op threads are left as they are)",
        device="any",
        verify="the DataLoader iterator is a _MultiProcessingDataLoaderIter",
        numerics_tolerance="data-order",
        conflicts=policies.worker_conflicts,
        skip_auto=policies.skip_workers_set_by_script,
        sizing=size_dataloader_workers,
        tailor=snippets.dataloader_workers_for_script,
    ),
    _runtime(
        id="pin-memory",
        title="Pinned host memory for batches (pin_memory=True)",
        risk="more page-locked host memory",
        code_change="DataLoader(ds, ..., pin_memory=True)",
        applies_when="host-to-device copies from pageable memory",
        device="cuda",
        verify="the DataLoader was created with pin_memory=True",
        numerics_tolerance="exact",
    ),
    _runtime(
        id="non-blocking-copies",
        title="Asynchronous host-to-device copies (non_blocking=True)",
        risk="the source must stay pinned and unmodified until the copy ends",
        code_change="x = x.to(device, non_blocking=True)",
        applies_when="host-to-device copies from pinned memory block the host",
        device="cuda",
        verify="pinned CPU->CUDA copies in the step were issued non_blocking",
        numerics_tolerance="exact",
        conflicts=policies.non_blocking_conflicts,
    ),
    # ------------------------------------------------------------------ optimizer
    _runtime(
        id="fused-optimizer",
        title="Fused optimizer kernels (fused=True)",
        risk="only for Adam/AdamW/SGD/Adagrad with floating-point params",
        code_change="torch.optim.AdamW(model.parameters(), lr=..., fused=True)",
        applies_when="single-tensor or foreach optimizer step is a visible share of the step",
        device="any",
        verify="optimizer.param_groups[0]['fused'] is True",
        numerics_tolerance="exact",
        skip_auto=policies.skip_fused_without_kernels,
        tailor=policies.fused_for_script_optimizer,
    ),
    _runtime(
        id="zero-grad-set-to-none",
        title="zero_grad(set_to_none=True)",
        risk="code that reads .grad after zero_grad sees None instead of zeros",
        code_change="optimizer.zero_grad(set_to_none=True)",
        applies_when="zero_grad fills gradients with zeros every step",
        device="any",
        verify="gradients are None right after zero_grad",
        numerics_tolerance="exact",
    ),
    # ------------------------------------------------------------------ debug settings
    _runtime(
        id="anomaly-off",
        title="Autograd anomaly detection off",
        risk="NaN sources are no longer pinpointed with a forward traceback",
        code_change="# remove torch.autograd.set_detect_anomaly(True) / detect_anomaly()",
        applies_when="autograd anomaly detection is on during training",
        device="any",
        verify="torch.is_anomaly_enabled() is False at a later step",
        numerics_tolerance="exact",
    ),
    _runtime(
        id="debug-modes-off",
        title="Debug modes off (user profiler, emit_nvtx, sync debug mode)",
        risk="the script's own traces / NVTX ranges are no longer produced",
        code_change=(
            "# remove torch.profiler.profile(...) / autograd.profiler.emit_nvtx() around training\n"
            "torch.cuda.set_sync_debug_mode(0)"
        ),
        applies_when="the script runs its own profiler, emit_nvtx or a CUDA sync debug mode",
        device="any",
        verify="no user profiler session or sync debug mode is active at a later step",
        numerics_tolerance="exact",
    ),
    _runtime(
        id="cpu-threads",
        title="Intra-op CPU threads sized to the free cores",
        risk="competes with DataLoader workers for cores; changes reduction order (rounding)",
        code_change=(
            "# usable cores less the DataLoader's workers and the cores other jobs keep busy\n"
            "torch.set_num_threads(len(os.sched_getaffinity(0)) - num_workers)"
        ),
        applies_when="CPU training with fewer intra-op threads than usable cores, or more "
        "than the cores the DataLoader's workers and other processes leave (both directions)",
        device="cpu",
        verify="torch.get_num_threads() equals the sized count at a later step",
        # More threads split matmul reductions into other blocks: the rounding differs from
        # the first step on and the difference compounds (measured 1.9e-4 after 23 steps of
        # gpt_char_lm.py, 1 -> 2 threads), so "exact" would reject a correct change.
        numerics_tolerance="tf32",
        conflicts=policies.thread_conflicts,
        skip_auto=policies.skip_threads_already_set,
        tailor=snippets.cpu_threads_for_script,
        sizing=size_cpu_threads,
    ),
    _runtime(
        id="cpu-fp32",
        title="fp32 instead of bf16/fp16 autocast on this CPU",
        risk="none for numerics (fp32 is the reference); more memory for activations",
        code_change=snippets.CPU_FP32,
        applies_when="CPU autocast to bf16/fp16 on a CPU without native bf16/fp16 instructions",
        device="cpu",
        verify="the script's CPU autocast regions are entered with enabled=False",
        numerics_tolerance="low-precision",
    ),
    # ------------------------------------------------------------------ allocator
    Optimization(
        id="expandable-segments",
        title="Expandable allocator segments (less fragmentation)",
        kind="env",
        risk="none known for single-process training; changes allocator behaviour",
        code_change="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py",
        applies_when="reserved memory far above allocated memory at the peak (fragmentation)",
        device="cuda",
        verify="PYTORCH_CUDA_ALLOC_CONF in the child holds expandable_segments:True",
        numerics_tolerance="exact",
        goal="memory",
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    ),
    # ------------------------------------------------------------------ manual only
    _manual(
        id="larger-batch",
        title="Larger batch size",
        risk="changes the training recipe (learning rate, convergence)",
        code_change="DataLoader(ds, batch_size=2 * old_batch_size, ...)  # re-tune the LR",
        applies_when="the device is under-used and memory has headroom",
        device="any",
        numerics_tolerance="data-order",
    ),
    _runtime(
        id="batch-size",
        title="Batch size chosen by --plan-batch",
        risk="changes the training recipe (learning rate scaling, BatchNorm statistics)",
        code_change="DataLoader(ds, batch_size=<planned>, ...)  # or --batch-size <planned>",
        applies_when="only under --plan-batch: it measures peak memory and samples/s per batch",
        device="any",
        verify="the training DataLoader's batch_size is the planned one",
        numerics_tolerance="data-order",
    ),
    _manual(
        id="grad-accumulation",
        title="Smaller micro-batches with gradient accumulation",
        risk="more steps per update; BatchNorm sees smaller batches",
        code_change=(
            "accum = 4  # micro-batches per optimizer step\n"
            "for i, (x, y) in enumerate(loader):\n"
            "    (loss_fn(model(x), y) / accum).backward()\n"
            "    if (i + 1) % accum == 0:\n"
            "        opt.step(); opt.zero_grad(set_to_none=True)"
        ),
        applies_when="peak memory at the device limit, or communication-bound DDP",
        device="any",
        numerics_tolerance="data-order",
        tailor=snippets.grad_accumulation_for_script,
    ),
    _manual(
        id="ddp-over-dataparallel",
        title="DistributedDataParallel instead of DataParallel",
        risk="needs a launcher (torchrun) and a process group",
        code_change=(
            "torch.distributed.init_process_group('nccl')\n"
            "model = DistributedDataParallel(model.to(rank), device_ids=[rank])"
        ),
        applies_when="nn.DataParallel over several GPUs",
        device="cuda",
    ),
    _manual(
        id="nccl-backend",
        title="NCCL backend for GPU collectives",
        risk="none on NVIDIA GPUs",
        code_change="torch.distributed.init_process_group(backend='nccl')",
        applies_when="DDP on GPUs with the gloo backend",
        device="cuda",
    ),
    _manual(
        id="remove-host-syncs",
        title="Remove host synchronizations from the step",
        risk="logged values arrive later (log every N steps)",
        code_change=(
            "running += loss.detach()  # instead of loss.item() every step\n"
            "if step % 100 == 0: print(running.item() / 100)"
        ),
        applies_when=".item()/.cpu()/print/synchronize inside the training step",
        device="cuda",
    ),
    _manual(
        id="no-grad-eval",
        title="Evaluate under torch.no_grad() / inference_mode()",
        risk="none for evaluation code",
        code_change="with torch.inference_mode():\n    preds = model(x_val)",
        applies_when="forwards that build an autograd graph never used by backward",
        device="any",
    ),
    _manual(
        id="conv-bias-off",
        title="bias=False on convolutions followed by BatchNorm",
        risk="checkpoints change shape (the bias parameter disappears)",
        code_change="nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)  # BatchNorm follows",
        applies_when="Conv with bias directly followed by BatchNorm",
        device="any",
    ),
    _manual(
        id="create-on-device",
        title="Create tensors directly on the device",
        risk="none",
        code_change="torch.zeros(n, device='cuda')  # instead of torch.zeros(n).cuda()",
        applies_when="tensors created on the CPU and copied to the GPU every step",
        device="cuda",
    ),
    _manual(
        id="pad-gemm-dims",
        title="Pad fp16/bf16 GEMM dimensions to multiples of 8",
        risk="changes model shapes (hidden sizes, classifier width)",
        code_change=(
            "n = (n + 7) // 8 * 8  # each odd GEMM dim: hidden size, classifier width, batch\n"
            "logits = model(x)[:, :num_classes]  # slice padded outputs off"
        ),
        applies_when="low-precision GEMMs with a dimension not a multiple of 8",
        device="cuda",
    ),
    _manual(
        id="pad-vocab",
        title="Pad the vocabulary to a multiple of 64",
        risk="changes the embedding and LM-head shapes (mask the padded logits)",
        code_change="vocab_size = (vocab_size + 63) // 64 * 64",
        applies_when="an embedding / LM head whose vocabulary is not a multiple of 64",
        device="cuda",
    ),
    _manual(
        id="detach-logged-tensors",
        title="Detach tensors kept for logging",
        risk="none",
        code_change="history.append(loss.detach())  # not loss: keeps the whole graph alive",
        applies_when="memory grows step after step (graphs kept alive by logging)",
        device="any",
    ),
    _manual(
        id="static-shapes",
        title="Static input shapes (pad or bucket)",
        risk="padding wastes some compute",
        code_change=(
            "DataLoader(ds, ..., drop_last=True)  # and pad sequences to a few bucket lengths"
        ),
        applies_when="input shapes change after warm-up (recompiles, cudnn re-tuning)",
        device="any",
    ),
    _manual(
        id="balance-rank-work",
        title="Even out the slow rank's own work",
        risk="none",
        code_change=(
            "if rank == 0 and step % 100 == 0:  # not every step: the other ranks wait for it\n"
            "    save_checkpoint(model)  # or hand it to a background thread"
        ),
        applies_when="one rank's host work outside forward and backward makes the others wait",
        device="any",
    ),
    _manual(
        id="index-whole-batches",
        title="Index whole batches of the in-memory tensors (no per-row __getitem__ + collate)",
        risk="none: the same rows in the same order; drop_last as before",
        code_change=(
            "from torch.utils.data import BatchSampler, DataLoader, RandomSampler\n"
            "batches = BatchSampler(RandomSampler(ds), batch_size=256, drop_last=False)\n"
            "loader = DataLoader(ds, sampler=batches, batch_size=None)  # ds[list] -> a batch"
        ),
        applies_when=(
            "a TensorDataset of in-memory tensors is fetched row by row and collated again"
        ),
        device="any",
        tailor=snippets.batched_indexing_for_script,
    ),
    _manual(
        id="faster-data-pipeline",
        title="Faster Dataset / collate code",
        risk="none",
        code_change="# decode/augment once, cache, or vectorise the hot lines of __getitem__",
        applies_when="the data-loading time sits in the user's own Dataset/collate code",
        device="any",
    ),
    # ------------------------------------------------------------------ allocator
    _manual(
        id="keep-allocator-caching",
        title="Keep PyTorch's caching allocator on",
        risk="none: caching is the default",
        code_change="unset PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_NO_HIP_MEMORY_CACHING",
        applies_when="every tensor is a cudaMalloc/cudaFree (hipMalloc/hipFree) in the step",
        device="cuda",
    ),
    _manual(
        id="no-empty-cache-in-loop",
        title="Do not call torch.cuda.empty_cache() in the loop",
        risk="reserved memory stays with this process (other processes on the GPU see less)",
        code_change="# delete torch.cuda.empty_cache() from the training/inference loop",
        applies_when="empty_cache returns the cache every step, so the next one re-allocates",
        device="cuda",
    ),
    # ------------------------------------------------------------------ inference serving
    _manual(
        id="serving-cuda-graphs",
        title="Serve with CUDA graphs: drop the engine's eager flag",
        risk="graph capture at start-up; extra memory for the captured batch sizes",
        code_change=(
            "LLM(model, enforce_eager=False, compilation_config={'cudagraph_capture_sizes': "
            "[1, 2, 4, 8, 16, 32]})  # vLLM; SGLang: drop --disable-cuda-graph, "
            "set --cuda-graph-max-bs"
        ),
        applies_when="an inference engine that compiles and captures graphs runs eagerly "
        "(launch-bound decode)",
        device="cuda",
    ),
    _manual(
        id="serving-batch",
        title="Serve more requests per batch",
        risk="higher latency per request",
        code_change=(
            "LLM(model, max_num_seqs=256, max_num_batched_tokens=8192)  # vLLM; "
            "SGLang: --max-running-requests; HF: generate() over a batch of prompts"
        ),
        applies_when="an inference GPU under-used with memory to spare",
        device="any",
    ),
)

CATALOG: dict[str, Optimization] = {entry.id: entry for entry in _ENTRIES}


def get(opt_id: str) -> Optimization | None:
    return CATALOG.get(opt_id)


def unknown_ids(ids: Sequence[str]) -> list[str]:
    """Ids the catalog does not know (for validating --only / --skip)."""
    return [i for i in ids if i not in CATALOG]


def tolerance_for(ids: Sequence[str]) -> float:
    """Loss tolerance of a set of optimizations applied together: the loosest one."""
    return TOLERANCES[tolerance_category_for(ids)]


def tolerance_category_for(ids: Sequence[str]) -> ToleranceCategory:
    """The loss tolerance category of a set of optimizations applied together: the loosest
    one ("exact" for none: a change perfdoctor did not make is held to summation order)."""
    known = [CATALOG[i].numerics_tolerance for i in ids if i in CATALOG]
    return max(known, key=TOLERANCES.__getitem__, default="exact")


# Variables whose value is a comma-separated list of key:value options; merged, not replaced.
_LIST_ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF",)


def env_for(
    optimization_ids: Sequence[str], inherited: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment additions for the child: the "env" optimizations among `optimization_ids`.

    PYTORCH_CUDA_ALLOC_CONF is merged with the value the user already has (theirs first, so a
    key they set, e.g. expandable_segments:False, is kept rather than silently overridden)."""
    inherited = inherited or {}
    env: dict[str, str] = {}
    for opt_id in optimization_ids:
        entry = CATALOG.get(opt_id)
        if entry is None or entry.kind != "env":
            continue
        for name, value in entry.env.items():
            current = env.get(name, inherited.get(name, ""))
            if name in _LIST_ENV_VARS and current:
                keys = {item.split(":", 1)[0].strip() for item in current.split(",") if item}
                extra = [i for i in value.split(",") if i.split(":", 1)[0].strip() not in keys]
                env[name] = ",".join([current, *extra]) if extra else current
            else:
                env[name] = value
    return env


def describe_optimizations() -> list[dict[str, Any]]:
    """Rows for `perfdoctor optimizations`, in catalog order."""
    return [
        {
            "id": o.id,
            "title": o.title,
            "kind": o.kind,
            "device": o.device,
            "goal": o.goal,
            "applies_when": o.applies_when,
            "risk": o.risk,
            "code_change": o.code_change,
            "verify": o.verify,
            "numerics_tolerance": o.numerics_tolerance,
            "tolerance": o.tolerance,
            "env": dict(o.env),
            "min_compute_capability": o.min_compute_capability,
            "excludes": list(o.excludes),
            "hooks": list(o.hooks),
        }
        for o in _ENTRIES
    ]

"""The precision a GEMM, convolution or attention kernel computes in, from its name.

Why by name: a trace records each kernel's name and, for the op that launched it, the op's
input dtypes ("Input type", with record_shapes). The op's dtype does not say whether the math
ran on tensor/matrix cores (an fp32 matmul may run as TF32; a bf16 GEMV runs on SIMT lanes),
and a kernel launched outside aten (DeepGEMM, a Triton template, a CUTLASS grouped GEMM) has no
op dtype at all. The libraries write both facts into their kernel names:

NVIDIA
* cuBLAS/cuBLASLt/cuDNN "xmma": `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_...`,
  `sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_...`; the first type group is the input
  type (e4m3/e5m2 fp8, bf16, f16, tf32, f32); `ffma` in the name means SIMT fp32 FMAs;
* cuBLAS by architecture: `ampere_bf16_s16816gemm_*`, `turing_fp16_s1688gemm_*`,
  `volta_h884gemm_*` (tensor cores: an MMA shape), `volta_sgemm_*`, `ampere_sgemm_*` (SIMT);
* cuBLASLt on Hopper/Blackwell: `nvjet_*` (always tensor cores; the type is read from the
  op's dtype when the name does not give it);
* CUTLASS: `cutlass_80_tensorop_bf16_s16816gemm_*`, `cutlass3x_sm90_tensorop_gemm_e4m3_*`,
  `*_simt_sgemm_*`; DeepGEMM `fp8_gemm`; MX/NVFP4 block-scaled names (`mxf8`, `mxf4`, `nvf4`,
  `e2m1`, `ue8m0`, `blockscaled`);
* cuDNN: `scudnn` / `implicit_convolve_sgemm` / `wgrad_alg0_engine<float` (SIMT fp32),
  `*_fp16_*cudnn*`, the xmma convolutions above;
* attention: FlashAttention (`flash_fwd`, `flash_bwd`, `FlashAttnFwdSm90`), the
  memory-efficient `fmha_cutlassF_*`, cuDNN SDPA; their element type is a template argument
  (`cutlass::bfloat16_t`, `cutlass::half_t`, `cutlass::float_e4m3_t`).
* Triton: Inductor's GEMM templates (`triton_tem_*mm*`) and user `*matmul*` / `attn_fwd`
  kernels use tl.dot, on tensor cores for 16-bit and 8-bit inputs; the dtype is the op's.

AMD
* Tensile / hipBLASLt: `Cijk_Ailk_Bljk_BBS_BH_..._MT256x192x64_MI16x16x1_...`: the token after
  the A/B layouts encodes input / output / compute types (`BBS` bf16 in, bf16 out, fp32
  accumulate; `HHS` fp16; `SB`/`SS` fp32; `F8`, `B8`, `F8B8` fp8; `X` xf32; `D` fp64), and
  `MI<m>x<n>x<k>` means MFMA matrix-core instructions (no `MI`: vector ALUs);
* Composable Kernel: `ck::kernel_gemm_xdl_*`, `ck::device_gemm*`, `ck_tile::Fmha*`: `xdl` and
  `wmma` mean matrix cores, the element type is a template argument (`ck::bhalf_t`,
  `ck::half_t`, `ck::f8_t`, `float`).

A kernel that is none of these families is not classified (family None), and a GEMM family
whose precision the name does not say is "unknown" until the op's dtype says otherwise:
unknown is never "not on tensor cores".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Precision labels, from narrowest to widest. MX / block-scaled formats are their own class:
# their peak is higher than plain fp8 on the parts that have one (B200, MI355X).
FP4 = "fp4"
MX = "mx"
FP8 = "fp8"
INT8 = "int8"
BF16 = "bf16"
FP16 = "fp16"
TF32 = "tf32"
FP32 = "fp32"
FP64 = "fp64"
UNKNOWN = "unknown"

LOW_PRECISION = frozenset({FP4, MX, FP8, INT8, BF16, FP16})
FP32_CLASSES = frozenset({TF32, FP32})

GEMM = "gemm"
CONV = "conv"
ATTENTION = "attention"


@dataclass(frozen=True)
class KernelPrecision:
    """What one kernel computes and on which units."""

    family: str | None  # GEMM / CONV / ATTENTION, None when not a matmul-like kernel
    precision: str  # one of the labels above, UNKNOWN when neither name nor op says
    matrix_cores: bool | None  # tensor cores (NVIDIA) / MFMA matrix cores (AMD); None unknown

    @property
    def label(self) -> str:
        """The class as the report words it."""
        if self.family is None:
            return "not a GEMM/conv/attention kernel"
        if self.precision == UNKNOWN:
            return "unknown precision"
        if self.precision in (FP32, FP64) and self.matrix_cores is False:
            return f"{self.precision} SIMT"
        if self.matrix_cores:
            return f"{self.precision} on matrix cores"
        return self.precision

    @property
    def low_precision(self) -> bool:
        return self.precision in LOW_PRECISION


NOT_MATMUL = KernelPrecision(None, UNKNOWN, None)

# Element-type words in template arguments and name tokens, most specific first.
_TYPE_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"mxf[468]|mxfp[468]|mxe[245]m[123]|blockscaled|block_scaled|ue8m0"), MX),
    (re.compile(r"e2m1|fp4|float4|nvf4"), FP4),
    (re.compile(r"e4m3|e5m2|float_e4m3|float_e5m2|fp8|float8|f8_t|bf8_t"), FP8),
    (re.compile(r"bfloat16|bhalf|bf16|df16b"), BF16),  # DF16b: bfloat16 in mangled names
    (
        re.compile(r"(?<![a-z])half|float16|fp16|(?<![a-z0-9])f16|_h884|h1688|hmma|tensorop_h\d"),
        FP16,
    ),
    # CUTLASS 2.x: tensorop_s1688gemm is fp32 data through TF32 MMAs, _h fp16, _d fp64
    (re.compile(r"tf32|xf32|tensorop_s\d"), TF32),
    (re.compile(r"int8|i8_t|imma|s8s8|(?<![a-z0-9])i8(?![0-9])"), INT8),
    (re.compile(r"double|fp64|dgemm|(?<![a-z0-9])f64|tensorop_d\d"), FP64),
    (re.compile(r"(?<![a-z0-9])f32(?![0-9])|fp32"), FP32),
)
# xmma/cuDNN type groups: sm90_xmma_gemm_<in><in>_<out><acc>_<epilogue>_...
_XMMA_TYPES = re.compile(
    r"(?:gemm|implicit_gemm|fprop|dgrad|wgrad|conv)\w*?_"
    r"(e4m3|e5m2|bf16|f16|fp16|tf32|f32|f64|s8|i8)(?:e4m3|e5m2|bf16|f16|fp16|tf32|f32|f64|s8|i8)?_"
)
_XMMA_TYPE = {
    "e4m3": FP8,
    "e5m2": FP8,
    "bf16": BF16,
    "f16": FP16,
    "fp16": FP16,
    "tf32": TF32,
    "f32": FP32,
    "f64": FP64,
    "s8": INT8,
    "i8": INT8,
}
# cuBLAS <arch>_<type>_<acc><mma shape>gemm_*: ampere_bf16_s16816gemm, turing_fp16_s1688gemm.
_MMA_SHAPE = re.compile(r"(?<![0-9])(?:884|1688|16816|16832|8816|161616)(?![0-9])")
_ARCH_PREFIX = re.compile(r"^(?:void )?(?:maxwell|pascal|volta|turing|ampere|ada|hopper|sm\d+)_")
# Tensile / hipBLASLt: Cijk_<A layout>_<B layout>_<types>_..._MI16x16x1_
_TENSILE = re.compile(r"^cijk_a[a-z]+_b[a-z]+_([a-z0-9]+)_")
_TENSILE_MFMA = re.compile(r"_mi\d+x\d+x\d+")
_TENSILE_TYPE = (
    ("f8b8", FP8),
    ("b8f8", FP8),
    ("f8", FP8),
    ("b8", FP8),
    ("i8", INT8),
    ("b", BF16),
    ("h", FP16),
    ("x", TF32),
    ("s", FP32),
    ("d", FP64),
)
_GEMM_WORDS = re.compile(
    r"gemm|gemv|matmul|_mm_|_mm$|(?<![a-z])mm_|_bmm|^bmm_|grouped_mm|s16816|nvjet"
)
_CONV_WORDS = re.compile(
    r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|precomputed_convolve|scudnn"
)
_ATTENTION_WORDS = re.compile(
    r"flash_fwd|flash_bwd|flashattn|flash_attn|flash::|pytorch_flash|fmha|sdpa|attn_fwd|"
    r"attn_bwd|attention|_attn_|flashinfer.*(?:prefill|decode)"
)
# Kernels named after attention or cuDNN that move or normalise data, not a matmul.
_NOT_MATMUL = re.compile(
    r"reshape_and_cache|rotary|softmax|bn_fw|bn_bw|batch_norm|batchnorm|layer_norm|layernorm|"
    r"rmsnorm|pooling|nchwtonhwc|nhwctonchw|tensor_transform|elementwise"
)
_SIMT_FP32 = re.compile(
    r"sgemm|scudnn|ffma|implicit_convolve_sgemm|precomputed_convolve_sgemm|_simt_|"
    r"gemmsn_|gemv2|gemvnsp|gemmk1|wgrad_alg|dgrad_engine|dgrad2d_|winograd"
)
# Inductor's pointwise/reduction kernels name the ops they fuse ("triton_poi_fused_mm_add"):
# only its templates (triton_tem_) and user Triton kernels named for a matmul are GEMMs.
_TRITON_GEMM = re.compile(
    r"^triton_tem_.*mm|^triton_(?!poi_|red_|per_|for_)\w*(?:matmul|_mm_|gemm|bmm|_mm$)"
)


def classify_kernel(name: str, op_dtype: str | None = None) -> KernelPrecision:
    """The class of kernel `name`; `op_dtype` is the launching op's first floating input
    type as the trace writes it ("c10::BFloat16", "float"), used where the name is silent."""
    low = name.lower()
    family = _family(low)
    if family is None:
        return NOT_MATMUL
    tensile = _TENSILE.match(low)
    if tensile is not None:
        return KernelPrecision(
            family, _tensile_type(tensile.group(1)), _TENSILE_MFMA.search(low) is not None
        )
    precision = _name_type(low)
    matrix = _matrix_cores(low, precision)
    if precision == UNKNOWN:
        precision = dtype_precision(op_dtype)
    if matrix is None and precision in LOW_PRECISION and family in (GEMM, ATTENTION):
        # A 16-/8-/4-bit GEMM or attention kernel (tl.dot, TRT-LLM, triton_kernels) runs on
        # tensor/matrix cores; the one SIMT exception, a GEMV, was recognised above.
        matrix = True
    if matrix is None and precision == UNKNOWN and low.startswith("triton_tem_"):
        # Inductor's GEMM templates (max-autotune) are tl.dot: tensor cores unless the inputs
        # are fp32 with TF32 off, which an fp32 op dtype would have said.
        matrix = True
    if precision == FP32 and matrix is True:
        # fp32 inputs on tensor cores are TF32 on NVIDIA; on AMD MFMA fp32 is fp32 (Tensile
        # names say so above, CK kernels too), so only NVIDIA-style names get here.
        precision = TF32 if not low.startswith(("ck::", "ck_tile", "void ck::")) else FP32
    return KernelPrecision(family, precision, matrix)


def dtype_precision(op_dtype: str | None) -> str:
    """An op's "Input type" as a precision label (UNKNOWN when absent or not floating)."""
    if not op_dtype:
        return UNKNOWN
    t = op_dtype.lower().replace("c10::", "").replace("torch.", "")
    if t.startswith("float8") or t in ("float8_e4m3fn", "float8_e5m2"):
        return FP8
    if t.startswith("float4"):
        return FP4
    return {
        "bfloat16": BF16,
        "half": FP16,
        "float16": FP16,
        "float": FP32,
        "float32": FP32,
        "double": FP64,
        "float64": FP64,
    }.get(t, UNKNOWN)


def _family(low: str) -> str | None:
    if _NOT_MATMUL.search(low):
        return None
    if _ATTENTION_WORDS.search(low):
        return ATTENTION
    if low.startswith("triton"):
        return GEMM if _TRITON_GEMM.match(low) else None
    if low.startswith("cijk_"):
        return GEMM
    if _CONV_WORDS.search(low):
        return CONV
    if _GEMM_WORDS.search(low) or low.startswith("nvjet") or "xmma" in low or "gmma" in low:
        return GEMM
    if "tensorop" in low or _MMA_SHAPE.search(low):
        return GEMM
    if low.startswith(("ck::", "void ck::", "ck_tile")) and ("gemm" in low or "xdl" in low):
        return GEMM
    return None


def _name_type(low: str) -> str:
    xmma = _XMMA_TYPES.search(low)
    if xmma is not None and ("xmma" in low or "cutlass" in low or "cudnn" in low):
        return _XMMA_TYPE[xmma.group(1)]
    # The first type a name spells is its inputs' (TRT-LLM "bmm_Bfloat16_MxE2m1..." is bf16
    # activations times MXFP4 weights, computed in bf16; "fmhaSm100a..QkvE4m3OBfloat16" reads
    # fp8 Q/K/V and writes bf16), so the earliest match wins, not the narrowest format.
    found = [(m.start(), label) for pattern, label in _TYPE_WORDS if (m := pattern.search(low))]
    if found:
        return min(found, key=lambda hit: hit[0])[1]
    if "deep_gemm" in low or "fp8_gemm" in low:
        return FP8
    if _SIMT_FP32.search(low) or re.search(r"<float[,>]|\(float\b", low):
        return FP32
    return UNKNOWN


def _matrix_cores(low: str, precision: str) -> bool | None:
    if "ffma" in low or "_simt_" in low or re.search(r"(?:^|_)sgemm|scudnn|gemv", low):
        return False
    if _SIMT_FP32.search(low) and precision in (FP32, UNKNOWN):
        return False
    tensor = (
        "tensorop",
        "xmma",
        "gmma",
        "hmma",
        "imma",
        "nvjet",
        "flash",
        "fmha",
        "sdpa",
        "xdl",
        "wmma",
        "mfma",
        "deep_gemm",
        "fp8_gemm",
        # torch-tb-profiler's cuDNN tensor-core convolution names
        "dgrad_1x1_stride_2x2",
        "first_layer_wgrad_kernel",
        "conv1x1",
        "conv2d_c1_k1",
        "direct_group",
    )
    if any(word in low for word in tensor) or _MMA_SHAPE.search(low):
        return True
    if precision in (FP8, FP4, MX):
        return True  # no SIMT path computes in these formats
    if _ARCH_PREFIX.match(low) and precision in (BF16, FP16):
        return True
    return None


def _tensile_type(token: str) -> str:
    for prefix, label in _TENSILE_TYPE:
        if token.startswith(prefix):
            return label
    return UNKNOWN


def is_tensor_core_kernel(name: str) -> bool:
    """A kernel known to run on tensor cores (NVIDIA) or MFMA matrix cores (AMD)."""
    return classify_kernel(name).matrix_cores is True

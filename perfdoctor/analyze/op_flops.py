"""FLOPs and bytes of one aten op from its recorded shapes (record_shapes' "Input Dims").

The formulas are torch.utils.flop_counter's (2 FLOPs per multiply-add, bias and softmax not
counted), so a trace's count agrees with FlopCounterMode on the same ops, with two
differences that are stated where they apply:

* causal attention does half the work of the full score matrix; FlopCounterMode counts it
  whole, which is how MFU above 100% gets reported on causal LLM training. Here the count is
  halved when the op's recorded arguments say `is_causal` (the FlashAttention papers' count);
* a convolution's output size needs its stride, padding and dilation. torch >= 2.1 records
  them in Concrete Inputs and the forward computes its output from them; older traces leave
  list arguments empty. The backward reads the output size from the gradient's shape (under
  every name torch has given it: convolution_backward, cudnn_/mkldnn_/miopen_convolution_
  backward, thnn_conv2d_backward, the double backward), and a training trace's forward takes
  it from the backward of the same input and weight shapes (`conv_out`); otherwise the
  forward assumes stride 1 and "same" padding (the output as large as the input) and says
  so (a V100 ResNet-50 trace's strided convolutions came out ~4x high that way).

Bytes are the least traffic the op needs: each input read once and the output written once,
in the recorded dtypes (the roofline's arithmetic intensity). None when a dtype is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.analyze.op_names import CONV_OPS, GROUPED_MM_OPS

CONV_SAME_PADDING = "convolution output assumed as large as its input (stride 1, same padding)"
CONV_BOTH_GRADIENTS = (
    "convolution backward assumed to compute both the input and the weight gradient (a first "
    "layer, whose input needs none, is counted high)"
)
CAUSAL_HALVED = "causal attention: half the score matrix counted"

ELEMENT_BYTES = {
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "double": 8,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "signed char": 1,
    "unsigned char": 1,
    "int": 4,
}

_MM = frozenset({"aten::mm", "aten::_int_mm"})
_ADDMM = frozenset({"aten::addmm", "aten::_addmm_activation"})
_BMM = frozenset({"aten::bmm"})
_BADDBMM = frozenset({"aten::baddbmm", "aten::addbmm"})
_SCALED_MM = frozenset({"aten::_scaled_mm"})
_MV = frozenset({"aten::mv"})
_ADDMV = frozenset({"aten::addmv"})
# Attention op -> (layout of q/k/v: "bhsd" or "bshd", index of is_causal in Concrete Inputs,
# backward?, index of the first of q, k, v in the inputs). _efficient_attention_* take a
# custom_mask_type (1, 2: causal) in place of is_causal.
_ATTENTION: dict[str, tuple[str, int, bool, int]] = {
    "aten::scaled_dot_product_attention": ("bhsd", 5, False, 0),
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 4, False, 0),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4, False, 0),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 6, False, 0),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 6, False, 0),
    "aten::_flash_attention_forward": ("bshd", 8, False, 0),
    "aten::_efficient_attention_forward": ("bshd", 9, False, 0),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", 11, True, 1),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", 7, True, 1),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", 11, True, 1),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", 14, True, 1),
    "aten::_flash_attention_backward": ("bshd", 11, True, 1),
    "aten::_efficient_attention_backward": ("bshd", 14, True, 1),
}
_CUSTOM_MASK_OPS = frozenset(
    {"aten::_efficient_attention_forward", "aten::_efficient_attention_backward"}
)
_CONV_TRANSPOSED = frozenset(
    {
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::cudnn_convolution_transpose",
    }
)
# Backward convolution -> positions of (grad_output, input, weight) in its recorded inputs:
# the old cudnn/mkldnn/miopen ops take (self, grad_output, weight, ...), the double backward
# (ggI, ggW, ggb, gO, weight, self, ...); the autograd nodes count when they carry all three.
_CONV_BACKWARD_ARGS: dict[str, tuple[int, int, int]] = {
    "aten::convolution_backward": (0, 1, 2),
    "aten::_slow_conv2d_backward": (0, 1, 2),
    "aten::thnn_conv2d_backward": (0, 1, 2),
    "aten::cudnn_convolution_backward": (1, 0, 2),
    "aten::miopen_convolution_backward": (1, 0, 2),
    "aten::mkldnn_convolution_backward": (1, 0, 2),
    "aten::_convolution_double_backward": (3, 5, 4),
    "CudnnConvolutionBackward": (0, 1, 2),
    "CudnnConvolutionBackward0": (0, 1, 2),
    "ConvolutionBackward0": (0, 1, 2),
    "ThnnConv2DBackward": (0, 1, 2),
    "MkldnnConvolutionBackward": (0, 1, 2),
}
_CONV_BACKWARD = frozenset(_CONV_BACKWARD_ARGS)
# Forward convolution -> positions of (stride, padding, dilation) in Concrete Inputs (torch
# >= 2.1 records int lists there as "[2, 2]"). cudnn_convolution moved its bias out in torch
# 1.8: (self, weight, padding, stride, dilation, ...) then, (self, weight, bias, padding,
# ...) before; _geometry tells them apart by which position holds a list.
_CONV_GEOMETRY_ARGS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "aten::conv1d": ((3, 4, 5),),
    "aten::conv2d": ((3, 4, 5),),
    "aten::conv3d": ((3, 4, 5),),
    "aten::convolution": ((3, 4, 5),),
    "aten::_convolution": ((3, 4, 5),),
    "aten::cudnn_convolution": ((3, 2, 4), (4, 3, 5)),
    "aten::miopen_convolution": ((4, 3, 5), (3, 2, 4)),
    "aten::mkldnn_convolution": ((4, 3, 5),),
    "aten::_slow_conv2d_forward": ((4, 5, -1),),
    "aten::slow_conv3d_forward": ((4, 5, -1),),
}
# convolution / _convolution carry `transposed` as their 7th argument.
_CONV_TRANSPOSED_ARG = {"aten::convolution": 6, "aten::_convolution": 6}

FLOP_OPS = (
    _MM
    | _ADDMM
    | _BMM
    | _BADDBMM
    | _SCALED_MM
    | _MV
    | _ADDMV
    | frozenset(_ATTENTION)
    | CONV_OPS
    | GROUPED_MM_OPS
    | {"aten::matmul", "aten::linear"}
)


@dataclass(frozen=True)
class OpFlops:
    flops: float
    bytes: float | None  # least traffic: inputs read once, output written once
    dtype: str | None  # the first floating input type, as the trace writes it
    assumption: str | None = None


def op_flops(
    name: str,
    types: Sequence[Any],
    dims: Sequence[Any],
    concrete: Sequence[Any] = (),
    conv_out: Sequence[int] | None = None,
) -> OpFlops | None:
    """FLOPs of one op, or None when its shapes do not give them. `conv_out`: a forward
    convolution's output shape when known from elsewhere (its backward's gradient)."""
    shapes = [d if _is_shape(d) else None for d in dims]
    found: tuple[float, list[int] | None, str | None] | None
    try:
        if name in CONV_OPS and conv_out is not None and name not in _CONV_BACKWARD:
            found = _conv_known(shapes, list(conv_out))
        else:
            found = _count(name, shapes, list(concrete))
    except (IndexError, TypeError, ValueError):
        return None  # shapes that do not fit the op's schema (an old or odd trace)
    if found is None:
        return None
    flops, out_shape, assumption = found
    dtype = next((t for t in types if t in ELEMENT_BYTES and t != "int"), None)
    return OpFlops(flops, _bytes(types, shapes, out_shape), dtype, assumption)


def _count(
    name: str, s: list[list[int] | None], concrete: list[Any]
) -> tuple[float, list[int] | None, str | None] | None:
    if name in _MM or name in _SCALED_MM:
        (m, k), (_, n) = _dims(s[0], 2), _dims(s[1], 2)
        return 2.0 * m * k * n, [m, n], None
    if name in _ADDMM:
        (m, k), (_, n) = _dims(s[1], 2), _dims(s[2], 2)
        return 2.0 * m * k * n, [m, n], None
    if name in _BMM:
        (b, m, k), (_, _, n) = _dims(s[0], 3), _dims(s[1], 3)
        return 2.0 * b * m * k * n, [b, m, n], None
    if name in _BADDBMM:
        (b, m, k), (_, _, n) = _dims(s[1], 3), _dims(s[2], 3)
        return 2.0 * b * m * k * n, [b, m, n], None
    if name in _MV:
        m, k = _dims(s[0], 2)
        return 2.0 * m * k, [m], None
    if name in _ADDMV:
        m, k = _dims(s[1], 2)
        return 2.0 * m * k, [m], None
    if name == "aten::linear":
        x, (n, k) = _shape(s[0]), _dims(s[1], 2)
        rows = math.prod(x[:-1])
        return 2.0 * rows * k * n, [*x[:-1], n], None
    if name == "aten::matmul":
        return _matmul(_shape(s[0]), _shape(s[1]))
    if name in GROUPED_MM_OPS:
        return _grouped(_shape(s[0]), _shape(s[1]))
    if name in _ATTENTION:
        return _attention(name, s, concrete)
    if name in CONV_OPS:
        return _conv(name, s, concrete)
    return None


def _matmul(a: list[int], b: list[int]) -> tuple[float, list[int], None]:
    if len(a) == 1 and len(b) == 1:
        return 2.0 * a[0], [], None
    if len(b) == 1:
        return 2.0 * math.prod(a), a[:-1], None
    if len(a) == 1:
        return 2.0 * math.prod(b), [*b[:-2], b[-1]], None
    batch = _broadcast(a[:-2], b[:-2])
    m, k, n = a[-2], a[-1], b[-1]
    return 2.0 * math.prod(batch) * m * k * n, [*batch, m, n], None


def _grouped(a: list[int], b: list[int]) -> tuple[float, list[int], None]:
    """torch._grouped_mm: each row of a 2-D `a` goes through one group's [K, N] matrix, so the
    total is that of one [M_total, K] x [K, N] GEMM whatever the offsets; 3-D x 3-D is a bmm;
    2-D x 2-D splits K (the weight gradient) and is one GEMM too."""
    if len(a) == 2 and len(b) == 3:
        return 2.0 * a[0] * a[1] * b[2], [a[0], b[2]], None
    if len(a) == 3 and len(b) == 3:
        return 2.0 * a[0] * a[1] * a[2] * b[2], [a[0], a[1], b[2]], None
    if len(a) == 2 and len(b) == 2:
        return 2.0 * a[0] * a[1] * b[1], [a[0], b[1]], None
    if len(a) == 3 and len(b) == 2:
        return 2.0 * a[1] * a[2] * b[0], [a[1], b[0]], None
    raise ValueError("grouped mm shapes")


def _attention(
    name: str, s: list[list[int] | None], concrete: list[Any]
) -> tuple[float, list[int], str | None]:
    layout, causal_at, backward, first = _ATTENTION[name]
    q, k, v = (_shape(s[first + i]) for i in range(3))
    if layout == "bshd":
        q, k, v = ([x[0], x[2], x[1], x[3]] for x in (q, k, v))
    b, h, sq, d = q
    sk, dv = k[2], v[3]
    score = b * h * sq * sk
    # forward: QK^T and PV; backward (flop_counter's sdpa_backward): the scores again, then
    # dP, dV, dQ, dK.
    flops = 2.0 * score * (d + dv) if not backward else 2.0 * score * (3 * d + 2 * dv)
    causal = _causal(name, concrete, causal_at)
    out = [b, h, sq, dv]
    if causal:
        return flops / 2.0, out, CAUSAL_HALVED
    return flops, out, None


def _causal(name: str, concrete: list[Any], at: int) -> bool:
    if at >= len(concrete):
        return False
    value = str(concrete[at]).strip()
    if name in _CUSTOM_MASK_OPS:
        return value in ("1", "2")
    return value.lower() == "true"


def _conv(
    name: str, s: list[list[int] | None], concrete: list[Any]
) -> tuple[float, list[int], str | None]:
    if name in _CONV_BACKWARD:
        g, i, k = _CONV_BACKWARD_ARGS[name]
        grad, x, w = _shape(s[g]), _shape(s[i]), _shape(s[k])
        forward = 2.0 * x[0] * math.prod(grad[2:]) * w[0] * math.prod(w[1:])
        # grad_input and grad_weight, each one forward's worth (flop_counter's
        # conv_backward_flop with both outputs wanted, as autograd asks for a trained conv).
        return 2.0 * forward, x, CONV_BOTH_GRADIENTS
    x, w = _shape(s[0]), _shape(s[1])
    at = _CONV_TRANSPOSED_ARG.get(name)
    transposed = name in _CONV_TRANSPOSED or (
        at is not None and at < len(concrete) and str(concrete[at]).lower() == "true"
    )
    if transposed:
        # Each input point scatters through the whole filter: [C_in, C_out/g, *k].
        return 2.0 * x[0] * math.prod(x[2:]) * math.prod(w), x, CONV_SAME_PADDING
    geometry = _geometry(name, concrete, len(x) - 2)
    if geometry is not None:
        out = [x[0], w[0], *_conv_spatial(x[2:], w[2:], *geometry)]
        return 2.0 * x[0] * math.prod(out[2:]) * w[0] * math.prod(w[1:]), out, None
    out = [x[0], w[0], *x[2:]]
    return 2.0 * x[0] * math.prod(x[2:]) * w[0] * math.prod(w[1:]), out, CONV_SAME_PADDING


def _int_list(value: Any, rank: int) -> list[int] | None:
    """A recorded int list ("[2, 2]", "[1]" broadcast to the rank), None when it is not."""
    if isinstance(value, list):
        items = value
    elif isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        items = [v.strip() for v in value[1:-1].split(",") if v.strip()]
    else:
        return None
    try:
        ints = [int(v) for v in items]
    except (TypeError, ValueError):
        return None
    if len(ints) == 1:
        ints = ints * rank
    return ints if len(ints) == rank else None


def _geometry(
    name: str, concrete: list[Any], rank: int
) -> tuple[list[int], list[int], list[int]] | None:
    """(stride, padding, dilation) of a forward convolution from its concrete args."""
    for stride_at, pad_at, dil_at in _CONV_GEOMETRY_ARGS.get(name, ()):
        if max(stride_at, pad_at) >= len(concrete):
            continue
        stride = _int_list(concrete[stride_at], rank)
        padding = _int_list(concrete[pad_at], rank)
        dilation = _int_list(concrete[dil_at], rank) if 0 <= dil_at < len(concrete) else [1] * rank
        if stride is not None and padding is not None and dilation is not None:
            return stride, padding, dilation
    return None


def _conv_spatial(
    size: list[int], kernel: list[int], stride: list[int], pad: list[int], dil: list[int]
) -> list[int]:
    """Output size per spatial dim: floor((in + 2p - d(k - 1) - 1) / s) + 1."""
    out = [
        (n + 2 * p - d * (k - 1) - 1) // max(st, 1) + 1
        for n, k, st, p, d in zip(size, kernel, stride, pad, dil, strict=True)
    ]
    if any(o <= 0 for o in out):
        raise ValueError("a convolution with no output")
    return out


def _conv_known(s: list[list[int] | None], out: list[int]) -> tuple[float, list[int], str | None]:
    x, w = _shape(s[0]), _shape(s[1])
    return 2.0 * x[0] * math.prod(out[2:]) * w[0] * math.prod(w[1:]), out, None


def conv_backward_key(
    name: str, dims: Sequence[Any]
) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], list[int]] | None:
    """((input shape, weight shape), gradient shape) of a backward convolution: the key to
    find its forward by, and that forward's output shape. None for any other op."""
    at = _CONV_BACKWARD_ARGS.get(name)
    if at is None or len(dims) <= max(at):
        return None
    grad, x, w = (dims[i] for i in at)
    if not all(_is_shape(d) and d for d in (grad, x, w)):
        return None
    return (tuple(x), tuple(w)), list(grad)


def _bytes(
    types: Sequence[Any], shapes: list[list[int] | None], out: list[int] | None
) -> float | None:
    total = 0.0
    out_size = None
    for t, shape in zip(types, shapes, strict=False):
        if shape is None or not shape:
            continue
        size = ELEMENT_BYTES.get(t) if isinstance(t, str) else None
        if size is None:
            return None
        total += math.prod(shape) * size
        out_size = out_size or size
    if out is not None and out_size is not None:
        total += math.prod(out) * out_size
    return total


def _is_shape(d: Any) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) and x >= 0 for x in d)


def _shape(d: list[int] | None) -> list[int]:
    if d is None or not d:
        raise ValueError("no shape")
    return d


def _dims(d: list[int] | None, rank: int) -> list[int]:
    shape = _shape(d)
    if len(shape) != rank:
        raise ValueError(f"rank {len(shape)}, expected {rank}")
    return shape


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [max(x, y) for x, y in zip(a, b, strict=True)]

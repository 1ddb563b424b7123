"""FLOPs and bytes of one aten op from its recorded shapes (record_shapes' "Input Dims").

The formulas are torch.utils.flop_counter's (2 FLOPs per multiply-add, bias and softmax not
counted), so a trace's count agrees with FlopCounterMode on the same ops, with two
differences that are stated where they apply:

* causal attention does half the work of the full score matrix; FlopCounterMode counts it
  whole, which is how MFU above 100% gets reported on causal LLM training. Here the count is
  halved when the op's recorded arguments say `is_causal` (the FlashAttention papers' count);
* a convolution's output size needs its stride and padding, which a trace records only as
  list arguments it leaves empty. The backward reads the output size from the gradient's
  shape, and a training trace's forward takes it from the backward of the same input and
  weight shapes (`conv_out`); otherwise the forward assumes stride 1 and "same" padding (the
  output as large as the input) and says so.

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
_CONV_BACKWARD = frozenset({"aten::convolution_backward", "aten::_slow_conv2d_backward"})
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
        grad, x, w = _shape(s[0]), _shape(s[1]), _shape(s[2])
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
    out = [x[0], w[0], *x[2:]]
    return 2.0 * x[0] * math.prod(x[2:]) * w[0] * math.prod(w[1:]), out, CONV_SAME_PADDING


def _conv_known(s: list[list[int] | None], out: list[int]) -> tuple[float, list[int], str | None]:
    x, w = _shape(s[0]), _shape(s[1])
    return 2.0 * x[0] * math.prod(out[2:]) * w[0] * math.prod(w[1:]), out, None


def conv_backward_key(dims: Sequence[Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input shape, weight shape) of a convolution_backward, to find its forward by."""
    if len(dims) < 3 or not all(_is_shape(d) and d for d in dims[:3]):
        return None
    return tuple(dims[1]), tuple(dims[2])


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

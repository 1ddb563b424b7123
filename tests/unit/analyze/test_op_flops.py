"""FLOPs from recorded shapes (analyze/op_flops.py) agree with torch.utils.flop_counter on the
same ops, except where they should not: causal attention is halved."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from perfdoctor.analyze.op_flops import CAUSAL_HALVED, CONV_SAME_PADDING, op_flops

F32 = "float"
BF16 = "c10::BFloat16"


def counted(fn: Any, *args: Any) -> int:
    with FlopCounterMode(display=False) as mode:
        fn(*args)
    return int(mode.get_total_flops())


def shapes(*tensors: Any) -> list[list[int]]:
    return [list(t.shape) if isinstance(t, torch.Tensor) else [] for t in tensors]


def test_gemms_agree_with_flop_counter() -> None:
    a, b = torch.randn(6, 5), torch.randn(5, 7)
    bias = torch.randn(7)
    x, y = torch.randn(3, 6, 5), torch.randn(3, 5, 7)
    out3 = torch.randn(3, 6, 7)
    cases = [
        ("aten::mm", [a, b], lambda: torch.mm(a, b)),
        ("aten::addmm", [bias, a, b, None, None], lambda: torch.addmm(bias, a, b)),
        ("aten::bmm", [x, y], lambda: torch.bmm(x, y)),
        ("aten::baddbmm", [out3, x, y, None, None], lambda: torch.baddbmm(out3, x, y)),
    ]
    for name, inputs, fn in cases:
        found = op_flops(name, [F32] * len(inputs), shapes(*inputs))
        assert found is not None and found.flops == counted(fn), name
        assert found.dtype == F32 and found.bytes is not None and found.bytes > 0


def test_linear_and_broadcast_matmul_agree_with_flop_counter() -> None:
    x, w, bias = torch.randn(2, 4, 8), torch.randn(16, 8), torch.randn(16)
    found = op_flops("aten::linear", [F32] * 3, shapes(x, w, bias))
    assert found is not None and found.flops == counted(F.linear, x, w, bias)
    p, q = torch.randn(3, 1, 4, 5), torch.randn(2, 5, 6)
    found = op_flops("aten::matmul", [F32] * 2, shapes(p, q))
    assert found is not None and found.flops == counted(torch.matmul, p, q)


def test_conv_forward_assumes_same_padding_and_backward_is_exact() -> None:
    x = torch.randn(2, 3, 10, 10, requires_grad=True)
    w = torch.randn(8, 3, 3, 3, requires_grad=True)
    forward = op_flops("aten::convolution", [F32] * 2, shapes(x, w))
    assert forward is not None and forward.assumption == CONV_SAME_PADDING
    # stride 1, padding 1 keeps 10x10: the assumption holds and the counts agree.
    assert forward.flops == counted(lambda: F.conv2d(x, w, padding=1))
    # A strided conv: the backward reads the output size from the gradient, exactly.
    out = F.conv2d(x, w, stride=2)
    grad = torch.ones_like(out)
    with FlopCounterMode(display=False) as mode:
        out.backward(grad)
    backward = op_flops("aten::convolution_backward", [F32] * 3, shapes(grad, x, w))
    assert backward is not None and backward.flops == mode.get_total_flops()


def test_grouped_conv_counts_channels_per_group() -> None:
    x, w = torch.randn(1, 8, 6, 6), torch.randn(8, 2, 3, 3)  # groups=4
    found = op_flops("aten::convolution", [F32] * 2, shapes(x, w))
    assert found is not None
    assert found.flops == counted(lambda: F.conv2d(x, w, padding=1, groups=4))


def test_attention_forward_backward_and_the_causal_half() -> None:
    q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 32, 8), torch.randn(2, 4, 32, 8)
    dims = shapes(q, k, v)
    full = sdpa_flop_count(q.shape, k.shape, v.shape)
    found = op_flops("aten::_scaled_dot_product_flash_attention", [BF16] * 3, dims)
    assert found is not None and found.flops == full and found.assumption is None
    causal = op_flops(
        "aten::_scaled_dot_product_flash_attention",
        [BF16] * 3 + ["Scalar"] * 2,
        [*dims, [], []],
        ["", "", "", "0.", "True"],
    )
    assert causal is not None and causal.flops == full / 2 and causal.assumption == CAUSAL_HALVED
    # _flash_attention_forward records q/k/v as [batch, seq, heads, dim].
    bshd = [[s[0], s[2], s[1], s[3]] for s in dims]
    inner = op_flops("aten::_flash_attention_forward", [BF16] * 3, bshd)
    assert inner is not None and inner.flops == full
    out = torch.randn(2, 4, 16, 8)
    backward = op_flops(
        "aten::_scaled_dot_product_flash_attention_backward", [BF16] * 5, shapes(out, q, k, v, out)
    )
    assert backward is not None
    assert backward.flops == sdpa_backward_flop_count(out.shape, q.shape, k.shape, v.shape)


def test_sdpa_on_cpu_is_counted_by_flop_counters_formula() -> None:
    """FlopCounterMode has no formula for the CPU kernel (_scaled_dot_product_flash_attention
    _for_cpu: it counts 0 in torch 2.13); the trace's count uses its sdpa formula all the same."""
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    for name in (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ):
        found = op_flops(name, [F32] * 3, shapes(q, k, v))
        assert found is not None and found.flops == sdpa_flop_count(q.shape, k.shape, v.shape)


@pytest.mark.parametrize(
    ("a", "b", "flops"),
    [
        ([12, 8], [3, 8, 5], 2 * 12 * 8 * 5),  # rows routed to 3 experts: one [12,8]x[8,5]
        ([3, 4, 8], [3, 8, 5], 2 * 3 * 4 * 8 * 5),
        ([5, 12], [12, 8], 2 * 5 * 12 * 8),  # the weight gradient, K split by the offsets
    ],
)
def test_grouped_mm(a: list[int], b: list[int], flops: int) -> None:
    found = op_flops("aten::_grouped_mm", [BF16, BF16], [a, b])
    assert found is not None and found.flops == flops


def test_missing_or_odd_shapes_give_none() -> None:
    assert op_flops("aten::mm", [F32, F32], [[], [3, 4]]) is None
    assert op_flops("aten::mm", [F32, F32], [[2, 3, 4], [4, 5]]) is None
    assert op_flops("aten::relu", [F32], [[3, 4]]) is None
    unknown_dtype = op_flops("aten::mm", ["weird", "weird"], [[2, 3], [3, 4]])
    assert unknown_dtype is not None and unknown_dtype.bytes is None

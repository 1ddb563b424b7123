"""aten op names the analysis groups by: convolutions and matrix multiplications.

One list for the trace decoder (which ops get their record_shapes payload decoded) and the
op-share facts (which ops count as conv or matmul time).
"""

from __future__ import annotations

CONV_OPS = frozenset(
    {
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution",
        "aten::_convolution",
        "aten::convolution_backward",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::mkldnn_convolution",
        "aten::miopen_convolution",
        "aten::_slow_conv2d_forward",
        "aten::_slow_conv2d_backward",
        "aten::slow_conv3d_forward",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::_nnpack_spatial_convolution",
        # Backward convolutions under the names older torch records (2021-era traces: the
        # V100 ResNet-50 ones counted none of them), and the autograd nodes around them.
        "aten::cudnn_convolution_backward",
        "aten::miopen_convolution_backward",
        "aten::mkldnn_convolution_backward",
        "aten::thnn_conv2d_backward",
        "aten::_convolution_double_backward",
        "CudnnConvolutionBackward",
        "CudnnConvolutionBackward0",
        "ConvolutionBackward0",
        "ThnnConv2DBackward",
        "MkldnnConvolutionBackward",
    }
)
# Embedding lookups: their weight's rows are a vocabulary (or a position table).
EMBEDDING_OPS = frozenset({"aten::embedding", "aten::embedding_bag", "aten::_embedding_bag"})
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_addmm_activation",
        "aten::addmv",
        "aten::mv",
        "aten::_scaled_mm",
        "aten::_int_mm",
    }
)
# Attention ops whose shapes give their FLOPs (op_flops.py); forward and backward.
ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_backward",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    }
)
# Grouped GEMMs (MoE experts): one op, many GEMMs, whose sizes the offsets give.
GROUPED_MM_OPS = frozenset({"aten::_grouped_mm", "aten::_scaled_grouped_mm"})

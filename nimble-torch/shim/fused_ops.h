// Nimble's fused custom ops (nimble::conv2d_fused, nimble::conv2d_relu, nimble::squeeze_excite: fused_ops.cpp;
// nimble::linear, nimble::attention_mask: linear_ops.cpp) and the TorchScript rewrites that put
// them into a frozen graph.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace nimble {

// Replaces squeeze-and-excitation blocks (adaptive_avg_pool2d to 1×1, 1×1 convolution, SiLU or
// ReLU, 1×1 convolution, sigmoid, multiplication with the pooled input) by
// nimble::squeeze_excite. Run it before cuDNN's conv+ReLU fusion, which would take the block's
// first convolution.
void fuse_squeeze_excite(std::shared_ptr<torch::jit::Graph>& graph);

// Hands cuDNN's fused grouped 2-D convolution+ReLU and convolution+add+ReLU (FuseFrozenConvAddRelu's
// aten::cudnn_convolution_relu and aten::cudnn_convolution_add_relu with a unit alpha) to
// nimble::conv2d_relu, which times them against conv2d_fused's way and keeps the faster. Run it
// right after FuseFrozenConvAddRelu.
void time_cudnn_conv_relu(std::shared_ptr<torch::jit::Graph>& graph);

// Replaces convolutions followed by SiLU, ReLU, ReLU6 or a residual add by nimble::conv2d_fused.
// Run it after cuDNN's conv(+add)+ReLU fusion, which does those in one cuDNN call.
void fuse_conv_tails(std::shared_ptr<torch::jit::Graph>& graph);

// Replaces linear layers by nimble::linear (whose CUDA kernel chooses its GEMM by timing), with
// a following GELU, ReLU or SiLU, or a residual add the layer's input is computed from, fused in;
// also transformers' Conv1D layers (addmm with unit factors).
// Run it after the frozen graph's optimizations, which merge linear layers that share an input.
void fuse_linear_tails(std::shared_ptr<torch::jit::Graph>& graph);

// Passes every scaled_dot_product_attention's mask through nimble::attention_mask, which gives
// the fused attention kernels a mask they take (the frozen graph has no dtypes or strides to
// decide it here).
void convert_attention_masks(std::shared_ptr<torch::jit::Graph>& graph);

// How many of Nimble's fused ops the graph has.
int fused_op_count(const torch::jit::Graph& graph);

}  // namespace nimble

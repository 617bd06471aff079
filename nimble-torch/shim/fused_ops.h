// Nimble's fused custom ops (nimble::conv2d_fused, nimble::squeeze_excite) and the TorchScript
// rewrites that put them into a frozen graph. See fused_ops.cpp.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>

namespace nimble {

// Replaces squeeze-and-excitation blocks (adaptive_avg_pool2d to 1×1, 1×1 convolution, SiLU or
// ReLU, 1×1 convolution, sigmoid, multiplication with the pooled input) by
// nimble::squeeze_excite. Run it before cuDNN's conv+ReLU fusion, which would take the block's
// first convolution.
void fuse_squeeze_excite(std::shared_ptr<torch::jit::Graph>& graph);

// Replaces convolutions followed by SiLU, ReLU, ReLU6 or a residual add by nimble::conv2d_fused.
// Run it after cuDNN's conv(+add)+ReLU fusion, which does those in one cuDNN call.
void fuse_conv_tails(std::shared_ptr<torch::jit::Graph>& graph);

// How many of Nimble's fused ops the graph has.
int fused_op_count(const torch::jit::Graph& graph);

}  // namespace nimble

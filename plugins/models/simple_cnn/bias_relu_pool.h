#pragma once
// max_pool2d(relu(y + bias), 2) with its gradient, for the convolutions of
// SimpleCNN: on CUDA (when this build has the kernels, see
// bias_relu_pool_kernels.h) one kernel forward and one backward, instead of
// the bias add, ReLU, max-pool and their three backward kernels of the eager
// composite; elsewhere the composite LibTorch ops.

#include <torch/types.h>

namespace simple_cnn {

/// Whether this build has the CUDA kernels.
bool FusedKernelsBuilt() noexcept;

/// y: (N, C, H, W), the convolution's output without its bias; bias: (C).
/// The fused path takes CUDA tensors of float, bfloat16 or half with even H
/// and W, in NCHW or channels_last; anything else goes the composite way.
torch::Tensor BiasReluMaxPool(const torch::Tensor& y, const torch::Tensor& bias);

}  // namespace simple_cnn

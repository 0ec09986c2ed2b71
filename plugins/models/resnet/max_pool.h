#pragma once
// The ResNet stem's max pool: on CUDA with `fused`, this plugin's kernels
// (max_pool_kernels.h: the window's argmax kept as a byte, a backward
// several times faster than LibTorch's at the stem's shape); elsewhere, or
// for what they do not take, torch::max_pool2d. Same values and gradients.

#include <torch/types.h>

#include <cstdint>

namespace resnet {

torch::Tensor MaxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding, bool fused);

}  // namespace resnet

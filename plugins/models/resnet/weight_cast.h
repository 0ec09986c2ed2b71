#pragma once
// Autocast's weight casts of a whole network at once: the convolutions'
// fp32 weights in autocast's type (bf16 or half) by one CUDA kernel, and
// their gradients back to fp32 by one more in the backward
// (weight_cast_kernels.h), where LibTorch's autocast casts each weight alone,
// one kernel each way per weight.

#include <torch/types.h>

#include <vector>

namespace resnet {

/// The weights in `type`, each with its weight's sizes and strides, and a
/// gradient path back to the fp32 weights (gradients in the weights' own
/// strides). One kernel each way where this build has the kernels and every
/// weight is a dense fp32 tensor on one CUDA device; else each weight's
/// `.to(type)`.
std::vector<torch::Tensor> CastWeights(const std::vector<torch::Tensor>& weights, at::ScalarType type);

}  // namespace resnet

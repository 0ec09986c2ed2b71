#pragma once
// The ResNets' classifier (their fc layer): on CUDA, for at most
// kernels::kMaxClasses classes, this plugin's kernels (classifier_kernels.h:
// one kernel forward with fp32 logits whatever the activations' type, one
// backward for every gradient); elsewhere, or for what they do not take,
// torch::nn::functional::linear (under autocast: its casts and cuBLAS in
// bf16 or half). The kernels sum in fp32 and round only the input's gradient,
// to the input's type: at least as close to the exact values as autocast's
// path, whose logits and gradients are rounded to bf16 or half.

#include <torch/types.h>

namespace resnet {

/// x (n, c) W^T + bias; `bias` may be undefined.
torch::Tensor Classifier(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// Whether the kernels take these tensors (CUDA, x 2-D and dense in float,
/// bfloat16 or half, the weight and bias fp32 on x's device, few classes).
bool ClassifierApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace resnet

#pragma once
// CUDA kernels of the ResNets' classifier, their fc layer (y = x W^T + b), for
// a few classes (CIFAR-10's ten), on raw device pointers.
//
// Under autocast LibTorch runs that layer as two weight casts, a cuBLAS GEMM
// whose bf16 output the loss casts back to fp32, and in the backward a cast of
// the gradient, two GEMMs, a column sum for the bias and two casts of the
// gradients back to fp32: eleven small kernels, about 30 us of ResNet18's bf16
// step at batch 128 on an H200, each alone on the GPU between the network's
// last layer and its backward. Here the forward is one kernel that reads the
// activations in their own type and the fp32 weights, and writes fp32 logits
// (no cast either way); the backward is one kernel whose blocks compute the
// input's gradient (rows) or the weight's and bias's (columns; over many rows
// in chunks, which a second kernel adds). Each sum runs in fp32 in a fixed
// order, rounded once: the same values every run.
//
// x and grad_x: (n, c) row-major, float, bfloat16 or half; weight and
// grad_weight: (k, c) row-major fp32; bias and grad_bias: (k) fp32; y and
// grad_y: (n, k) row-major fp32.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

constexpr int kMaxClasses = 16;  ///< the most classes the kernels take

struct ClassifierProblem {
  DType dtype;  ///< x's and grad_x's
  int64_t n;    ///< rows (samples)
  int64_t c;    ///< features
  int64_t k;    ///< classes
};

/// Whether the kernels take the problem: 1-kMaxClasses classes, at least one
/// row and feature, at most 2^31 - 1 features and elements of x.
bool ClassifierSupported(const ClassifierProblem& problem) noexcept;

/// y = x W^T (+ bias, where not null).
cudaError_t ClassifierForward(const ClassifierProblem& problem, const void* x, const float* weight, const float* bias,
                              float* y, cudaStream_t stream) noexcept;

/// The fp32 elements of scratch memory ClassifierBackward needs on the
/// current device (0: none): with grad_weight over many rows, each chunk of
/// rows' sums, which a second kernel adds in chunk order.
int64_t ClassifierBackwardWorkspace(const ClassifierProblem& problem, bool grad_weight) noexcept;

/// grad_x = grad_y W (null: not computed), grad_weight = grad_y^T x, grad_bias
/// = the column sums of grad_y (null: not computed); every element written.
/// `workspace`: ClassifierBackwardWorkspace's elements (null where it is 0),
/// on the current device, used by nothing else until the kernels ran.
cudaError_t ClassifierBackward(const ClassifierProblem& problem, const void* x, const float* weight,
                               const float* grad_y, void* grad_x, float* grad_weight, float* grad_bias,
                               float* workspace, cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

#pragma once
// CUDA kernels of the fused convolution epilogue `max_pool2d(relu(y + bias), 2)`
// and its backward, on raw device pointers: no LibTorch here, so this part
// builds with nvcc alone (bias_relu_pool.cc wraps it as an autograd function).
//
// Forward, per 2x2 window of y (N, C, H, W), H and W even:
//   v_k = round(y_k + round(bias[c]))   k = 0..3, in window order (row-major),
//         rounded to the element type as an eager `y + bias` would be
//   p   = max(v_k) if it is > 0 (or NaN), else 0
//   offset = the first k that holds the maximum, or -1 where p was cut by ReLU
// Backward: grad_y at the window's offset is grad_p, every other element 0
// (and the whole window where offset is -1); grad_masked = grad_p where the
// offset is >= 0, else 0 (its sum over N, H, W is the bias gradient).
// The same values and gradients as LibTorch's relu followed by max_pool2d:
// relu is monotone, so the first maximum of relu(v) is the first maximum of v
// whenever it is positive, and otherwise relu's gradient is 0 everywhere.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace simple_cnn::kernels {

enum class DType { kFloat, kBFloat16, kHalf };
enum class Layout { kNchw, kNhwc };  ///< both fully contiguous

struct PoolProblem {
  DType dtype;
  Layout layout;
  int64_t n, c, h, w;  ///< y's sizes; p is (n, c, h / 2, w / 2) in the same layout
};

/// y, p: dtype; bias: float (C); offsets: int8, one per element of p, or
/// null when no backward follows (inference).
cudaError_t BiasReluMaxPoolForward(const PoolProblem& problem, const void* y, const float* bias, void* p,
                                   int8_t* offsets, cudaStream_t stream);

/// grad_p, grad_masked: p's shape; grad_y: y's shape; all of `dtype`.
cudaError_t BiasReluMaxPoolBackward(const PoolProblem& problem, const void* grad_p, const int8_t* offsets, void* grad_y,
                                    void* grad_masked, cudaStream_t stream);

}  // namespace simple_cnn::kernels

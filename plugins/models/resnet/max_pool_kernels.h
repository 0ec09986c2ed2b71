#pragma once
// CUDA kernels of the ResNet stem's max pool (torchvision: 3x3, stride 2,
// padding 1), forward and backward, on raw device pointers.
//
// LibTorch's max pool stores the position of each window's maximum as an
// int64 index into the input plane and computes the backward by a gather over
// those indices; on an H200 its NHWC bf16 backward took 166 us for the
// ResNet stem at batch 1024 (33.5 MB in, 8.4 MB out: about 20 us of memory
// traffic) and the forward 78 us. Here the forward stores the position inside
// the window as one byte per output element (an eighth of the index's
// traffic) and the backward is a gather of its own: each thread owns a pack
// of input channels, visits the at most ceil(k / s)^2 windows that hold it,
// and adds the gradients of those whose maximum it was, in the order LibTorch
// adds them (windows by row, then column), in fp32, rounded once (the
// stem's 3x3/2/1 NHWC pool takes a 2x2 block of
// input pixels a thread, the same sums in the same order). The maxima
// and their positions are LibTorch's: the first maximum of a window in row
// order, and a NaN wins over any number (the last NaN of a window); a window
// of -inf only keeps its first position (LibTorch's NCHW and CPU kernels; its
// NHWC CUDA kernel keeps the plane's first element there).
//
// x: (N, C, H, W) of float, bfloat16 or half, fully contiguous NCHW or NHWC;
// y, grad_y and the positions: (N, C, OH, OW) in the same layout, OH =
// (H + 2 padding - kernel) / stride + 1 (floor), likewise OW.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

struct PoolProblem {
  DType dtype;
  Layout layout;
  int64_t n, c, h, w;
  int kernel, stride, padding;
};

/// Output height and width (floor mode); below 1 when the window does not fit.
int64_t PoolOutHeight(const PoolProblem& problem) noexcept;
int64_t PoolOutWidth(const PoolProblem& problem) noexcept;

/// Whether these kernels take the problem: a window of 1-15 positions a side
/// (positions fit a byte), padding at most half the window (LibTorch's rule),
/// a non-empty output.
bool PoolSupported(const PoolProblem& problem) noexcept;

/// y = the maximum of each window; `argmax` (one byte per element of y, or
/// null when no backward follows) its position in the window, row-major.
cudaError_t MaxPoolForward(const PoolProblem& problem, const void* x, void* y, uint8_t* argmax,
                           cudaStream_t stream) noexcept;

/// grad_x from grad_y and the forward's positions (every element written).
cudaError_t MaxPoolBackward(const PoolProblem& problem, const void* grad_y, const uint8_t* argmax, void* grad_x,
                            cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

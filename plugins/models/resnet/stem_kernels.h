#pragma once
// CUDA kernels of the ResNet stem's convolution in space-to-depth form, on
// raw device pointers.
//
// torchvision's stem is a 7x7 convolution of stride 2 and padding 3 over the
// image's 3 channels. cuDNN runs it slowly: it pads the channels to 8 and
// then takes a kernel built for wide channels (on an H200, bf16 NHWC,
// 32x32 images at batch 1024: 158 us forward, 275 us with the weight
// gradient; 224x224 at batch 256: 2.9 ms; bench/stem_conv.py). The same sums
// regrouped: every 2x2 block of pixels becomes one pixel of 4C channels
// (space to depth, padded to a multiple of 8), and the 7x7 stride-2 filter,
// with a zero tap put before its first row and column, a 4x4 stride-1 filter
// over those blocks (144 us and 1.1 ms there, the same output and weight
// gradient). With y[o] = sum_k x[2o - 3 + k] w[k] (k = 0..6) and
// k + 1 = 2j + r (j = 0..3, r = 0..1): y[o] = sum_j s[o + j] w'[j], where
// block row b = o + j - 2 holds rows 2b and 2b + 1 of the image (zero outside
// it), stored at index b + 2: the blocks run from -2 to OH, OH + 3 rows,
// so the convolution over them needs no padding.
//
// s (N, OH + 3, OW + 3, SC) NHWC, SC = StemChannels(C): channel
// (ry * 2 + rx) * C + c = x[n, c, 2(b - 2) + ry, 2(b' - 2) + rx], the rest
// zero. w' (K, 4, 4, SC) NHWC: w'[k, jy, jx, (ry * 2 + rx) * C + c] =
// w[k, c, 2 jy + ry - 1, 2 jx + rx - 1] (zero at tap -1 and in the padding
// channels). OH = (H - 1) / 2 + 1 (floor), likewise OW: the 7x7 stride-2
// padding-3 convolution's output size.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

struct StemProblem {
  DType x_dtype;  ///< the image's element type
  DType s_dtype;  ///< the blocks' (the convolution's) element type
  Layout x_layout;
  int64_t n, c, h, w;
};

/// Channels of a block: 4C rounded up to a multiple of 8 (cuDNN's fast
/// kernels take 16-byte aligned channels).
inline int64_t StemChannels(int64_t c) { return (4 * c + 7) / 8 * 8; }
/// Block rows and columns: the output's plus 3.
inline int64_t StemBlocksHigh(const StemProblem& p) { return (p.h - 1) / 2 + 4; }
inline int64_t StemBlocksWide(const StemProblem& p) { return (p.w - 1) / 2 + 4; }

/// Whether these kernels take the problem: 1-4 channels, a non-empty image,
/// x and the blocks under 2^31 elements each (larger batches take the
/// model's ordinary stem).
bool StemSupported(const StemProblem& problem) noexcept;

/// s from x (x fully contiguous in its layout; s NHWC as above).
cudaError_t StemBlocks(const StemProblem& problem, const void* x, void* s, cudaStream_t stream) noexcept;

/// w' (K, 4, 4, SC) NHWC from w (K, C, 7, 7), both of `dtype`; w is NCHW
/// (contiguous) or NHWC (channels_last) as `w_layout` says.
cudaError_t StemWeight(DType dtype, Layout w_layout, int64_t k, int64_t c, const void* w, void* w_blocks,
                       cudaStream_t stream) noexcept;

/// The gradient back: grad_w (K, C, 7, 7) in `w_layout` from grad_w'
/// (K, 4, 4, SC) NHWC (each element of w is one element of w').
cudaError_t StemWeightGrad(DType dtype, Layout w_layout, int64_t k, int64_t c, const void* grad_w_blocks, void* grad_w,
                           cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

#pragma once
// The whole map's filter gradient (whole_map.h) folded back into the
// filter's taps in one CUDA kernel, where LibTorch's ops take a zeroed
// gradient and one add per output pixel (five launches for layer 3's 2x2
// maps, each in the gradient's type). Raw device pointers; no LibTorch.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

/// A convolution of a K x C x r x s filter over an h x w map, its output
/// ho x wo, in the whole map's form (whole_map.h's WholeMap).
struct WholeMapShape {
  int64_t k = 0, c = 0, r = 0, s = 0, h = 0, w = 0, ho = 0, wo = 0, stride = 1, padding = 0;
};

/// Writes dw (K, r, s, C in memory: the filter's channels_last order) from
/// g, the whole map's filter gradient ((ho * wo), K, h, w, C in memory: row
/// block p, output pixel p in row-major order, column block q, input pixel
/// q): each tap's C channels the sum, in fp32, over the output pixels p in
/// order, of the block whose window puts p's row on that tap (rows t =
/// padding - py * stride + qy), rounded once to `type`; zero where no window
/// does. Both in `type` (kFloat, kBFloat16 or kHalf), on `stream`, in one
/// launch. cudaErrorInvalidValue for a shape the whole map does not take
/// (any size below 1, padding below 0, a window beyond the filter).
cudaError_t FoldWholeMapGrad(const void* g, void* dw, const WholeMapShape& shape, DType type,
                             cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

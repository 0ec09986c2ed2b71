#pragma once
// One CUDA kernel that converts many tensors between fp32 and bf16 or half:
// autocast's weight casts of a whole network (ResNet50: 53 convolutions) and
// their gradients' casts back, as one launch each way instead of one per
// tensor (113 kernels and 301 us per ResNet50 bf16 b1024 step on an H200,
// mostly the fixed cost of small kernels). Raw device pointers; each
// tensor's elements are converted in memory order, so a destination has the
// source's strides.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_types.h"

namespace resnet::kernels {

struct CastJob {
  const void* src;
  void* dst;
  int64_t count;  ///< elements
};

/// Converts every job's `count` elements from `from` to `to` (one of them
/// kFloat, the other kBFloat16 or kHalf; or both the same: a copy), in
/// ceil(jobs / 48) launches on `stream`.
cudaError_t CastTensors(const CastJob* jobs, int count, DType from, DType to, cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

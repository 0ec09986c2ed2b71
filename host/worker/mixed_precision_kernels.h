#pragma once
// The CUDA kernels of the worker's working copies (mixed_precision.h), on raw
// device pointers (nvcc alone, no LibTorch):
// - one launch that converts many tensors between fp32 and bf16 or half: the
//   casts of a model's working copies under autocast (ResNet50: 53
//   convolutions) and their gradients' casts back, one launch each way
//   instead of one per tensor (113 kernels and 301 us per ResNet50 bf16
//   b1024 step on an H200, mostly the fixed cost of small kernels);
// - mixed-precision SGD: the low-precision gradients in, the fp32 parameters
//   and momentum updated, the next forward's copies out, in one pass.
// Each tensor's elements are read and written in memory order, so a
// destination has the source's strides.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainbench::worker::kernels {

enum class DType { kFloat, kBFloat16, kHalf };

struct CastJob {
  const void* src;
  void* dst;
  int64_t count;  ///< elements
};

/// Converts every job's `count` elements from `from` to `to` (one of them
/// kFloat, the other kBFloat16 or kHalf; or both the same: a copy), in
/// ceil(jobs / 48) launches on `stream`.
cudaError_t CastTensors(const CastJob* jobs, int count, DType from, DType to, cudaStream_t stream) noexcept;

/// One fp32 parameter's SGD update (mixed_precision.h): its gradient read in the
/// autocast type it was computed in, the update written, and with `copy` the
/// updated parameter in the next forward's type, in one pass.
struct SgdJob {
  float* param;
  float* momentum;   ///< the momentum buffer; unused where the momentum is 0
  const void* grad;  ///< the gradient, in the parameter's memory order
  void* copy;        ///< null, or the parameter's low-precision copy
  int64_t count;     ///< elements
};

/// torch.optim.SGD (dampening 0, not maximising) with momentum buffers that
/// start at zero.
struct SgdArgs {
  double lr, momentum, weight_decay;
  bool nesterov;
};

/// Every job's update with the arithmetic of PyTorch's fused SGD kernel
/// (fp32 values, its double-precision coefficients): g (+ weight_decay * p),
/// buf = momentum * buf + g, g = buf (or g + momentum * buf with Nesterov),
/// p -= lr * g; then copy = p rounded to `copy_type` where the job has a
/// copy. Gradients in `grad_type` (kFloat, kBFloat16 or kHalf), copies in
/// `copy_type` (kBFloat16 or kHalf; kFloat: no job has one), in
/// ceil(jobs / 32) launches on `stream`.
cudaError_t SgdTensors(const SgdJob* jobs, int count, DType grad_type, DType copy_type, const SgdArgs& args,
                       cudaStream_t stream) noexcept;

}  // namespace trainbench::worker::kernels

// See weight_cast_kernels.h. Each block converts kPerBlock elements of one
// job (8 per thread: 32 bytes of fp32, 16 of bf16 or half, where every
// pointer of the launch is aligned to its pack); a block finds its job in the
// launch's table of first blocks, passed by value.
#include <algorithm>
#include <cstdint>

#include "../../common/cuda_element.cuh"
#include "weight_cast_kernels.h"

namespace resnet::kernels {
namespace {

using trainbench::cuda::FromFloat;
using trainbench::cuda::LoadPack;
using trainbench::cuda::Pack;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;

constexpr int kThreads = 256;
constexpr int kVec = 8;
constexpr int64_t kPerBlock = int64_t{kThreads} * kVec;
constexpr int kMaxJobs = 48;  // the table stays well inside a kernel's 4 KiB of parameters

struct Batch {
  const void* src[kMaxJobs];
  void* dst[kMaxJobs];
  int64_t count[kMaxJobs];
  int64_t first_block[kMaxJobs + 1];
  int jobs;
};

template <typename S, typename D>
__device__ __forceinline__ D Convert(S v) {
  return FromFloat<D>(ToFloat(v));
}

template <typename S, typename D, bool kVector>
__global__ void __launch_bounds__(kThreads) CastKernel(const Batch batch) {
  const int64_t block = blockIdx.x;
  int j = 0;
  while (j + 1 < batch.jobs && batch.first_block[j + 1] <= block) ++j;
  const S* src = static_cast<const S*>(batch.src[j]);
  D* dst = static_cast<D*>(batch.dst[j]);
  const int64_t begin = (block - batch.first_block[j]) * kPerBlock;
  const int64_t end = min(begin + kPerBlock, batch.count[j]);
  if constexpr (kVector) {
    const int64_t at = begin + static_cast<int64_t>(threadIdx.x) * kVec;
    if (at + kVec <= end) {
      const Pack<S, kVec> in = LoadPack<S, kVec>(src, at);
      Pack<D, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = Convert<S, D>(in.v[k]);
      StorePack<D, kVec>(dst, at, out);
    } else {
      for (int64_t i = at; i < end; ++i) dst[i] = Convert<S, D>(src[i]);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = Convert<S, D>(src[i]);
  }
}

template <typename S, typename D>
cudaError_t LaunchTyped(const CastJob* jobs, int count, cudaStream_t stream) {
  for (int first = 0; first < count; first += kMaxJobs) {
    Batch batch{};
    bool aligned = true;
    int64_t blocks = 0;
    for (int j = 0; j < std::min(kMaxJobs, count - first); ++j) {
      const CastJob& job = jobs[first + j];
      if (job.count <= 0) continue;
      batch.src[batch.jobs] = job.src;
      batch.dst[batch.jobs] = job.dst;
      batch.count[batch.jobs] = job.count;
      batch.first_block[batch.jobs] = blocks;
      blocks += (job.count + kPerBlock - 1) / kPerBlock;
      aligned = aligned && reinterpret_cast<uintptr_t>(job.src) % (sizeof(S) * kVec) == 0 &&
                reinterpret_cast<uintptr_t>(job.dst) % (sizeof(D) * kVec) == 0;
      ++batch.jobs;
    }
    if (batch.jobs == 0) continue;
    batch.first_block[batch.jobs] = blocks;
    if (blocks > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
    if (aligned)
      CastKernel<S, D, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch);
    else
      CastKernel<S, D, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

template <typename S>
cudaError_t LaunchFrom(const CastJob* jobs, int count, DType to, cudaStream_t stream) {
  switch (to) {
    case DType::kFloat:
      return LaunchTyped<S, float>(jobs, count, stream);
    case DType::kBFloat16:
      return LaunchTyped<S, __nv_bfloat16>(jobs, count, stream);
    case DType::kHalf:
      return LaunchTyped<S, __half>(jobs, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t CastTensors(const CastJob* jobs, int count, DType from, DType to, cudaStream_t stream) noexcept {
  if (count < 0 || (count > 0 && jobs == nullptr)) return cudaErrorInvalidValue;
  switch (from) {
    case DType::kFloat:
      return LaunchFrom<float>(jobs, count, to, stream);
    case DType::kBFloat16:
      return LaunchFrom<__nv_bfloat16>(jobs, count, to, stream);
    case DType::kHalf:
      return LaunchFrom<__half>(jobs, count, to, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace resnet::kernels

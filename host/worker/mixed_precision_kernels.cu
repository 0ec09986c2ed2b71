// See mixed_precision_kernels.h. Each block converts kPerBlock elements of one
// job (8 per thread: 32 bytes of fp32, 16 of bf16 or half, where every
// pointer of the launch is aligned to its pack); a block finds its job in the
// launch's table of first blocks, passed by value.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mixed_precision_kernels.h"
#include "trainbench/cuda_element.cuh"

namespace trainbench::worker::kernels {
namespace {

using trainbench::cuda::ForElementType;
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

// SGD (SgdTensors): a block updates kPerBlock elements of one job, 8 per
// thread where every pointer of the launch is aligned to its pack. Fewer jobs
// per launch than the casts: four pointers each.
constexpr int kMaxSgdJobs = 32;

struct SgdBatch {
  float* param[kMaxSgdJobs];
  float* momentum[kMaxSgdJobs];
  const void* grad[kMaxSgdJobs];
  void* copy[kMaxSgdJobs];
  int64_t count[kMaxSgdJobs];
  int64_t first_block[kMaxSgdJobs + 1];
  int jobs;
};

// PyTorch's fused SGD, element by element (aten/src/ATen/native/cuda/
// FusedSgdKernel.cu): fp32 values, double coefficients, each intermediate
// stored as fp32 where PyTorch stores it.
__device__ __forceinline__ float SgdElement(float p, float g, float* buf, const SgdArgs& a) {
  if (a.weight_decay != 0) g = static_cast<float>(g + a.weight_decay * p);
  if (a.momentum != 0) {
    const float b = static_cast<float>(a.momentum * *buf + g);
    *buf = b;
    g = a.nesterov ? static_cast<float>(g + a.momentum * b) : b;
  }
  return static_cast<float>(p - a.lr * g);
}

// C: the copies' type, void for none.
template <typename G, typename C, bool kVector>
__global__ void __launch_bounds__(kThreads) SgdKernel(const SgdBatch batch, const SgdArgs args) {
  const int64_t block = blockIdx.x;
  int j = 0;
  while (j + 1 < batch.jobs && batch.first_block[j + 1] <= block) ++j;
  float* param = batch.param[j];
  float* momentum = batch.momentum[j];
  const G* grad = static_cast<const G*>(batch.grad[j]);
  const int64_t begin = (block - batch.first_block[j]) * kPerBlock;
  const int64_t end = min(begin + kPerBlock, batch.count[j]);
  auto one = [&](int64_t i) {
    float buf = args.momentum != 0 ? momentum[i] : 0.0f;
    const float p = SgdElement(param[i], ToFloat(grad[i]), &buf, args);
    param[i] = p;
    if (args.momentum != 0) momentum[i] = buf;
    if constexpr (!std::is_void_v<C>) {
      if (batch.copy[j] != nullptr) static_cast<C*>(batch.copy[j])[i] = FromFloat<C>(p);
    }
  };
  if constexpr (kVector) {
    const int64_t at = begin + static_cast<int64_t>(threadIdx.x) * kVec;
    if (at + kVec > end) {
      for (int64_t i = at; i < end; ++i) one(i);
      return;
    }
    Pack<float, kVec> p = LoadPack<float, kVec>(param, at);
    const Pack<G, kVec> g = LoadPack<G, kVec>(grad, at);
    Pack<float, kVec> buf{};
    if (args.momentum != 0) buf = LoadPack<float, kVec>(momentum, at);
#pragma unroll
    for (int k = 0; k < kVec; ++k) p.v[k] = SgdElement(p.v[k], ToFloat(g.v[k]), &buf.v[k], args);
    StorePack<float, kVec>(param, at, p);
    if (args.momentum != 0) StorePack<float, kVec>(momentum, at, buf);
    if constexpr (!std::is_void_v<C>) {
      if (batch.copy[j] != nullptr) {
        Pack<C, kVec> c;
#pragma unroll
        for (int k = 0; k < kVec; ++k) c.v[k] = FromFloat<C>(p.v[k]);
        StorePack<C, kVec>(static_cast<C*>(batch.copy[j]), at, c);
      }
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) one(i);
  }
}

template <typename P>
bool Aligned(const void* pointer) {
  return pointer == nullptr || reinterpret_cast<uintptr_t>(pointer) % (sizeof(P) * kVec) == 0;
}

template <typename G, typename C>
cudaError_t LaunchSgd(const SgdJob* jobs, int count, const SgdArgs& args, cudaStream_t stream) {
  using CopyElement = std::conditional_t<std::is_void_v<C>, char, C>;
  for (int first = 0; first < count; first += kMaxSgdJobs) {
    SgdBatch batch{};
    bool aligned = true;
    int64_t blocks = 0;
    for (int j = 0; j < std::min(kMaxSgdJobs, count - first); ++j) {
      const SgdJob& job = jobs[first + j];
      if (job.count <= 0) continue;
      if (job.param == nullptr || job.grad == nullptr || (args.momentum != 0 && job.momentum == nullptr) ||
          (std::is_void_v<C> && job.copy != nullptr))
        return cudaErrorInvalidValue;
      batch.param[batch.jobs] = job.param;
      batch.momentum[batch.jobs] = job.momentum;
      batch.grad[batch.jobs] = job.grad;
      batch.copy[batch.jobs] = job.copy;
      batch.count[batch.jobs] = job.count;
      batch.first_block[batch.jobs] = blocks;
      blocks += (job.count + kPerBlock - 1) / kPerBlock;
      aligned = aligned && Aligned<float>(job.param) && Aligned<float>(job.momentum) && Aligned<G>(job.grad) &&
                Aligned<CopyElement>(job.copy);
      ++batch.jobs;
    }
    if (batch.jobs == 0) continue;
    batch.first_block[batch.jobs] = blocks;
    if (blocks > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
    if (aligned)
      SgdKernel<G, C, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, args);
    else
      SgdKernel<G, C, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(batch, args);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t SgdTensors(const SgdJob* jobs, int count, DType grad_type, DType copy_type, const SgdArgs& args,
                       cudaStream_t stream) noexcept {
  if (count < 0 || (count > 0 && jobs == nullptr)) return cudaErrorInvalidValue;
  return ForElementType(grad_type, [&](auto g) {
    return ForElementType(copy_type, [&](auto c) {
      // fp32 copies: none (the weights themselves).
      using Copy = typename decltype(c)::type;
      return LaunchSgd<typename decltype(g)::type, std::conditional_t<std::is_same_v<Copy, float>, void, Copy>>(
          jobs, count, args, stream);
    });
  });
}

cudaError_t CastTensors(const CastJob* jobs, int count, DType from, DType to, cudaStream_t stream) noexcept {
  if (count < 0 || (count > 0 && jobs == nullptr)) return cudaErrorInvalidValue;
  return ForElementType(from, [&](auto f) {
    return ForElementType(to, [&](auto t) {
      return LaunchTyped<typename decltype(f)::type, typename decltype(t)::type>(jobs, count, stream);
    });
  });
}

}  // namespace trainbench::worker::kernels

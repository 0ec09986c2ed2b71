// See whole_map_kernels.h. One thread per group of kVec neighbouring
// channels of one tap (one channel where C is not a multiple of kVec or a
// pointer is not aligned to the pack): it reads that tap's channels in each
// output pixel's block that reaches it, adds them in fp32 in the order of
// the output pixels, and writes the sum once. Every element of dw is
// written, the taps no window reaches with zero: no separate zeroing.
#include <cstdint>

#include "kernel_host.h"
#include "trainbench/cuda_element.cuh"
#include "whole_map_kernels.h"

namespace resnet::kernels {
namespace {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::LoadPack;
using trainbench::cuda::Pack;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;

constexpr int kThreads = 256;
constexpr int kVec = 8;

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    FoldKernel(const T* __restrict__ g, T* __restrict__ dw, const WholeMapShape m, int64_t groups) {
  constexpr int kWidth = kVector ? kVec : 1;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= groups) return;
  const int64_t per_tap = m.c / kWidth;
  const int64_t c0 = (i % per_tap) * kWidth;
  int64_t rest = i / per_tap;
  const int64_t u = rest % m.s;  // the tap's column
  rest /= m.s;
  const int64_t t = rest % m.r;  // its row
  const int64_t k = rest / m.r;  // its output channel
  float sum[kWidth] = {};
  for (int64_t py = 0; py < m.ho; ++py) {
    const int64_t qy = t - m.padding + py * m.stride;  // the input row this tap joins to output row py
    if (qy < 0 || qy >= m.h) continue;
    for (int64_t px = 0; px < m.wo; ++px) {
      const int64_t qx = u - m.padding + px * m.stride;
      if (qx < 0 || qx >= m.w) continue;
      const int64_t at = ((((py * m.wo + px) * m.k + k) * m.h + qy) * m.w + qx) * m.c + c0;
      if constexpr (kVector) {
        const Pack<T, kVec> v = LoadPack<T, kVec>(g, at);
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum[j] += ToFloat(v.v[j]);
      } else {
        sum[0] += ToFloat(g[at]);
      }
    }
  }
  const int64_t out = ((k * m.r + t) * m.s + u) * m.c + c0;
  if constexpr (kVector) {
    Pack<T, kVec> v{};
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = FromFloat<T>(sum[j]);
    StorePack<T, kVec>(dw, out, v);
  } else {
    dw[out] = FromFloat<T>(sum[0]);
  }
}

// Whether every output pixel's window lies inside the filter (WholeMapPlan's
// condition): its first row at padding - py * stride >= 0 for the last py,
// its last before r for the first.
bool Valid(const WholeMapShape& m) {
  if (m.k < 1 || m.c < 1 || m.r < 1 || m.s < 1 || m.h < 1 || m.w < 1 || m.ho < 1 || m.wo < 1 || m.stride < 1 ||
      m.padding < 0)
    return false;
  return m.padding + m.h <= m.r && m.padding + m.w <= m.s && m.padding - (m.ho - 1) * m.stride >= 0 &&
         m.padding - (m.wo - 1) * m.stride >= 0;
}

template <typename T>
cudaError_t Launch(const void* g, void* dw, const WholeMapShape& m, cudaStream_t stream) {
  constexpr int kPackBytes = sizeof(T) * kVec;
  const bool vector = m.c % kVec == 0 && Aligned(g, kPackBytes) && Aligned(dw, kPackBytes);
  const int64_t groups = m.k * m.r * m.s * (vector ? m.c / kVec : m.c);
  const int64_t blocks = (groups + kThreads - 1) / kThreads;
  if (blocks > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
  const T* in = static_cast<const T*>(g);
  T* out = static_cast<T*>(dw);
  if (vector)
    FoldKernel<T, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, m, groups);
  else
    FoldKernel<T, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, m, groups);
  return cudaGetLastError();
}

}  // namespace

cudaError_t FoldWholeMapGrad(const void* g, void* dw, const WholeMapShape& shape, DType type,
                             cudaStream_t stream) noexcept {
  if (g == nullptr || dw == nullptr || !Valid(shape)) return cudaErrorInvalidValue;
  return ForElementType(type, [&](auto t) { return Launch<typename decltype(t)::type>(g, dw, shape, stream); });
}

}  // namespace resnet::kernels

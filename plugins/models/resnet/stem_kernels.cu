// See stem_kernels.h. One thread per 16-byte pack of the blocks (or per
// block pixel, its SC channels written as packs) or per weight element;
// nothing is allocated or cleared, so all three can be captured in a CUDA
// graph.
#include <cstdint>

#include "stem_kernels.h"
#include "trainbench/cuda_element.cuh"

namespace resnet::kernels {
namespace {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::Pack;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;

constexpr int kThreads = 256;

int Blocks(int64_t threads) { return static_cast<int>((threads + kThreads - 1) / kThreads); }

// One thread per block pixel, the image's channel count C a template
// argument and 32-bit indices (StemSupported keeps every element count within
// 31 bits): the block's SC values stay in registers, written as packs (with a
// run-time count the array went to local memory, a 112-byte stack frame in
// fp32), the 4C loads are independent of each other.
template <typename TX, typename TS, bool kNhwc, int C>
__global__ void __launch_bounds__(kThreads)
    PixelBlocksKernel(const TX* __restrict__ x, TS* __restrict__ s, int n, int h, int w, int bh, int bw) {
  const int i = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (i >= n * bh * bw) return;
  const int bx = i % bw, rest = i / bw, by = rest % bh, img = rest / bh;
  constexpr int kSc = (4 * C + 7) / 8 * 8;  // StemChannels(C)
  constexpr int kPack = 16 / sizeof(TS);
  static_assert(kSc % kPack == 0, "a block's channels are whole 16-byte packs");
  Pack<TS, kPack> packs[kSc / kPack];
#pragma unroll
  for (int ch = 0; ch < kSc; ++ch) packs[ch / kPack].v[ch % kPack] = FromFloat<TS>(0.f);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int iy = 2 * (by - 2) + r / 2, ix = 2 * (bx - 2) + r % 2;
    if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
#pragma unroll
    for (int ch = 0; ch < C; ++ch) {
      const int at = kNhwc ? ((img * h + iy) * w + ix) * C + ch : ((img * C + ch) * h + iy) * w + ix;
      packs[(r * C + ch) / kPack].v[(r * C + ch) % kPack] = FromFloat<TS>(ToFloat<TX>(x[at]));
    }
  }
#pragma unroll
  for (int p = 0; p < kSc / kPack; ++p) StorePack<TS, kPack>(s, i * kSc + p * kPack, packs[p]);
}

// One thread per 16-byte pack of the blocks, as PixelBlocksKernel otherwise:
// consecutive threads write consecutive packs, so that a warp's store is 512
// contiguous bytes (one thread per block pixel writes 2 or 4 packs a pixel
// apart: in fp32 17.4 us at batch 1024 against 6.4 us in bf16, on an H200).
// Each thread loads its pack's elements (none in the padding channels); in
// bf16 that is slower (8.9 us), in fp32 faster.
template <typename TX, typename TS, bool kNhwc, int C>
__global__ void __launch_bounds__(kThreads)
    PackBlocksKernel(const TX* __restrict__ x, TS* __restrict__ s, int n, int h, int w, int bh, int bw) {
  constexpr int kSc = (4 * C + 7) / 8 * 8;  // StemChannels(C)
  constexpr int kPack = 16 / sizeof(TS);
  constexpr int kPacks = kSc / kPack;
  static_assert(kSc % kPack == 0, "a block's channels are whole 16-byte packs");
  const int t = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (t >= n * bh * bw * kPacks) return;
  const int p = t % kPacks, i = t / kPacks;
  const int bx = i % bw, rest = i / bw, by = rest % bh, img = rest / bh;
  Pack<TS, kPack> out;
#pragma unroll
  for (int e = 0; e < kPack; ++e) {
    const int j = p * kPack + e;  // the channel in the block: (ry * 2 + rx) * C + c
    const int r = j / C, ch = j % C;
    const int iy = 2 * (by - 2) + r / 2, ix = 2 * (bx - 2) + r % 2;
    float v = 0.f;
    if (j < 4 * C && iy >= 0 && iy < h && ix >= 0 && ix < w)
      v = ToFloat<TX>(x[kNhwc ? ((img * h + iy) * w + ix) * C + ch : ((img * C + ch) * h + iy) * w + ix]);
    out.v[e] = FromFloat<TS>(v);
  }
  StorePack<TS, kPack>(s, t * kPack, out);
}

// Element (k, c, ky, kx) of w (K, C, 7, 7) in its layout.
template <bool kNhwc>
__device__ __forceinline__ int64_t WeightAt(int64_t k, int c, int ky, int kx, int channels) {
  return kNhwc ? ((k * 7 + ky) * 7 + kx) * channels + c : ((k * channels + c) * 7 + ky) * 7 + kx;
}

template <typename T, bool kNhwc>
__global__ void __launch_bounds__(kThreads)
    WeightKernel(const T* __restrict__ w, T* __restrict__ blocks, int64_t k, int c, int sc) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= k * 16 * sc) return;
  const int ch = static_cast<int>(i % sc), jx = static_cast<int>(i / sc % 4), jy = static_cast<int>(i / sc / 4 % 4);
  const int64_t out = i / (16 * sc);
  T v = FromFloat<T>(0.f);
  if (ch < 4 * c) {
    const int r = ch / c, ky = 2 * jy + r / 2 - 1, kx = 2 * jx + r % 2 - 1;
    if (ky >= 0 && kx >= 0) v = w[WeightAt<kNhwc>(out, ch % c, ky, kx, c)];
  }
  blocks[i] = v;
}

template <typename T, bool kNhwc>
__global__ void __launch_bounds__(kThreads)
    WeightGradKernel(const T* __restrict__ grad_blocks, T* __restrict__ grad_w, int64_t k, int c, int sc) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= k * c * 49) return;
  // i runs over w's elements in its own layout.
  int64_t out;
  int ch, ky, kx;
  if constexpr (kNhwc) {
    ch = static_cast<int>(i % c);
    kx = static_cast<int>(i / c % 7);
    ky = static_cast<int>(i / c / 7 % 7);
    out = i / (c * 49);
  } else {
    kx = static_cast<int>(i % 7);
    ky = static_cast<int>(i / 7 % 7);
    ch = static_cast<int>(i / 49 % c);
    out = i / (c * 49);
  }
  const int jy = (ky + 1) / 2, ry = (ky + 1) % 2, jx = (kx + 1) / 2, rx = (kx + 1) % 2;
  grad_w[i] = grad_blocks[((out * 4 + jy) * 4 + jx) * sc + (ry * 2 + rx) * c + ch];
}

// PixelBlocksKernel where a block pixel is at most two packs (bf16 and half
// blocks of 3 channels), PackBlocksKernel where it is more (fp32): on an
// H200 at batch 1024 the pixel kernel was 0.15-0.31% faster a step in bf16,
// the pack kernel 0.09-0.15% in fp32.
template <typename TX, typename TS, int C>
void LaunchTemplateBlocks(const StemProblem& p, const void* x, void* s, cudaStream_t stream) {
  const bool nhwc = p.x_layout == Layout::kNhwc;
  const int bh = static_cast<int>(StemBlocksHigh(p)), bw = static_cast<int>(StemBlocksWide(p));
  const int64_t pixels = p.n * bh * bw, packs = StemChannels(C) / (16 / int64_t{sizeof(TS)});
  const bool by_pack = packs > 2;
  auto pixel = nhwc ? PixelBlocksKernel<TX, TS, true, C> : PixelBlocksKernel<TX, TS, false, C>;
  auto pack = nhwc ? PackBlocksKernel<TX, TS, true, C> : PackBlocksKernel<TX, TS, false, C>;
  (by_pack ? pack : pixel)<<<Blocks(by_pack ? pixels * packs : pixels), kThreads, 0, stream>>>(
      static_cast<const TX*>(x), static_cast<TS*>(s), static_cast<int>(p.n), static_cast<int>(p.h),
      static_cast<int>(p.w), bh, bw);
}

template <typename TX, typename TS>
void LaunchBlocks(const StemProblem& p, const void* x, void* s, cudaStream_t stream) {
  switch (p.c) {
    case 1:
      return LaunchTemplateBlocks<TX, TS, 1>(p, x, s, stream);
    case 2:
      return LaunchTemplateBlocks<TX, TS, 2>(p, x, s, stream);
    case 3:
      return LaunchTemplateBlocks<TX, TS, 3>(p, x, s, stream);
    default:
      return LaunchTemplateBlocks<TX, TS, 4>(p, x, s, stream);
  }
}

template <typename T>
void LaunchWeight(bool grad, Layout layout, int64_t k, int c, const void* in, void* out, cudaStream_t stream) {
  const int sc = static_cast<int>(StemChannels(c));
  const bool nhwc = layout == Layout::kNhwc;
  if (grad) {
    auto kernel = nhwc ? WeightGradKernel<T, true> : WeightGradKernel<T, false>;
    kernel<<<Blocks(k * c * 49), kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), k, c, sc);
  } else {
    auto kernel = nhwc ? WeightKernel<T, true> : WeightKernel<T, false>;
    kernel<<<Blocks(k * 16 * sc), kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), k, c, sc);
  }
}

cudaError_t Weight(bool grad, DType dtype, Layout layout, int64_t k, int64_t c, const void* in, void* out,
                   cudaStream_t stream) {
  if (k < 1 || k > (int64_t{1} << 30) || c < 1 || c > 4 || in == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  ForElementType(dtype, [&](auto t) {
    LaunchWeight<typename decltype(t)::type>(grad, layout, k, static_cast<int>(c), in, out, stream);
  });
  return cudaGetLastError();
}

}  // namespace

bool StemSupported(const StemProblem& p) noexcept {
  if (p.n < 1 || p.c < 1 || p.c > 4 || p.h < 1 || p.w < 1 || p.h > (1 << 20) || p.w > (1 << 20)) return false;
  const int64_t limit = int64_t{1} << 31;  // the block kernels' 32-bit indices
  return p.n < limit / (p.c * p.h * p.w) && p.n < limit / (StemChannels(p.c) * StemBlocksHigh(p) * StemBlocksWide(p));
}

cudaError_t StemBlocks(const StemProblem& p, const void* x, void* s, cudaStream_t stream) noexcept {
  if (!StemSupported(p) || x == nullptr || s == nullptr || reinterpret_cast<uintptr_t>(s) % 16 != 0)
    return cudaErrorInvalidValue;
  ForElementType(p.x_dtype, [&](auto tx) {
    ForElementType(p.s_dtype, [&](auto ts) {
      LaunchBlocks<typename decltype(tx)::type, typename decltype(ts)::type>(p, x, s, stream);
    });
  });
  return cudaGetLastError();
}

cudaError_t StemWeight(DType dtype, Layout w_layout, int64_t k, int64_t c, const void* w, void* w_blocks,
                       cudaStream_t stream) noexcept {
  return Weight(false, dtype, w_layout, k, c, w, w_blocks, stream);
}

cudaError_t StemWeightGrad(DType dtype, Layout w_layout, int64_t k, int64_t c, const void* grad_w_blocks, void* grad_w,
                           cudaStream_t stream) noexcept {
  return Weight(true, dtype, w_layout, k, c, grad_w_blocks, grad_w, stream);
}

}  // namespace resnet::kernels

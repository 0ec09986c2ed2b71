// See max_pool_kernels.h. One thread per pack of kVec channels (NHWC; NCHW
// takes one element per thread), grid-stride over the output (forward) or
// the input (backward; the stem's 3x3/2/1 NHWC pool
// over 2x2 blocks of the input); every kernel writes each element once, and
// nothing is allocated or cleared, so both can be captured in a CUDA graph.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernel_host.h"
#include "max_pool_kernels.h"
#include "trainbench/cuda_element.cuh"

namespace resnet::kernels {
namespace {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::LoadPack;
using trainbench::cuda::Pack;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;

constexpr int kThreads = 256;
constexpr int kMaxKernel = 15;  // kernel^2 positions fit a byte

struct PoolParams {
  const void* in;  // forward: x; backward: grad_y
  void* out;       // forward: y; backward: grad_x
  uint8_t* argmax;
  int64_t n, c, h, w, oh, ow;
  int kernel, stride, padding;
};

// Element (n, c, h, w) of a (N, C, H, W) tensor in either layout.
template <bool kNhwc>
__device__ __forceinline__ int64_t At(int64_t n, int64_t c, int64_t h, int64_t w, int64_t channels, int64_t height,
                                      int64_t width) {
  return kNhwc ? ((n * height + h) * width + w) * channels + c : ((n * channels + c) * height + h) * width + w;
}

// Splits a flat index over (N, OH or H, OW or W, C / kVec) (NHWC) or
// (N, C, H, W) (NCHW) into its coordinates; c is the pack's first channel.
// Index: the type the division is done in (32-bit where the tensor allows:
// a 64-bit division is several times the instructions).
template <bool kNhwc, int kVec, typename Index>
__device__ __forceinline__ void Coordinates(Index i, Index channels, Index height, Index width, int64_t& n, int64_t& c,
                                            int64_t& h, int64_t& w) {
  if constexpr (kNhwc) {
    const Index packs = channels / kVec;
    c = (i % packs) * kVec;
    i /= packs;
    w = i % width;
    i /= width;
    h = i % height;
    n = i / height;
  } else {
    w = i % width;
    i /= width;
    h = i % height;
    i /= height;
    c = i % channels;
    n = i / channels;
  }
}

template <typename T, int kVec, bool kNhwc, typename Index>
__global__ void __launch_bounds__(kThreads) MaxPoolForwardKernel(PoolParams p) {
  const int64_t total = p.n * p.oh * p.ow * p.c / kVec;
  const T* x = static_cast<const T*>(p.in);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t n, c, oh, ow;
    Coordinates<kNhwc, kVec, Index>(static_cast<Index>(i), static_cast<Index>(p.c), static_cast<Index>(p.oh),
                                    static_cast<Index>(p.ow), n, c, oh, ow);
    const int64_t h0 = oh * p.stride - p.padding, w0 = ow * p.stride - p.padding;
    const int64_t hs = max(h0, int64_t{0}), ws = max(w0, int64_t{0});
    const int64_t he = min(h0 + p.kernel, p.h), we = min(w0 + p.kernel, p.w);
    float best[kVec];
    uint8_t where[kVec];
    const auto first = static_cast<uint8_t>((hs - h0) * p.kernel + (ws - w0));
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      best[j] = -INFINITY;
      where[j] = first;
    }
    for (int64_t ih = hs; ih < he; ++ih) {
      for (int64_t iw = ws; iw < we; ++iw) {
        const Pack<T, kVec> v = LoadPack<T, kVec>(x, At<kNhwc>(n, c, ih, iw, p.c, p.h, p.w));
        const auto here = static_cast<uint8_t>((ih - h0) * p.kernel + (iw - w0));
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float f = ToFloat(v.v[j]);
          // LibTorch's comparison: a later value wins when greater, or NaN.
          if (f > best[j] || isnan(f)) {
            best[j] = f;
            where[j] = here;
          }
        }
      }
    }
    const int64_t at = At<kNhwc>(n, c, oh, ow, p.c, p.oh, p.ow);
    Pack<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = FromFloat<T>(best[j]);  // exact: a value of x
    StorePack<T, kVec>(static_cast<T*>(p.out), at, out);
    if (p.argmax != nullptr) {
      Pack<uint8_t, kVec> positions;
#pragma unroll
      for (int j = 0; j < kVec; ++j) positions.v[j] = where[j];
      StorePack<uint8_t, kVec>(p.argmax, at, positions);
    }
  }
}

template <typename T, int kVec, bool kNhwc, typename Index>
__global__ void __launch_bounds__(kThreads) MaxPoolBackwardKernel(PoolParams p) {
  const int64_t total = p.n * p.h * p.w * p.c / kVec;
  const T* grad_y = static_cast<const T*>(p.in);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t n, c, ih, iw;
    Coordinates<kNhwc, kVec, Index>(static_cast<Index>(i), static_cast<Index>(p.c), static_cast<Index>(p.h),
                                    static_cast<Index>(p.w), n, c, ih, iw);
    // The windows that hold (ih, iw), as LibTorch bounds them.
    const int64_t phs = ih + p.padding < p.kernel ? 0 : (ih + p.padding - p.kernel) / p.stride + 1;
    const int64_t phe = min((ih + p.padding) / p.stride + 1, p.oh);
    const int64_t pws = iw + p.padding < p.kernel ? 0 : (iw + p.padding - p.kernel) / p.stride + 1;
    const int64_t pwe = min((iw + p.padding) / p.stride + 1, p.ow);
    float sum[kVec] = {};
    for (int64_t oh = phs; oh < phe; ++oh) {
      for (int64_t ow = pws; ow < pwe; ++ow) {
        const auto here =
            static_cast<uint8_t>((ih - (oh * p.stride - p.padding)) * p.kernel + (iw - (ow * p.stride - p.padding)));
        const int64_t at = At<kNhwc>(n, c, oh, ow, p.c, p.oh, p.ow);
        const Pack<uint8_t, kVec> where = LoadPack<uint8_t, kVec>(p.argmax, at);
        const Pack<T, kVec> g = LoadPack<T, kVec>(grad_y, at);
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          if (where.v[j] == here) sum[j] += ToFloat(g.v[j]);
      }
    }
    Pack<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = FromFloat<T>(sum[j]);
    StorePack<T, kVec>(static_cast<T*>(p.out), At<kNhwc>(n, c, ih, iw, p.c, p.h, p.w), out);
  }
}

// The stem's pool (3x3, stride 2, padding 1) backward in NHWC, a thread per
// 2x2 block of input pixels and pack of channels. Window (oh, ow) covers input
// rows 2 oh - 1 .. 2 oh + 1, so block (a, b) (rows 2a, 2a + 1, columns 2b,
// 2b + 1) lies in windows a .. a + 1 by b .. b + 1 and in no other: each of
// those windows' gradient and position is loaded once for the four pixels
// (MaxPoolBackwardKernel loads them once per pixel, 2.25 times each, and
// divides by the runtime stride), and every index below is a constant. Each
// pixel adds its windows in MaxPoolBackwardKernel's order (by row, then
// column) in fp32: the same values.
template <typename T, int kVec, typename Index>
__global__ void __launch_bounds__(kThreads) MaxPoolBackwardBlocksKernel(PoolParams p) {
  const int64_t bh = (p.h + 1) / 2, bw = (p.w + 1) / 2;
  const int64_t total = p.n * bh * bw * p.c / kVec;
  const T* grad_y = static_cast<const T*>(p.in);
  T* grad_x = static_cast<T*>(p.out);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    int64_t n, c, a, b;
    Coordinates<true, kVec, Index>(static_cast<Index>(i), static_cast<Index>(p.c), static_cast<Index>(bh),
                                   static_cast<Index>(bw), n, c, a, b);
    float sum[2][2][kVec] = {};  // pixel (2a + r, 2b + s), channel c + j
#pragma unroll
    for (int dy = 0; dy < 2; ++dy) {
      if (a + dy >= p.oh) break;
#pragma unroll
      for (int dx = 0; dx < 2; ++dx) {
        if (b + dx >= p.ow) break;
        const int64_t at = At<true>(n, c, a + dy, b + dx, p.c, p.oh, p.ow);
        const Pack<uint8_t, kVec> where = LoadPack<uint8_t, kVec>(p.argmax, at);
        const Pack<T, kVec> g = LoadPack<T, kVec>(grad_y, at);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            // Pixel (2a + r, 2b + s) sits at (kh, kw) of window (a + dy, b + dx).
            constexpr int kKernel = 3;
            const int kh = r - 2 * dy + 1, kw = s - 2 * dx + 1;
            if (kh < 0 || kh >= kKernel || kw < 0 || kw >= kKernel) continue;
            const int here = kh * kKernel + kw;
#pragma unroll
            for (int j = 0; j < kVec; ++j)
              if (where.v[j] == here) sum[r][s][j] += ToFloat(g.v[j]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        if (2 * a + r >= p.h || 2 * b + s >= p.w) continue;
        Pack<T, kVec> out;
#pragma unroll
        for (int j = 0; j < kVec; ++j) out.v[j] = FromFloat<T>(sum[r][s][j]);
        StorePack<T, kVec>(grad_x, At<true>(n, c, 2 * a + r, 2 * b + s, p.c, p.h, p.w), out);
      }
    }
  }
}

// Whether the stem's pool backward runs as MaxPoolBackwardBlocksKernel (2x2
// blocks of pixels, not the general gather: ResNet18 +1.6% a step at batch
// 1024 on an H200, +0.3% at 128): the 3x3, stride 2, padding 1 pool.
bool TakesBlocks(const PoolParams& p) { return p.kernel == 3 && p.stride == 2 && p.padding == 1; }

int Blocks(int64_t threads) {
  return static_cast<int>(std::clamp<int64_t>((threads + kThreads - 1) / kThreads, 1, int64_t{32} * SmCount()));
}

// The widest pack (NHWC) that divides the channels and that every pointer is
// aligned to; NCHW: one element.
int PackWidth(const PoolProblem& pr, std::initializer_list<const void*> pointers) {
  if (pr.layout != Layout::kNhwc) return 1;
  const int bytes = ElementBytes(pr.dtype);
  for (int width = 16 / bytes; width > 1; width /= 2) {
    if (pr.c % width != 0) continue;
    bool aligned = true;
    for (const void* p : pointers) aligned = aligned && (p == nullptr || Aligned(p, width * bytes));
    if (aligned) return width;
  }
  return 1;
}

template <typename T, int kVec, bool kNhwc, typename Index>
void LaunchIndexed(bool backward, const PoolParams& p, cudaStream_t stream) {
  if constexpr (kNhwc) {
    if (backward && TakesBlocks(p)) {
      const int64_t threads = p.n * ((p.h + 1) / 2) * ((p.w + 1) / 2) * p.c / kVec;
      MaxPoolBackwardBlocksKernel<T, kVec, Index><<<Blocks(threads), kThreads, 0, stream>>>(p);
      return;
    }
  }
  if (backward) {
    MaxPoolBackwardKernel<T, kVec, kNhwc, Index><<<Blocks(p.n * p.h * p.w * p.c / kVec), kThreads, 0, stream>>>(p);
  } else {
    MaxPoolForwardKernel<T, kVec, kNhwc, Index><<<Blocks(p.n * p.oh * p.ow * p.c / kVec), kThreads, 0, stream>>>(p);
  }
}

template <typename T, int kVec, bool kNhwc>
void LaunchOne(bool backward, const PoolParams& p, cudaStream_t stream) {
  // The input is the larger side (stride >= 1, padding <= kernel / 2).
  if (p.n * p.c * p.h * p.w < (int64_t{1} << 31))
    LaunchIndexed<T, kVec, kNhwc, uint32_t>(backward, p, stream);
  else
    LaunchIndexed<T, kVec, kNhwc, int64_t>(backward, p, stream);
}

template <typename T>
void LaunchTyped(bool backward, Layout layout, int width, const PoolParams& p, cudaStream_t stream) {
  if (layout == Layout::kNchw) return LaunchOne<T, 1, false>(backward, p, stream);
  switch (width) {
    case 8:
      if constexpr (sizeof(T) == 2) LaunchOne<T, 8, true>(backward, p, stream);
      break;
    case 4:
      LaunchOne<T, 4, true>(backward, p, stream);
      break;
    case 2:
      LaunchOne<T, 2, true>(backward, p, stream);
      break;
    default:
      LaunchOne<T, 1, true>(backward, p, stream);
      break;
  }
}

cudaError_t Launch(bool backward, const PoolProblem& pr, PoolParams p, int width, cudaStream_t stream) {
  if (!PoolSupported(pr)) return cudaErrorInvalidValue;
  p.n = pr.n;
  p.c = pr.c;
  p.h = pr.h;
  p.w = pr.w;
  p.oh = PoolOutHeight(pr);
  p.ow = PoolOutWidth(pr);
  p.kernel = pr.kernel;
  p.stride = pr.stride;
  p.padding = pr.padding;
  ForElementType(pr.dtype,
                 [&](auto t) { LaunchTyped<typename decltype(t)::type>(backward, pr.layout, width, p, stream); });
  return cudaGetLastError();
}

}  // namespace

int64_t PoolOutHeight(const PoolProblem& pr) noexcept {
  return pr.stride < 1 ? 0 : (pr.h + 2 * pr.padding - pr.kernel) / pr.stride + 1;
}
int64_t PoolOutWidth(const PoolProblem& pr) noexcept {
  return pr.stride < 1 ? 0 : (pr.w + 2 * pr.padding - pr.kernel) / pr.stride + 1;
}

bool PoolSupported(const PoolProblem& pr) noexcept {
  if (pr.kernel < 1 || pr.kernel > kMaxKernel || pr.stride < 1 || pr.padding < 0 || 2 * pr.padding > pr.kernel)
    return false;
  if (pr.n < 1 || pr.c < 1 || pr.h < 1 || pr.w < 1 || pr.h + 2 * pr.padding < pr.kernel ||
      pr.w + 2 * pr.padding < pr.kernel)
    return false;
  return PoolOutHeight(pr) >= 1 && PoolOutWidth(pr) >= 1 && pr.n <= (int64_t{1} << 40) / (pr.c * pr.h * pr.w);
}

cudaError_t MaxPoolForward(const PoolProblem& pr, const void* x, void* y, uint8_t* argmax,
                           cudaStream_t stream) noexcept {
  PoolParams p{};
  p.in = x;
  p.out = y;
  p.argmax = argmax;
  return Launch(false, pr, p, PackWidth(pr, {x, y}), stream);
}

cudaError_t MaxPoolBackward(const PoolProblem& pr, const void* grad_y, const uint8_t* argmax, void* grad_x,
                            cudaStream_t stream) noexcept {
  if (argmax == nullptr) return cudaErrorInvalidValue;
  PoolParams p{};
  p.in = grad_y;
  p.out = grad_x;
  p.argmax = const_cast<uint8_t*>(argmax);
  return Launch(true, pr, p, PackWidth(pr, {grad_y, grad_x}), stream);
}

}  // namespace resnet::kernels

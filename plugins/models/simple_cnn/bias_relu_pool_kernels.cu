// See bias_relu_pool_kernels.h. Both kernels are memory-bound: forward reads
// y once and writes a quarter of it plus one byte per pooled element (eager:
// bias add, ReLU and max-pool with int64 indices, ~12 bytes moved per element
// of y in bf16); backward writes grad_y once.
#include <algorithm>
#include <cstdint>

#include "bias_relu_pool_kernels.h"
#include "trainbench/cuda_element.cuh"

namespace simple_cnn::kernels {
namespace {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::Pack;
using trainbench::cuda::Round;
using trainbench::cuda::ToFloat;

// Where pack i of pooled outputs reads its 2x2 windows: `base` is the first
// element of the first window, Step(k) the offset of its element k (row-major).
// NHWC: the pack is kVec channels of one pooled position; NCHW: kVec pooled
// columns of one row (their windows are 2 * kVec consecutive elements of two
// rows).
template <int kVec, bool kNhwc, typename Index>
struct Window {
  __device__ __forceinline__ Window(Index i, Index c, Index h, Index w) : c_(c), w_(w) {
    const Index ho = h / 2, wo = w / 2;
    if constexpr (kNhwc) {
      const Index packs_per_position = c / kVec;
      Index r = i / packs_per_position;
      channel = (i - r * packs_per_position) * kVec;
      const Index x = r % wo;
      r /= wo;
      const Index row = r % ho, n = r / ho;
      base = ((n * h + 2 * row) * w + 2 * x) * c + channel;
    } else {
      const Index packs_per_row = wo / kVec;
      Index r = i / packs_per_row;
      const Index x = (i - r * packs_per_row) * kVec;
      const Index row = r % ho;
      r /= ho;  // n * c + channel
      channel = r % c;
      base = (r * h + 2 * row) * w + 2 * x;
    }
  }
  __device__ __forceinline__ Index Step(int k) const {
    const Index col = kNhwc ? c_ : 1, row = kNhwc ? w_ * c_ : w_;
    return (k >> 1) * row + (k & 1) * col;
  }
  Index base, channel;

 private:
  Index c_, w_;
};

// One thread: kVec neighbouring pooled outputs (channels in NHWC, columns in
// NCHW). Index arithmetic in Index (32 bits when every offset fits).
template <typename T, int kVec, bool kNhwc, typename Index>
__global__ void ForwardKernel(const T* __restrict__ y, const float* __restrict__ bias, T* __restrict__ p,
                              int8_t* __restrict__ offsets, Index c, Index h, Index w, Index packs) {
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Window<kVec, kNhwc, Index> win(i, c, h, w);
    const Index base = win.base, channel = win.channel;
    float best[kVec] = {};
    int8_t at[kVec] = {};
    if constexpr (kNhwc) {
      float b[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) b[j] = Round<T>(bias[channel + j]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const Pack<T, kVec> in = *reinterpret_cast<const Pack<T, kVec>*>(y + base + win.Step(k));
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float v = Round<T>(ToFloat(in.v[j]) + b[j]);
          if (k == 0 || v > best[j] || isnan(v)) best[j] = v, at[j] = static_cast<int8_t>(k);
        }
      }
    } else {
      // Output column j reads input columns 2j and 2j+1 of two rows.
      const float b = Round<T>(bias[channel]);
#pragma unroll
      for (int row = 0; row < 2; ++row) {
        const Pack<T, 2 * kVec> in = *reinterpret_cast<const Pack<T, 2 * kVec>*>(y + base + row * w);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
#pragma unroll
          for (int col = 0; col < 2; ++col) {
            const int k = 2 * row + col;
            const float v = Round<T>(ToFloat(in.v[2 * j + col]) + b);
            if (k == 0 || v > best[j] || isnan(v)) best[j] = v, at[j] = static_cast<int8_t>(k);
          }
        }
      }
    }
    Pack<T, kVec> out;
    Pack<int8_t, kVec> where;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const bool live = best[j] > 0.f || isnan(best[j]);
      out.v[j] = FromFloat<T>(live ? best[j] : 0.f);
      where.v[j] = live ? at[j] : static_cast<int8_t>(-1);
    }
    *reinterpret_cast<Pack<T, kVec>*>(p + i * kVec) = out;
    if (offsets != nullptr) *reinterpret_cast<Pack<int8_t, kVec>*>(offsets + i * kVec) = where;
  }
}

template <typename T, int kVec, bool kNhwc, typename Index>
__global__ void BackwardKernel(const T* __restrict__ grad_p, const int8_t* __restrict__ offsets, T* __restrict__ grad_y,
                               T* __restrict__ grad_masked, Index c, Index h, Index w, Index packs) {
  const T zero = FromFloat<T>(0.f);
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Pack<T, kVec> g = *reinterpret_cast<const Pack<T, kVec>*>(grad_p + i * kVec);
    const Pack<int8_t, kVec> at = *reinterpret_cast<const Pack<int8_t, kVec>*>(offsets + i * kVec);
    Pack<T, kVec> masked;
#pragma unroll
    for (int j = 0; j < kVec; ++j) masked.v[j] = at.v[j] >= 0 ? g.v[j] : zero;
    *reinterpret_cast<Pack<T, kVec>*>(grad_masked + i * kVec) = masked;
    const Window<kVec, kNhwc, Index> win(i, c, h, w);
    if constexpr (kNhwc) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        Pack<T, kVec> out;
#pragma unroll
        for (int j = 0; j < kVec; ++j) out.v[j] = at.v[j] == k ? g.v[j] : zero;
        *reinterpret_cast<Pack<T, kVec>*>(grad_y + win.base + win.Step(k)) = out;
      }
    } else {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        Pack<T, 2 * kVec> out;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
#pragma unroll
          for (int col = 0; col < 2; ++col) out.v[2 * j + col] = at.v[j] == 2 * rr + col ? g.v[j] : zero;
        }
        *reinterpret_cast<Pack<T, 2 * kVec>*>(grad_y + win.base + rr * w) = out;
      }
    }
  }
}

// The widest pack (at most 16 bytes of T) that divides the fastest pooled
// dimension; pointers come from the caching allocator, aligned far beyond.
template <typename T>
int PackWidth(const PoolProblem& pr) {
  const int64_t fastest = pr.layout == Layout::kNhwc ? pr.c : pr.w / 2;
  const int max_width = pr.layout == Layout::kNhwc ? 16 / static_cast<int>(sizeof(T)) : 4;
  for (int width = max_width; width > 1; width /= 2)
    if (fastest % width == 0) return width;
  return 1;
}

int Blocks(int64_t threads, int per_block) {
  return static_cast<int>(std::min<int64_t>((threads + per_block - 1) / per_block, int64_t{1} << 20));
}

struct Buffers {
  const void* in;     // forward: y; backward: grad_p
  const float* bias;  // forward only
  void* out;          // forward: p; backward: grad_y
  int8_t* offsets;    // written forward (unless null), read backward
  void* grad_masked;  // backward only
};

template <typename T, int kVec, bool kNhwc, typename Index>
void Launch(bool forward, const PoolProblem& pr, const Buffers& b, cudaStream_t stream) {
  const Index packs = static_cast<Index>(pr.n * pr.c * (pr.h / 2) * (pr.w / 2) / kVec);
  const auto c = static_cast<Index>(pr.c), h = static_cast<Index>(pr.h), w = static_cast<Index>(pr.w);
  constexpr int kThreads = 256;
  if (forward) {
    ForwardKernel<T, kVec, kNhwc, Index><<<Blocks(packs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(b.in), b.bias, static_cast<T*>(b.out), b.offsets, c, h, w, packs);
  } else {
    BackwardKernel<T, kVec, kNhwc, Index><<<Blocks(packs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(b.in), b.offsets, static_cast<T*>(b.out), static_cast<T*>(b.grad_masked), c, h, w, packs);
  }
}

template <typename T, int kVec>
void LaunchWithLayout(bool forward, const PoolProblem& pr, const Buffers& b, cudaStream_t stream) {
  const bool small = pr.n * pr.c * pr.h * pr.w < (int64_t{1} << 31);
  if (pr.layout == Layout::kNhwc) {
    if (small)
      Launch<T, kVec, true, int32_t>(forward, pr, b, stream);
    else
      Launch<T, kVec, true, int64_t>(forward, pr, b, stream);
  } else {
    if (small)
      Launch<T, kVec, false, int32_t>(forward, pr, b, stream);
    else
      Launch<T, kVec, false, int64_t>(forward, pr, b, stream);
  }
}

template <typename T>
void LaunchWithWidth(bool forward, const PoolProblem& pr, const Buffers& b, cudaStream_t stream) {
  switch (PackWidth<T>(pr)) {
    case 8:
      LaunchWithLayout<T, 8>(forward, pr, b, stream);
      break;
    case 4:
      LaunchWithLayout<T, 4>(forward, pr, b, stream);
      break;
    case 2:
      LaunchWithLayout<T, 2>(forward, pr, b, stream);
      break;
    default:
      LaunchWithLayout<T, 1>(forward, pr, b, stream);
      break;
  }
}

cudaError_t Run(bool forward, const PoolProblem& pr, const Buffers& b, cudaStream_t stream) {
  if (pr.h % 2 != 0 || pr.w % 2 != 0) return cudaErrorInvalidValue;
  if (pr.n * pr.c * pr.h * pr.w == 0) return cudaSuccess;
  ForElementType(pr.dtype, [&](auto t) { LaunchWithWidth<typename decltype(t)::type>(forward, pr, b, stream); });
  return cudaGetLastError();
}

}  // namespace

cudaError_t BiasReluMaxPoolForward(const PoolProblem& pr, const void* y, const float* bias, void* p, int8_t* offsets,
                                   cudaStream_t stream) {
  return Run(true, pr, Buffers{y, bias, p, offsets, nullptr}, stream);
}

cudaError_t BiasReluMaxPoolBackward(const PoolProblem& pr, const void* grad_p, const int8_t* offsets, void* grad_y,
                                    void* grad_masked, cudaStream_t stream) {
  return Run(false, pr, Buffers{grad_p, nullptr, grad_y, const_cast<int8_t*>(offsets), grad_masked}, stream);
}

}  // namespace simple_cnn::kernels

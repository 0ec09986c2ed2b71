#pragma once
// What the fused batch norm's kernels share (batch_norm_act_kernels.cu says
// how they are laid out): their constants, the parameters every kernel
// takes, and the device code of the statistics (per-thread sums, a block's
// sums, the last block of a channel tile finishing it) and of the
// element-wise arithmetic. The kernels themselves: batch_norm_two_pass.cuh,
// batch_norm_one_pass.cuh; their launch: batch_norm_act_kernels.cu, the one
// file that includes these.
#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "trainbench/cuda_element.cuh"
#include "batch_norm_plan.h"

namespace resnet::kernels::bn {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::LoadPack;
using trainbench::cuda::Pack;
using trainbench::cuda::Round;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;

constexpr int kThreads = kBnThreads;
// Blocks of a one-pass kernel's cluster: at most the portable size, which
// kOnePassMaxSplits keeps to.
constexpr int kPortableClusterBlocks = 8;
static_assert(kOnePassMaxSplits <= kPortableClusterBlocks);
constexpr long long kWaitLimitNs = 20'000'000'000LL;

// Per stream, after the counters: OnePassNhwc's release words, one per tile
// (16 KiB away from the counters, so the blocks that poll them do not slow
// the counters' atomics).
constexpr int kCounterWords = 2 * kMaxTiles;
// Streams per device that may run these kernels, each with its own counters
// (allocated together by PrepareDevice, 2.5 MiB): LibTorch's default stream,
// its pools' 64, and some left for streams of other origins.
constexpr int kMaxStreams = 80;
constexpr int kForwardCoefficients = 2;   // scale, shift
constexpr int kBackwardCoefficients = 6;  // k1, k2, k3, mean, scale, shift

// Coefficients per channel of the element-wise pass that follows a reduction.
__host__ __device__ constexpr int Coefficients(bool backward) {
  return backward ? kBackwardCoefficients : kForwardCoefficients;
}

// Everything a kernel of this file reads or writes; unused pointers are null.
struct Params {
  const void* x;
  const void* residual;
  const void* y;
  const void* grad_y;
  const void* grad_y2;  // backward with a residual: null, or added to grad_y where read
  // With a residual, NHWC, 16-byte packs (kMask kernels): y's ReLU mask, a
  // byte per pack of a row; written forward, read backward instead of y.
  unsigned char* relu_mask;
  void* out;  // forward: y; backward: grad_x
  void* grad_residual;
  const float* weight;
  const float* bias;
  float* running_mean;
  float* running_var;
  float* mean;  // forward: written; backward: read
  float* invstd;
  float* grad_weight;
  float* grad_bias;
  float* coef;        // per channel: kForwardCoefficients or kBackwardCoefficients
  float* partials;    // [splits][C][2]
  int* counters;      // the stream's: one per channel tile, zero between kernels
  bool first_stream;  // host only: the stream holds the device's first counters (LaunchOnePass)
  int64_t* batches;   // forward: num_batches_tracked, counted once per launch (null: not tracked)
  float eps, momentum;
  int64_t rows;  // elements per channel: N * H * W
  int64_t s;     // H * W
  int c;
};

// The one place the forward's affine constants are computed: the backward's
// ReLU mask recomputes y's sign from x with exactly these operations.
__device__ __forceinline__ void Affine(float w, float b, float mean, float invstd, float& scale, float& shift) {
  scale = __fmul_rn(w, invstd);
  shift = __fsub_rn(b, __fmul_rn(mean, scale));
}

template <bool kRelu>
__device__ __forceinline__ float Act(float v) {
  return kRelu ? ((v > 0.f || isnan(v)) ? v : 0.f) : v;
}

// Whether ReLU let y through: y > 0 as the forward stored it.
template <typename T>
__device__ __forceinline__ bool Passes(float x, float scale, float shift) {
  return Round<T>(__fmaf_rn(x, scale, shift)) > 0.f;
}

// Programmatic dependent launch (sm_90 and later; no-ops before): the NHWC
// element-wise pass is launched so that it may start while the reduction
// before it on its stream finishes (LaunchElementwise). The reduction lets it
// start at once (LetDependentsStart), after its own wait
// (WaitForPrerequisite: at once where it was launched the ordinary way; by
// default it is itself a dependent of the kernel before it, LaunchReduction):
// everything before it on the stream has then finished, so the inputs
// that the element-wise pass reads before its wait (x, dy, r: written by
// kernels before the reduction) are final. The wait (WaitForPrerequisite: the
// reduction finished, its writes visible) comes before anything the
// reduction writes is read (the coefficients, dr), and every thread of the
// element-wise pass passes it, so that the pass finishes after the reduction
// (the kernel after it is ordered behind the pass alone). What it saves: the
// launch gap between the two kernels and the latency of the pass's first
// loads, overlapped with the reduction's last block adding the partial sums.
__device__ __forceinline__ void LetDependentsStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the line holding `address` into this SM's L1 (no registers held).
__device__ __forceinline__ void PrefetchL1(const void* address) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(address));
}

__device__ __forceinline__ void WaitForPrerequisite() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The gradient that reaches bn(x) [+ r]: dy masked by ReLU. With a residual
// the mask comes from y, else from x.
template <typename T, bool kRelu, bool kResidual>
__device__ __forceinline__ float MaskedGrad(float dy, float x, float y, float scale, float shift) {
  if constexpr (!kRelu) return dy;
  if constexpr (kResidual) return y > 0.f ? dy : 0.f;
  return Passes<T>(x, scale, shift) ? dy : 0.f;
}

// dy where the output had two readers (kSecondGrad: p.grad_y2, a separate
// instantiation so that the other kernels keep their registers): the two
// gradients added in fp32 and rounded to T, as autograd adds them.
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> AddSecondGrad(const Params& p, const Pack<T, kVec>& gv, int64_t at) {
  const Pack<T, kVec> g2 = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y2), at);
  Pack<T, kVec> sum;
#pragma unroll
  for (int j = 0; j < kVec; ++j) sum.v[j] = FromFloat<T>(ToFloat(gv.v[j]) + ToFloat(g2.v[j]));
  return sum;
}

// y's ReLU mask (ReluMaskBytes): the byte of the pack of y at `at`, bit j
// set where its element j is above zero as stored; and that byte read back
// as a pack of 1 and 0, all that the backward needs of y (MaskedGrad).
template <typename T, int kVec>
__device__ __forceinline__ void StoreReluMask(const Params& p, int64_t at, const Pack<T, kVec>& y) {
  static_assert(kVec <= 8, "one byte a pack");
  unsigned bits = 0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) bits |= (ToFloat(y.v[j]) > 0.f ? 1u : 0u) << j;
  p.relu_mask[at / kVec] = static_cast<unsigned char>(bits);
}

template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> LoadReluMask(const Params& p, int64_t at) {
  const unsigned bits = p.relu_mask[at / kVec];
  Pack<T, kVec> y;
#pragma unroll
  for (int j = 0; j < kVec; ++j) y.v[j] = FromFloat<T>((bits >> j) & 1u ? 1.f : 0.f);
  return y;
}

// What a channel's finish reads besides the sums: loaded by the last block
// before the other blocks' partial sums, so that both loads share one round
// trip to memory instead of following each other.
struct ChannelConstants {
  float weight, bias;
  float running_mean, running_var;  // forward, when tracked
  float ref;                        // forward: the channel's first value
  float mean, invstd;               // backward: the forward's statistics
};

template <typename T, bool kBackward>
__device__ __forceinline__ ChannelConstants LoadConstants(const Params& p, int c, int64_t ref_stride) {
  ChannelConstants k{};
  k.weight = p.weight[c];
  k.bias = p.bias[c];
  if constexpr (!kBackward) {
    k.ref = ToFloat(static_cast<const T*>(p.x)[c * ref_stride]);
    if (p.running_mean != nullptr) {
      k.running_mean = p.running_mean[c];
      k.running_var = p.running_var[c];
    }
  } else {
    k.mean = p.mean[c];
    k.invstd = p.invstd[c];
  }
  return k;
}

// Per-channel results of a finished reduction (sums over all elements of
// channel c, in fp64): the element-wise pass's coefficients into `coef` (its
// Coefficients(kBackward) floats), and with `outputs` the statistics, running
// statistics or parameter gradients into the problem's tensors.
template <bool kBackward>
__device__ void FinishChannel(const Params& p, int c, double s0, double s1, const ChannelConstants& k, float* coef,
                              bool outputs = true) {
  const double n = static_cast<double>(p.rows);
  if constexpr (!kBackward) {
    // s0, s1: sums of d and d^2, d = x - ref (ref: the channel's first value).
    const double mean_d = s0 / n;
    const double var = fmax(s1 / n - mean_d * mean_d, 0.0);
    const float mean = static_cast<float>(k.ref + mean_d);
    const float invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(p.eps)));
    if (outputs) {
      p.mean[c] = mean;
      p.invstd[c] = invstd;
      if (p.running_mean != nullptr) {
        const float m = p.momentum;
        p.running_mean[c] = (1.f - m) * k.running_mean + m * mean;
        p.running_var[c] = (1.f - m) * k.running_var + m * static_cast<float>(var * n / (n - 1.0));
      }
    }
    Affine(k.weight, k.bias, mean, invstd, coef[0], coef[1]);
  } else {
    // s0, s1: sums of dz and dz (x - mean).
    const float invstd = k.invstd, w = k.weight, mean = k.mean;
    if (outputs) {
      p.grad_bias[c] = static_cast<float>(s0);
      p.grad_weight[c] = static_cast<float>(s1 * invstd);
    }
    const double k1 = static_cast<double>(w) * invstd;
    coef[0] = static_cast<float>(k1);
    coef[1] = static_cast<float>(-k1 * invstd * invstd * s1 / n);
    coef[2] = static_cast<float>(-k1 * s0 / n);
    coef[3] = mean;
    Affine(w, k.bias, mean, invstd, coef[4], coef[5]);
  }
}

// Adds every block's partial sums of a channel tile's `count` channels (from
// `first`) and finishes them: the coefficients of channel first + t at
// coef + t * Coefficients(kBackward); the statistics or gradients written
// where `outputs` (one block a tile). `ref_stride`: where a channel's first
// element is (c * ref_stride).
template <typename T, bool kBackward>
__device__ void FinishTile(const Params& p, int first, int count, int splits, int64_t ref_stride, float* coef,
                           bool outputs = true) {
  __shared__ double red[2][kThreads];
  const int parts = blockDim.x / count;  // count <= blockDim.x
  const int slot = threadIdx.x % count, part = threadIdx.x / count;
  const bool finishes = static_cast<int>(threadIdx.x) < count;
  ChannelConstants constants{};
  if (finishes) constants = LoadConstants<T, kBackward>(p, first + threadIdx.x, ref_stride);
  double s0 = 0.0, s1 = 0.0;
  if (part < parts) {
    // A channel's (s0, s1) of split sp is float2 number sp * C + c. The
    // loads of a batch are all issued before the first add: one round trip
    // to L2 per batch, not per split (the tail once grew with the splits at
    // one round trip each: 9 us at 128 splits, 32 us at 512).
    constexpr int kBatch = 8;
    const float2* q = reinterpret_cast<const float2*>(p.partials) + first + slot;
    for (int sp0 = part; sp0 < splits; sp0 += parts * kBatch) {
      float2 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int sp = sp0 + b * parts;
        v[b] = sp < splits ? __ldcg(q + static_cast<int64_t>(sp) * p.c) : make_float2(0.f, 0.f);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        s0 += v[b].x;
        s1 += v[b].y;
      }
    }
  }
  red[0][threadIdx.x] = s0;
  red[1][threadIdx.x] = s1;
  __syncthreads();
  if (finishes) {
    for (int q = 1; q < parts; ++q) {
      s0 += red[0][q * count + threadIdx.x];
      s1 += red[1][q * count + threadIdx.x];
    }
    FinishChannel<kBackward>(p, first + threadIdx.x, s0, s1, constants, coef + threadIdx.x * Coefficients(kBackward),
                             outputs);
  }
}

// Counts this block done for channel tile `tile`; true in the tile's last
// block, which then sees every other block's partial sums.
__device__ inline bool LastBlockOfTile(const Params& p, int tile) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.counters[tile], 1) == static_cast<int>(gridDim.y) - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// The batch counted once per forward launch: by the one thread that finishes
// channel tile 0.
template <bool kBackward>
__device__ __forceinline__ void CountBatch(const Params& p, int tile) {
  if (!kBackward && tile == 0 && p.batches != nullptr) ++*p.batches;
}

// Thread 0 of a tile's last block, once the tile is finished: the tile's
// counter back to zero for the next kernel, and the batch counted.
template <bool kBackward>
__device__ __forceinline__ void CloseTile(const Params& p, int tile) {
  p.counters[tile] = 0;
  CountBatch<kBackward>(p, tile);
}

// What an NHWC reduction's thread keeps for its kVec channels (from c0):
// forward, each channel's first value (the sums are of x - ref); backward,
// the mean, and the forward's affine constants where ReLU's mask is
// recomputed from x.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual>
__device__ __forceinline__ void ReductionConstants(const Params& p, int c0, float (&ref)[kVec], float (&scale)[kVec],
                                                   float (&shift)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if constexpr (kBackward) {
      ref[j] = p.mean[c0 + j];
      if constexpr (kRelu && !kResidual)
        Affine(p.weight[c0 + j], p.bias[c0 + j], ref[j], p.invstd[c0 + j], scale[j], shift[j]);
    } else {
      ref[j] = ToFloat(static_cast<const T*>(p.x)[c0 + j]);
    }
  }
}

// One pack of a row into an NHWC reduction's sums. Forward: of d and d^2
// (d = x - ref); backward: of dz and dz (x - mean), returning dz (dy masked
// by ReLU; exact in T, being dy or 0), the residual's gradient. gv and yv
// (dy and y) are read backward only, yv with a residual only.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual>
__device__ __forceinline__ Pack<T, kVec> Accumulate(const Pack<T, kVec>& xv, const Pack<T, kVec>& gv,
                                                    const Pack<T, kVec>& yv, const float (&ref)[kVec],
                                                    const float (&scale)[kVec], const float (&shift)[kVec],
                                                    float (&a0)[kVec], float (&a1)[kVec]) {
  Pack<T, kVec> dzv{};
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float xf = ToFloat(xv.v[j]);
    if constexpr (!kBackward) {
      const float d = xf - ref[j];
      a0[j] += d;
      a1[j] = fmaf(d, d, a1[j]);
    } else {
      const float dz = MaskedGrad<T, kRelu, kResidual>(ToFloat(gv.v[j]), xf, ToFloat(yv.v[j]), scale[j], shift[j]);
      dzv.v[j] = FromFloat<T>(dz);
      a0[j] += dz;
      a1[j] = fmaf(dz, xf - ref[j], a1[j]);
    }
  }
  return dzv;
}

// An NHWC block's sums per channel: thread t < count of the tile's channels
// returns channel t's, the ty rows of threads added.
template <int kVec>
__device__ __forceinline__ float2 BlockSums(const float (&a0)[kVec], const float (&a1)[kVec], int ty, int tile_c,
                                            int count) {
  __shared__ float sums[2][kThreads * kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    sums[0][threadIdx.x * kVec + j] = a0[j];
    sums[1][threadIdx.x * kVec + j] = a1[j];
  }
  __syncthreads();
  float s0 = 0.f, s1 = 0.f;
  if (static_cast<int>(threadIdx.x) < count) {
    for (int r = 0; r < ty; ++r) {
      s0 += sums[0][r * tile_c + threadIdx.x];
      s1 += sums[1][r * tile_c + threadIdx.x];
    }
  }
  return make_float2(s0, s1);
}

// An NHWC block's sums per channel into its row of the partial sums (the
// tile's `count` channels from `first`).
template <int kVec>
__device__ __forceinline__ void WriteBlockSums(const Params& p, const float (&a0)[kVec], const float (&a1)[kVec],
                                               int ty, int tile_c, int first, int count) {
  const float2 sums = BlockSums<kVec>(a0, a1, ty, tile_c, count);
  if (static_cast<int>(threadIdx.x) < count) {
    float* q = p.partials + (static_cast<int64_t>(blockIdx.y) * p.c + first + threadIdx.x) * 2;
    q[0] = sums.x;
    q[1] = sums.y;
  }
}

// dx from dz and the backward's coefficients (k1, k2, k3, mean).
__device__ __forceinline__ float BackwardDx(const float* k, float x, float dz) {
  return k[0] * dz + k[1] * (x - k[3]) + k[2];
}

// One element of the element-wise passes. Forward: y = act(x * scale +
// shift [+ r]); backward: dx = k1 dz + k2 (x - mean) + k3.
template <typename T, bool kBackward, bool kRelu, bool kResidual>
struct Elementwise {
  __device__ __forceinline__ static float Apply(const float* k, float x, float r, float dy, float y_or_dz) {
    if constexpr (!kBackward) {
      float v = __fmaf_rn(x, k[0], k[1]);
      if constexpr (kResidual) v += r;
      return Act<kRelu>(v);
    } else {
      // With a residual the reduction stored dz (masked); else dz from dy.
      const float dz = kResidual ? y_or_dz : MaskedGrad<T, kRelu, false>(dy, x, 0.f, k[4], k[5]);
      return BackwardDx(k, x, dz);
    }
  }
};

}  // namespace resnet::kernels::bn

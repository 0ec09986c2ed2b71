// See batch_norm_act_kernels.h. Every kernel is memory-bound; the layouts:
// NHWC: the tensor is a (M, C) matrix, M = N * H * W. A block is tx threads
//   along a row's channel packs (16 bytes each) by ty rows; blockIdx.x picks
//   a tile of tx packs of channels, blockIdx.y a share of the rows. A thread
//   keeps its channels for the whole kernel (their constants in registers).
// NCHW: a channel is N runs of H * W elements; the reductions give each
//   channel its blocks (blockIdx.x the channel), the element-wise passes run
//   flat over packs of one run.
// The reductions add in fp32 per thread, over the block and then across
// blocks (fp64) in the last block of each channel tile, which also computes
// the per-channel constants of the element-wise pass that follows.
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "../../common/cuda_element.cuh"
#include "../../common/env_switch.h"
#include "batch_norm_act_kernels.h"
#include "kernel_host.h"

namespace resnet::kernels {
namespace {

using trainbench::cuda::ForElementType;
using trainbench::cuda::FromFloat;
using trainbench::cuda::LoadPack;
using trainbench::cuda::Pack;
using trainbench::cuda::Round;
using trainbench::cuda::StorePack;
using trainbench::cuda::ToFloat;
using trainbench::plugins::OnIfOne;
using trainbench::plugins::OnUnlessZero;

constexpr int kThreads = 256;
// The last block of a reduction adds splits x (channels of its tile) partial
// sums alone: tiles of at most 64 channels and at most 256 splits keep that
// tail to a few rounds of loads per thread. About four blocks per SM in all
// (each thread at least 4 rows; the kernels are built to fit four per SM)
// keep the memory system busy: with two, the reductions read at a third to a
// half of the element-wise passes' rate (ResNet50 bf16 b1024 kernel trace,
// 2026-12-02).
// Where a tile of 64 channels cannot fill the device within kMaxSplits
// blocks (64 channels over many rows: the ResNets' stem and layer1 at batch
// 1024), the tiles narrow, down to kMinReduceTx packs (64 bytes of a row, two
// sectors), until they do.
constexpr int kReduceTileChannels = 64;
constexpr int kMinReduceTx = 4;
constexpr int kMaxSplits = 256;
constexpr int kReduceBlocksPerSm = 4;
constexpr int kReduceRowsPerThread = 4;

// The one-pass kernels (OnePassNhwc): blocks per SM they are built to fit
// (all of a launch's blocks must be resident at once: they wait for each
// other), the rows a thread keeps in registers, and how long a block waits
// for the others before it stops the kernel (a launch that cannot be resident
// then fails with an error instead of hanging the device). 8 rows per thread
// lost to the two kernels in 14 of the 15 shapes and ops where the planner
// chose them (the ResNets at batch 128 and 1024, bf16 and fp32, H200, session
// 15's per-shape tables: 0.73-0.99x): few blocks, each with little
// parallelism, for the whole tensor; they stay built for a sweep
// (kOnePassMaxRows, settable).
constexpr int kOnePassBlocksPerSm = 2;
constexpr int kOnePassRows[] = {2, 4, 8};
constexpr int kOnePassMaxRows = 4;
constexpr int kOnePassMaxSplits = 8;
// The narrowest one-pass tile: 2 packs of 16 bytes (one 32-byte sector of a row).
constexpr int kMinOnePassTx = 2;
// Blocks of a cluster: 8 is the portable size; 9-16 only where the device
// allows more (cudaFuncAttributeNonPortableClusterSizeAllowed: H100, H200), for
// one-pass kernels of more than kOnePassMaxSplits blocks a tile
// (TRAINBENCH_BN_ONE_PASS_MAX_SPLITS=16; not measured yet).
constexpr int kOnePassMaxClusterBlocks = 16;
constexpr int kPortableClusterBlocks = 8;
constexpr long long kWaitLimitNs = 20'000'000'000LL;

constexpr int kMaxTiles = 4096;  // counters per stream: channel tiles of one reduction
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
__device__ bool LastBlockOfTile(const Params& p, int tile) {
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

// NHWC reduction. Forward: sums of d and d^2 (d = x - the channel's first
// value); backward: of dz and dz (x - mean), writing dr = dz with a residual.
// kReverse: the rows from the last to the first (what the kernel before it
// wrote last, the likeliest still in L2): the same sums in another order.
// kMask (backward with a residual): y's ReLU mask read instead of y.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad = false,
          bool kReverse = false, bool kMask = false>
__global__ void __launch_bounds__(kThreads, kReduceBlocksPerSm) ReduceNhwc(Params p, int tx) {
  // Launched as a programmatic dependent of the kernel before it (by
  // default, LaunchReduction; TRAINBENCH_BN_PDL_REDUCTION=0 for the ordinary
  // launch): nothing of it runs until
  // that kernel has finished and its writes are visible, and only then may
  // the element-wise pass after it start, whose loads before its own wait
  // (x, r, dy) need the kernels before this one finished. Launched the
  // ordinary way, the wait returns at once.
  WaitForPrerequisite();
  LetDependentsStart();
  const int ty = kThreads / tx;
  const int lane_c = threadIdx.x % tx, lane_r = threadIdx.x / tx;
  const int pack = blockIdx.x * tx + lane_c;
  const int c0 = pack * kVec;
  const bool active = c0 < p.c && lane_r < ty;
  float a0[kVec] = {}, a1[kVec] = {};
  if (active) {
    const T* x = static_cast<const T*>(p.x);
    float ref[kVec], scale[kVec] = {}, shift[kVec] = {};
    ReductionConstants<T, kVec, kBackward, kRelu, kResidual>(p, c0, ref, scale, shift);
    const int64_t step = static_cast<int64_t>(gridDim.y) * ty;
    const auto row = [&](int64_t at) {
      const Pack<T, kVec> xv = LoadPack<T, kVec>(x, at);
      Pack<T, kVec> gv{}, yv{};
      if constexpr (kBackward) gv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
      if constexpr (kBackward && kResidual)
        yv = kMask ? LoadReluMask<T, kVec>(p, at) : LoadPack<T, kVec>(static_cast<const T*>(p.y), at);
      if constexpr (kBackward && kResidual && kSecondGrad) gv = AddSecondGrad<T, kVec>(p, gv, at);
      const Pack<T, kVec> dzv = Accumulate<T, kVec, kBackward, kRelu, kResidual>(xv, gv, yv, ref, scale, shift, a0, a1);
      if constexpr (kBackward && kResidual) StorePack<T, kVec>(static_cast<T*>(p.grad_residual), at, dzv);
    };
    const int64_t row0 = static_cast<int64_t>(blockIdx.y) * ty + lane_r;
    // Several loads in flight per thread (four rows forward, two rows of two
    // or three tensors backward): a reduction has no stores to overlap with.
    if constexpr (kReverse) {
      const int64_t at_step = step * p.c;
      int64_t at = (p.rows - 1 - row0) * p.c + c0;
#pragma unroll(kBackward ? 2 : 4)
      for (int64_t r = row0; r < p.rows; r += step, at -= at_step) row(at);
    } else {
#pragma unroll(kBackward ? 2 : 4)
      for (int64_t r = row0; r < p.rows; r += step) row(r * p.c + c0);
    }
  }
  const int tile_c = tx * kVec;
  const int first = blockIdx.x * tile_c;
  const int count = min(tile_c, p.c - first);
  WriteBlockSums<kVec>(p, a0, a1, ty, tile_c, first, count);
  if (!LastBlockOfTile(p, blockIdx.x)) return;
  FinishTile<T, kBackward>(p, first, count, gridDim.y, /*ref_stride=*/1, p.coef + first * Coefficients(kBackward));
  if (threadIdx.x == 0) CloseTile<kBackward>(p, blockIdx.x);
}

// NCHW reduction: blockIdx.x is the channel; packs of kVec elements of one
// H * W run.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad = false>
__global__ void __launch_bounds__(kThreads, kReduceBlocksPerSm) ReduceNchw(Params p) {
  const int c = blockIdx.x;
  const T* x = static_cast<const T*>(p.x);
  float ref, scale = 0.f, shift = 0.f;
  if constexpr (kBackward) {
    ref = p.mean[c];
    if constexpr (kRelu && !kResidual) Affine(p.weight[c], p.bias[c], ref, p.invstd[c], scale, shift);
  } else {
    ref = ToFloat(x[c * p.s]);
  }
  const int64_t run_packs = p.s / kVec, packs = p.rows / kVec;
  float a0 = 0.f, a1 = 0.f;
#pragma unroll(kBackward ? 2 : 4)
  for (int64_t q = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x; q < packs;
       q += static_cast<int64_t>(gridDim.y) * kThreads) {
    const int64_t n = q / run_packs;
    const int64_t at = (n * p.c + c) * p.s + (q - n * run_packs) * kVec;
    const Pack<T, kVec> xv = LoadPack<T, kVec>(x, at);
    if constexpr (!kBackward) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = ToFloat(xv.v[j]) - ref;
        a0 += d;
        a1 = fmaf(d, d, a1);
      }
    } else {
      Pack<T, kVec> gv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
      Pack<T, kVec> yv{};
      if constexpr (kResidual) yv = LoadPack<T, kVec>(static_cast<const T*>(p.y), at);
      if constexpr (kResidual && kSecondGrad) gv = AddSecondGrad<T, kVec>(p, gv, at);
      Pack<T, kVec> dzv;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float xf = ToFloat(xv.v[j]);
        const float dz = MaskedGrad<T, kRelu, kResidual>(ToFloat(gv.v[j]), xf, ToFloat(yv.v[j]), scale, shift);
        dzv.v[j] = FromFloat<T>(dz);
        a0 += dz;
        a1 = fmaf(dz, xf - ref, a1);
      }
      if constexpr (kResidual) StorePack<T, kVec>(static_cast<T*>(p.grad_residual), at, dzv);
    }
  }
  // Warp, then block.
  for (int offset = 16; offset > 0; offset /= 2) {
    a0 += __shfl_down_sync(0xffffffffu, a0, offset);
    a1 += __shfl_down_sync(0xffffffffu, a1, offset);
  }
  __shared__ float warp_sums[2][kThreads / 32];
  if (threadIdx.x % 32 == 0) {
    warp_sums[0][threadIdx.x / 32] = a0;
    warp_sums[1][threadIdx.x / 32] = a1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s0 = 0.f, s1 = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s0 += warp_sums[0][w], s1 += warp_sums[1][w];
    float* q = p.partials + (static_cast<int64_t>(blockIdx.y) * p.c + c) * 2;
    q[0] = s0;
    q[1] = s1;
  }
  if (!LastBlockOfTile(p, c)) return;
  FinishTile<T, kBackward>(p, c, 1, gridDim.y, /*ref_stride=*/p.s, p.coef + c * Coefficients(kBackward));
  if (threadIdx.x == 0) CloseTile<kBackward>(p, c);
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

// The element-wise pass, NHWC: the reductions' geometry, a thread's channels
// fixed. Launched after a reduction, it waits for it (programmatic dependent
// launch, above) with its first row of inputs asked into L1 meanwhile.
// kReverse: the rows from the last (the reduction's last reads, the likeliest
// still in L2) to the first; the same rows, each once, the same values.
// kMask (forward with a residual): y's ReLU mask written beside y.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kReverse = false, bool kMask = false>
__global__ void __launch_bounds__(kThreads) ElementwiseNhwc(Params p, int tx) {
  constexpr int kK = Coefficients(kBackward);
  const int ty = kThreads / tx;
  const int lane_c = threadIdx.x % tx, lane_r = threadIdx.x / tx;
  const int c0 = (blockIdx.x * tx + lane_c) * kVec;
  const bool active = c0 < p.c && lane_r < ty;
  const T* x = static_cast<const T*>(p.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * ty + lane_r;
  const auto row_at = [&](int64_t r) { return (kReverse ? p.rows - 1 - r : r) * p.c + c0; };
  if (active && row0 < p.rows) {
    // Inputs that no kernel of this batch norm writes: x, and r forward or
    // dy backward without a residual.
    const int64_t at = row_at(row0);
    PrefetchL1(x + at);
    if constexpr (!kBackward && kResidual) PrefetchL1(static_cast<const T*>(p.residual) + at);
    if constexpr (kBackward && !kResidual) PrefetchL1(static_cast<const T*>(p.grad_y) + at);
  }
  WaitForPrerequisite();
  if (!active) return;
  float k[kVec][kK];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
#pragma unroll
    for (int i = 0; i < kK; ++i) k[j][i] = p.coef[(c0 + j) * kK + i];
  }
  const int64_t step = static_cast<int64_t>(gridDim.y) * ty;
#pragma unroll 2
  for (int64_t r = row0; r < p.rows; r += step) {
    const int64_t at = row_at(r);
    const Pack<T, kVec> xv = LoadPack<T, kVec>(x, at);
    Pack<T, kVec> rv{}, gv{}, dzv{};
    if constexpr (!kBackward && kResidual) rv = LoadPack<T, kVec>(static_cast<const T*>(p.residual), at);
    if constexpr (kBackward && kResidual) dzv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_residual), at);
    if constexpr (kBackward && !kResidual) gv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
    Pack<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      out.v[j] = FromFloat<T>(Elementwise<T, kBackward, kRelu, kResidual>::Apply(
          k[j], ToFloat(xv.v[j]), ToFloat(rv.v[j]), ToFloat(gv.v[j]), ToFloat(dzv.v[j])));
    }
    StorePack<T, kVec>(static_cast<T*>(p.out), at, out);
    if constexpr (kMask && !kBackward) StoreReluMask<T, kVec>(p, at, out);
  }
}

__device__ __forceinline__ long long GlobalNanoseconds() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 of a block: waits until the tile's release word moves on from
// `generation` (read before the block arrived).
__device__ __forceinline__ void WaitForRelease(const int* release, int generation) {
  const long long start = GlobalNanoseconds();
  while (*static_cast<const volatile int*>(release) == generation) {
    __nanosleep(128);
    if (GlobalNanoseconds() - start > kWaitLimitNs) __trap();  // not resident together: an error, not a hang
  }
}

// The blocks of one channel tile wait for each other through global memory:
// each reads the tile's release word, then arrives (LastBlockOfTile); the
// last to arrive runs `last_block` (every thread of it), then advances the
// release word, which the others poll until it moves: it only ever counts
// up, so nothing needs resetting after the kernel. `last_block` sets the
// tile's counter back to zero for the next kernel (every block has
// arrived). Every block of the launch must be resident at once (Plan sizes
// the grid so).
template <typename LastBlock>
__device__ void WaitTogether(const Params& p, LastBlock last_block) {
  int* release = &p.counters[kMaxTiles + blockIdx.x];
  int generation = 0;
  if (threadIdx.x == 0) generation = *static_cast<volatile int*>(release);
  if (LastBlockOfTile(p, blockIdx.x)) {
    last_block();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(release, 1);
    }
  } else if (threadIdx.x == 0) {
    WaitForRelease(release, generation);
  }
  __syncthreads();
  __threadfence();
}

// The last block to arrive finishes the tile for all (FinishTile: every
// block's partial sums, the per-channel coefficients into p.coef) before it
// releases the others.
template <typename T, bool kBackward>
__device__ void FinishTileTogether(const Params& p, int first, int count) {
  WaitTogether(p, [&] {
    FinishTile<T, kBackward>(p, first, count, gridDim.y, /*ref_stride=*/1, p.coef + first * Coefficients(kBackward));
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) CloseTile<kBackward>(p, blockIdx.x);
  });
}

// The blocks of one channel tile as one thread block cluster (sm_90): each
// block's sums per channel in its shared memory, read by every block of the
// cluster (distributed shared memory, in rank order: the same sums in the same
// order everywhere), each block finishing the tile's channels into `coef`
// (its shared memory, Coefficients(kBackward) floats a channel) and the
// cluster's first block writing the statistics or gradients. No global
// memory between the blocks: no counters, no partial sums, no waiting on a
// release word.
template <typename T, int kVec, bool kBackward>
__device__ void FinishTileInCluster(const Params& p, const float (&a0)[kVec], const float (&a1)[kVec], int ty,
                                    int tile_c, int first, int count, float* coef) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  __shared__ float2 totals[kReduceTileChannels];
  const float2 sums = BlockSums<kVec>(a0, a1, ty, tile_c, count);
  const bool finishes = static_cast<int>(threadIdx.x) < count;
  ChannelConstants constants{};
  if (finishes) {
    totals[threadIdx.x] = sums;
    constants = LoadConstants<T, kBackward>(p, first + threadIdx.x, /*ref_stride=*/1);
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (finishes) {
    double s0 = 0.0, s1 = 0.0;
    for (unsigned rank = 0; rank < cluster.num_blocks(); ++rank) {
      const float2 v = cluster.map_shared_rank(totals, rank)[threadIdx.x];
      s0 += v.x;
      s1 += v.y;
    }
    const bool outputs = cluster.block_rank() == 0;
    FinishChannel<kBackward>(p, first + threadIdx.x, s0, s1, constants, coef + threadIdx.x * Coefficients(kBackward),
                             outputs);
    if (outputs && threadIdx.x == 0) CountBatch<kBackward>(p, blockIdx.x);
  }
  cluster.sync();  // every block's totals read before any block leaves; coef complete
#else
  (void)p, (void)a0, (void)a1, (void)ty, (void)tile_c, (void)first, (void)count, (void)coef;
  __trap();  // never launched: the host launches clusters only on sm_90 code (ClusterReady)
#endif
}

__host__ __device__ constexpr bool SharedX(bool backward, int rows) { return backward && rows > 4; }
__host__ __device__ constexpr int SharedXBytes(bool backward, int rows) {
  return SharedX(backward, rows) ? rows * kThreads * 16 : 0;
}

// Statistics and the element-wise pass in one kernel, for NHWC tensors whose
// elements fit in the registers of blocks resident together: each thread
// reads its kRows rows of x (and dy backward) once, adds them into the
// reduction, waits with the tile's other blocks for the per-channel
// coefficients, and writes y (dx) from what it holds. Against the two
// kernels: one launch and one read of each input fewer. The arithmetic is the
// two kernels' own code; only the order in which the statistics' sums are
// added differs (other rows per thread and blocks per tile).
// kCluster: the blocks of a channel tile are a thread block cluster
// (FinishTileInCluster), else they wait for each other through global memory
// (FinishTileTogether). kMask (with a residual): y's ReLU mask written
// forward, read backward instead of y.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, int kRows, bool kCluster,
          bool kSecondGrad = false, bool kMask = false>
__global__ void __launch_bounds__(kThreads, kOnePassBlocksPerSm) OnePassNhwc(Params p, int tx) {
  const int ty = kThreads / tx;
  const int lane_c = threadIdx.x % tx, lane_r = threadIdx.x / tx;
  const int c0 = (blockIdx.x * tx + lane_c) * kVec;
  const bool active = c0 < p.c && lane_r < ty;
  const int64_t step = static_cast<int64_t>(gridDim.y) * ty;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * ty + lane_r;
  const T* x = static_cast<const T*>(p.x);
  // Backward with 8 rows, x waits in shared memory (registers would spill).
  constexpr bool kSharedX = SharedX(kBackward, kRows);
  extern __shared__ uint4 shared_x[];                  // [kRows][kThreads] packs when kSharedX
  Pack<T, kVec> xs[kSharedX ? 1 : kRows], dzs[kRows];  // dzs: backward only
  auto x_at = [&](int i) -> Pack<T, kVec>& {
    return kSharedX ? reinterpret_cast<Pack<T, kVec>*>(shared_x)[i * kThreads + threadIdx.x] : xs[kSharedX ? 0 : i];
  };
  float a0[kVec] = {}, a1[kVec] = {};
  if (active) {
    float ref[kVec], scale[kVec] = {}, shift[kVec] = {};
    ReductionConstants<T, kVec, kBackward, kRelu, kResidual>(p, c0, ref, scale, shift);
    // Every load of a chunk of rows issued before its first add (chunks of
    // four where x waits in shared memory: the registers hold dz meanwhile).
    constexpr int kChunk = kSharedX ? 4 : kRows;
#pragma unroll
    for (int i0 = 0; i0 < kRows; i0 += kChunk) {
      Pack<T, kVec> gs[kChunk], ys[kChunk];
#pragma unroll
      for (int i = i0; i < i0 + kChunk; ++i) {
        const int64_t at = (row0 + i * step) * p.c + c0;
        if (row0 + i * step >= p.rows) continue;
        x_at(i) = LoadPack<T, kVec>(x, at);
        if constexpr (kBackward) gs[i - i0] = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
        if constexpr (kBackward && kResidual)
          ys[i - i0] = kMask ? LoadReluMask<T, kVec>(p, at) : LoadPack<T, kVec>(static_cast<const T*>(p.y), at);
      }
      if constexpr (kBackward && kResidual && kSecondGrad) {
#pragma unroll
        for (int i = i0; i < i0 + kChunk; ++i) {
          if (row0 + i * step >= p.rows) continue;
          gs[i - i0] = AddSecondGrad<T, kVec>(p, gs[i - i0], (row0 + i * step) * p.c + c0);
        }
      }
#pragma unroll
      for (int i = i0; i < i0 + kChunk; ++i) {
        if (row0 + i * step >= p.rows) continue;
        dzs[i] = Accumulate<T, kVec, kBackward, kRelu, kResidual>(x_at(i), gs[i - i0], ys[i - i0], ref, scale, shift,
                                                                  a0, a1);
        if constexpr (kBackward && kResidual)
          StorePack<T, kVec>(static_cast<T*>(p.grad_residual), (row0 + i * step) * p.c + c0, dzs[i]);
      }
    }
  }
  const int tile_c = tx * kVec;
  const int first = blockIdx.x * tile_c;
  constexpr int kK = kBackward ? 4 : kForwardCoefficients;  // backward: k1, k2, k3, mean
  constexpr int kStride = Coefficients(kBackward);
  float k[kVec][kK];
  if constexpr (kCluster) {  // the tile's coefficients in this block's shared memory
    __shared__ float coef[kReduceTileChannels * kStride];
    FinishTileInCluster<T, kVec, kBackward>(p, a0, a1, ty, tile_c, first, min(tile_c, p.c - first), coef);
    if (!active) return;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
#pragma unroll
      for (int q = 0; q < kK; ++q) k[j][q] = coef[(c0 - first + j) * kStride + q];
    }
  } else {
    WriteBlockSums<kVec>(p, a0, a1, ty, tile_c, first, min(tile_c, p.c - first));
    FinishTileTogether<T, kBackward>(p, first, min(tile_c, p.c - first));
    if (!active) return;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
#pragma unroll
      for (int q = 0; q < kK; ++q) k[j][q] = __ldcg(p.coef + (c0 + j) * kStride + q);  // another block's writes
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t at = (row0 + i * step) * p.c + c0;
    if (row0 + i * step >= p.rows) continue;
    Pack<T, kVec> out;
    if constexpr (kBackward) {
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        out.v[j] = FromFloat<T>(BackwardDx(k[j], ToFloat(x_at(i).v[j]), ToFloat(dzs[i].v[j])));
    } else {
      Pack<T, kVec> rv{};
      if constexpr (kResidual) rv = LoadPack<T, kVec>(static_cast<const T*>(p.residual), at);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out.v[j] = FromFloat<T>(
            Elementwise<T, false, kRelu, kResidual>::Apply(k[j], ToFloat(x_at(i).v[j]), ToFloat(rv.v[j]), 0.f, 0.f));
      }
      if constexpr (kMask) StoreReluMask<T, kVec>(p, at, out);
    }
    StorePack<T, kVec>(static_cast<T*>(p.out), at, out);
  }
}

// The element-wise pass, NCHW: flat over packs of one H * W run.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, typename Index>
__global__ void __launch_bounds__(kThreads) ElementwiseNchw(Params p, Index packs) {
  constexpr int kK = Coefficients(kBackward);
  const T* x = static_cast<const T*>(p.x);
  const Index s = static_cast<Index>(p.s), channels = static_cast<Index>(p.c);
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index at = i * kVec;
    const Index c = (at / s) % channels;
    float k[kK];
#pragma unroll
    for (int q = 0; q < kK; ++q) k[q] = p.coef[c * kK + q];
    const Pack<T, kVec> xv = LoadPack<T, kVec>(x, at);
    Pack<T, kVec> rv{}, gv{}, dzv{};
    if constexpr (!kBackward && kResidual) rv = LoadPack<T, kVec>(static_cast<const T*>(p.residual), at);
    if constexpr (kBackward && kResidual) dzv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_residual), at);
    if constexpr (kBackward && !kResidual) gv = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
    Pack<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      out.v[j] = FromFloat<T>(Elementwise<T, kBackward, kRelu, kResidual>::Apply(k, ToFloat(xv.v[j]), ToFloat(rv.v[j]),
                                                                                 ToFloat(gv.v[j]), ToFloat(dzv.v[j])));
    }
    StorePack<T, kVec>(static_cast<T*>(p.out), at, out);
  }
}

// Evaluation's constants from the running statistics.
__global__ void InferenceCoefficients(Params p) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.c) return;
  const float invstd = static_cast<float>(1.0 / sqrt(static_cast<double>(p.running_var[c]) + p.eps));
  Affine(p.weight[c], p.bias[c], p.running_mean[c], invstd, p.coef[2 * c], p.coef[2 * c + 1]);
}

// ---- Host side ----------------------------------------------------------

// Each device's counters: kMaxStreams blocks of kCounterWords, allocated at
// once outside any capture (PrepareDevice), and handed to streams in the
// order they ask (StreamSlot), so kernels on two streams (the branches of
// a captured step, side_stream.h) never share a counter. A slot's stream is
// set once under the mutex and read without it: every training call looks
// its stream up.
struct DeviceCounters {
  std::atomic<int*> base{nullptr};
  std::atomic<int> used{0};
  std::array<std::atomic<cudaStream_t>, kMaxStreams> streams{};
};
std::mutex counters_mutex;
std::array<DeviceCounters, kMaxDevices> counters;

// The slot of `stream` on `device`, claimed at its first call; -1 where the
// device has no counters yet or every slot is taken.
int StreamSlot(int device, cudaStream_t stream) {
  DeviceCounters& d = counters[device];
  if (d.base.load(std::memory_order_acquire) == nullptr) return -1;
  const auto find = [&d, stream] {
    const int used = d.used.load(std::memory_order_acquire);
    for (int i = 0; i < used; ++i)
      if (d.streams[i].load(std::memory_order_relaxed) == stream) return i;
    return -1;
  };
  if (const int slot = find(); slot >= 0) return slot;
  const std::lock_guard<std::mutex> lock(counters_mutex);
  if (const int slot = find(); slot >= 0) return slot;
  const int slot = d.used.load(std::memory_order_relaxed);
  if (slot >= kMaxStreams) return -1;
  d.streams[slot].store(stream, std::memory_order_relaxed);
  d.used.store(slot + 1, std::memory_order_release);
  return slot;
}

// How a problem is cut into blocks.
struct Geometry {
  int vec = 1;              // elements per pack
  int tx = 1;               // NHWC reduction and one pass: threads along a row's packs (ty = kThreads / tx rows)
  int tiles = 1;            // channel tiles of a reduction (NCHW: the channels)
  int splits = 1;           // reduction blocks per tile
  int elem_tx = 1;          // NHWC element-wise pass: threads along a row's packs
  int elem_tiles = 1;       // its channel tiles
  int rows_blocks = 1;      // its blocks per tile, at most (ElementwiseRowBlocks: one wave)
  int one_pass_rows = 0;    // NHWC, OnePassNhwc: rows per thread (0: the two kernels)
  int one_pass_splits = 0;  // its blocks per tile
  int one_pass_tx = 0;      // its threads along a row's packs (tx or narrower)
  int one_pass_tiles = 0;   // its channel tiles
};

int WidestPack(int64_t extent, int bytes) {
  for (int width = 16 / bytes; width > 1; width /= 2)
    if (extent % width == 0) return width;
  return 1;
}

// A count from the environment variable `name` (1-1024), else `fallback`:
// for a benchmark that sweeps a geometry (each caller reads it once).
int CountSetting(const char* name, int fallback) {
  const char* s = std::getenv(name);
  const int v = s != nullptr ? std::atoi(s) : 0;
  return v >= 1 && v <= 1024 ? v : fallback;
}

// Blocks per channel tile of a reduction: at most kMaxSplits, or
// TRAINBENCH_BN_MAX_SPLITS.
int MaxSplits() {
  static const int value = CountSetting("TRAINBENCH_BN_MAX_SPLITS", kMaxSplits);
  return value;
}

// Blocks per channel tile of a one-pass kernel: at most kOnePassMaxSplits,
// or TRAINBENCH_BN_ONE_PASS_MAX_SPLITS.
int OnePassMaxSplits() {
  static const int value = CountSetting("TRAINBENCH_BN_ONE_PASS_MAX_SPLITS", kOnePassMaxSplits);
  return value;
}

// Whether the one-pass kernels may take narrower tiles than the reduction's
// (Plan): unless TRAINBENCH_BN_ONE_PASS_NARROW=0 (for a side-by-side).
bool OnePassNarrowSetting() {
  static const bool value = OnUnlessZero("TRAINBENCH_BN_ONE_PASS_NARROW");
  return value;
}

// Channels of an NHWC reduction's tile: kReduceTileChannels, narrowed where
// the device would not fill, or TRAINBENCH_BN_TILE_CHANNELS (always that
// many, at most 64: 64 is the geometry before the narrowing, for a
// side-by-side).
int TileChannelsSetting() {
  static const int value = std::min(CountSetting("TRAINBENCH_BN_TILE_CHANNELS", 0), kReduceTileChannels);
  return value;
}

// Rows per thread of a one-pass kernel: at most kOnePassMaxRows, or
// TRAINBENCH_BN_ONE_PASS_MAX_ROWS (8 brings the 8-row kernels back).
int OnePassMaxRows() {
  static const int value = CountSetting("TRAINBENCH_BN_ONE_PASS_MAX_ROWS", kOnePassMaxRows);
  return value;
}

Geometry Plan(const BnProblem& pr) {
  Geometry g;
  const int max_splits = MaxSplits();
  const int sms = SmCount();
  const int64_t rows = pr.n * pr.s;
  if (pr.layout == Layout::kNhwc) {
    g.vec = WidestPack(pr.c, ElementBytes(pr.dtype));
    const int64_t packs = pr.c / g.vec;
    const int forced = TileChannelsSetting();
    const int64_t want = int64_t{kReduceBlocksPerSm} * sms;
    g.tx = static_cast<int>(std::clamp<int64_t>((forced > 0 ? forced : kReduceTileChannels) / g.vec, 1, packs));
    for (;;) {
      g.tiles = static_cast<int>((packs + g.tx - 1) / g.tx);
      const int64_t rows_per_block = int64_t{kReduceRowsPerThread} * (kThreads / g.tx);
      const int64_t needed = (rows + rows_per_block - 1) / rows_per_block;
      g.splits = static_cast<int>(
          std::clamp<int64_t>(needed, 1, std::max<int64_t>(1, std::min<int64_t>(max_splits, want / g.tiles))));
      // Narrower tiles only where kMaxSplits, not the rows or the device,
      // held the grid below `want` blocks.
      const bool capped = needed > g.splits && g.splits == max_splits && int64_t{g.tiles} * g.splits < want;
      if (forced > 0 || !capped || g.tx % 2 != 0 || g.tx / 2 < kMinReduceTx) break;
      g.tx /= 2;
    }
    g.elem_tx = static_cast<int>(std::min<int64_t>(packs, 32));
    g.elem_tiles = static_cast<int>((packs + g.elem_tx - 1) / g.elem_tx);
    const int64_t elem_ty = kThreads / g.elem_tx;
    g.rows_blocks = static_cast<int>(
        std::clamp<int64_t>((rows + 4 * elem_ty - 1) / (4 * elem_ty), 1, std::max<int64_t>(1, 8 * sms / g.elem_tiles)));
    // One kernel each way (full 16-byte packs only) with the fewest rows per
    // thread (at most OnePassMaxRows()) that fit the grid in one block per
    // multiprocessor, else in the kOnePassBlocksPerSm that every such kernel
    // fits, with at most OnePassMaxSplits() blocks per channel tile: on an
    // H200 the one kernel lost to the two wherever more blocks shared a tile
    // (a cost that grew with them, about 0.17 us per block and kernel, cause
    // not found) and won by 1.1-1.5x where 2-8 did, with 2 or 4 rows per
    // thread (8 rows lost: kOnePassMaxRows).
    // Where the reduction's tile needs more blocks than that, narrower tiles
    // (down to kMinOnePassTx packs, the widest that fits; unless
    // TRAINBENCH_BN_ONE_PASS_NARROW=0): more rows per block, so fewer blocks
    // per tile (the ResNets' layer 2 at batch 128).
    if (pr.one_pass && g.vec == 16 / ElementBytes(pr.dtype)) {
      const int narrowest = OnePassNarrowSetting() ? std::min(g.tx, kMinOnePassTx) : g.tx;
      for (int tx = g.tx; tx >= narrowest && g.one_pass_rows == 0; tx /= 2) {
        const int64_t tiles = (packs + tx - 1) / tx, rows_per_pass = kThreads / tx;
        for (int per_sm = 1; per_sm <= kOnePassBlocksPerSm && g.one_pass_rows == 0; ++per_sm) {
          for (int rows_per_thread : kOnePassRows) {
            if (rows_per_thread > OnePassMaxRows()) break;
            const int64_t splits = (rows + rows_per_pass * rows_per_thread - 1) / (rows_per_pass * rows_per_thread);
            if (splits <= OnePassMaxSplits() && splits * tiles <= int64_t{per_sm} * sms) {
              g.one_pass_rows = rows_per_thread;
              g.one_pass_splits = static_cast<int>(splits);
              g.one_pass_tx = tx;
              g.one_pass_tiles = static_cast<int>(tiles);
              break;
            }
          }
        }
        if (tx % 2 != 0) break;
      }
    }
  } else {
    g.vec = WidestPack(pr.s, ElementBytes(pr.dtype));
    g.tiles = static_cast<int>(pr.c);
    const int64_t packs = rows / g.vec;
    const int64_t packs_per_block = kReduceRowsPerThread * kThreads;
    g.splits = static_cast<int>(
        std::clamp<int64_t>((packs + packs_per_block - 1) / packs_per_block, 1,
                            std::max<int64_t>(1, std::min<int64_t>(max_splits, kReduceBlocksPerSm * sms / pr.c))));
  }
  return g;
}

// Blocks of `kernel` one multiprocessor holds at once, per device, asked once.
// `dynamic_shared`: its bytes of dynamic shared memory (allowed here, once
// per device, beyond the default limit). `kernel` is the template argument,
// so each kernel has its own record.
template <auto kernel>
int ResidentBlocks(int dynamic_shared) {
  static std::array<std::atomic<int>, kMaxDevices> blocks{};
  const int device = CurrentDevice();
  if (device < 0) return 0;
  int b = blocks[device].load(std::memory_order_relaxed);
  if (b == 0) {
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_shared) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, dynamic_shared) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the two kernels run instead
      n = -1;
    }
    b = n > 0 ? n : -1;
    blocks[device].store(b, std::memory_order_relaxed);
  }
  return b;
}

// Which NHWC pass of training walks its rows last to first, so that it
// starts on what the kernel before it touched last (in L2 when the tensors
// are not much larger than it): none, the element-wise pass (into what the
// reduction read last; TRAINBENCH_BN_REVERSE_ROWS=1) or the reduction (into
// what the convolution before it wrote last, the element-wise pass then into
// what the reduction read last: the default; TRAINBENCH_BN_REVERSE_ROWS=0 for
// none, =1 for the element-wise pass alone). The reduction's reversal gained
// 0.2-0.6% in each of the four ResNet cells at batch 1024, bf16 and fp32 (H200,
// two ABA rounds, session 26); the element-wise pass's alone -0.1 to +0.6%.
enum Reverse { kReverseNone, kReverseElementwise, kReverseReduction };
int ReverseSetting() {
  static const int value = [] {
    const char* s = std::getenv("TRAINBENCH_BN_REVERSE_ROWS");
    const std::string_view v = s == nullptr ? "" : s;
    return v == "0" ? kReverseNone : v == "1" ? kReverseElementwise : kReverseReduction;
  }();
  return value;
}

// Blocks per SM an element-wise grid is sized for: the kernel's own
// occupancy, or TRAINBENCH_BN_ELEMENTWISE_BLOCKS_PER_SM (8: the grid before
// it followed the occupancy, for a side-by-side).
int ElementwiseBlocksPerSmSetting() {
  static const int value = CountSetting("TRAINBENCH_BN_ELEMENTWISE_BLOCKS_PER_SM", 0);
  return value;
}

// Blocks per channel tile of an NHWC element-wise pass (`kernel`): the
// rows' share, at most one wave of the blocks the device holds at once.
// Sized for 8 per SM, the bf16 passes (43-80 registers a thread: 3-5 blocks
// per SM) ran as a full wave and a partial one, and reached two thirds of
// the fp32 passes' bandwidth on the same shapes (H200, ResNet50 at batch
// 1024, session 17).
template <auto kernel>
int ElementwiseRowBlocks(const Geometry& g) {
  const int setting = ElementwiseBlocksPerSmSetting();
  const int per_sm = setting > 0 ? setting : ResidentBlocks<kernel>(0);
  if (per_sm <= 0) return g.rows_blocks;
  return static_cast<int>(std::clamp<int64_t>(int64_t{per_sm} * SmCount() / g.elem_tiles, 1, g.rows_blocks));
}

// Whether the one-pass kernels' blocks of a channel tile may be one thread
// block cluster: unless TRAINBENCH_BN_ONE_PASS_CLUSTER=0 (the blocks then wait
// for each other through global memory, as on GPUs without clusters).
bool ClusterSetting() {
  static const bool value = OnUnlessZero("TRAINBENCH_BN_ONE_PASS_CLUSTER");
  return value;
}

// A launch of kThreads-thread blocks over `grid` with one launch attribute
// (which the caller fills in, and keeps until the launch).
cudaLaunchConfig_t ConfigWith(dim3 grid, int shared, cudaStream_t stream, cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

// The launch of `kernel` as clusters of (1, splits, 1) blocks.
cudaLaunchConfig_t ClusterConfig(const Geometry& g, int shared, cudaStream_t stream, cudaLaunchAttribute& attribute) {
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = g.one_pass_splits;
  attribute.val.clusterDim.z = 1;
  return ConfigWith(dim3(g.one_pass_tiles, g.one_pass_splits), shared, stream, attribute);
}

// Whether `kernel` runs as clusters of `splits` blocks on this device: its
// code for sm_90 or later loaded, cluster launches supported, and at least
// one such cluster fits. Asked once per device and size.
template <auto kernel>
bool ClusterReady(const Geometry& g, int shared) {
  static std::array<std::array<std::atomic<signed char>, kOnePassMaxClusterBlocks + 1>, kMaxDevices> ready{};
  const int device = CurrentDevice();
  if (!ClusterSetting() || g.one_pass_splits > kOnePassMaxClusterBlocks || device < 0) return false;
  std::atomic<signed char>& known = ready[device][g.one_pass_splits];
  signed char r = known.load(std::memory_order_relaxed);
  if (r == 0) {
    int supported = 0, clusters = 0;
    cudaFuncAttributes attributes{};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = ClusterConfig(g, shared, nullptr, attribute);
    const bool ok = cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device) == cudaSuccess &&
                    supported != 0 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                    attributes.binaryVersion >= 90 &&
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared) == cudaSuccess &&
                    (g.one_pass_splits <= kPortableClusterBlocks ||
                     cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) &&
                    cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
    if (!ok) (void)cudaGetLastError();  // not sticky: the blocks wait through global memory instead
    r = ok ? 1 : -1;
    known.store(r, std::memory_order_relaxed);
  }
  return r > 0;
}

// OnePassNhwc with kRows rows per thread: as thread block clusters where the
// device runs them (ClusterReady), else if every block of its grid can be
// resident at once and it runs on the stream that holds the device's first
// counters; false where neither (then the two kernels run). The stream rule:
// two launches that wait through global memory, on two streams at once,
// could each hold part of the device while waiting for blocks that cannot
// start; a cluster waits for none outside it, and one such launch beside
// other kernels only waits for them to finish.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, int kRows, bool kSecondGrad, bool kMask>
bool LaunchOnePass(const Geometry& g, const Params& p, cudaStream_t stream) {
  constexpr int kShared = SharedXBytes(kBackward, kRows);
  constexpr auto clustered = OnePassNhwc<T, kVec, kBackward, kRelu, kResidual, kRows, true, kSecondGrad, kMask>;
  if (ClusterReady<clustered>(g, kShared)) {
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = ClusterConfig(g, kShared, stream, attribute);
    if (cudaLaunchKernelEx(&config, clustered, p, g.one_pass_tx) == cudaSuccess) return true;
    (void)cudaGetLastError();  // a launch refused up front: the two kernels instead
    return false;
  }
  constexpr auto kernel = OnePassNhwc<T, kVec, kBackward, kRelu, kResidual, kRows, false, kSecondGrad, kMask>;
  if (!p.first_stream) return false;
  if (static_cast<int64_t>(ResidentBlocks<kernel>(kShared)) * SmCount() <
      static_cast<int64_t>(g.one_pass_tiles) * g.one_pass_splits)
    return false;
  kernel<<<dim3(g.one_pass_tiles, g.one_pass_splits), kThreads, kShared, stream>>>(p, g.one_pass_tx);
  return true;
}

template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad, bool kMask>
bool LaunchOnePassRows(const Geometry& g, const Params& p, cudaStream_t stream) {
  if constexpr (kVec * sizeof(T) != 16) {
    return false;
  } else {
    static_assert(kOnePassRows[0] == 2 && kOnePassRows[1] == 4 && kOnePassRows[2] == 8);
    switch (g.one_pass_rows) {
      case 2:
        return LaunchOnePass<T, kVec, kBackward, kRelu, kResidual, 2, kSecondGrad, kMask>(g, p, stream);
      case 4:
        return LaunchOnePass<T, kVec, kBackward, kRelu, kResidual, 4, kSecondGrad, kMask>(g, p, stream);
      case 8:
        return LaunchOnePass<T, kVec, kBackward, kRelu, kResidual, 8, kSecondGrad, kMask>(g, p, stream);
      default:
        return false;
    }
  }
}

// Whether the NHWC element-wise pass starts while the reduction before it
// finishes (programmatic dependent launch, above): on devices of compute
// capability 9.0 or later, unless TRAINBENCH_BN_PDL=0 (for a side-by-side).
// Asked once per device.
bool DependentLaunchReady() {
  static const bool setting = OnUnlessZero("TRAINBENCH_BN_PDL");
  static std::array<std::atomic<signed char>, kMaxDevices> ready{};
  const int device = CurrentDevice();
  if (!setting || device < 0) return false;
  signed char r = ready[device].load(std::memory_order_relaxed);
  if (r == 0) {
    int major = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();
    r = ok && major >= 9 ? 1 : -1;
    ready[device].store(r, std::memory_order_relaxed);
  }
  return r > 0;
}

// Whether the NHWC reductions of training are launched as programmatic
// dependents of the kernel before them on their stream (a convolution, for
// the ResNets), so that their launch overlaps its last blocks:
// where DependentLaunchReady, unless TRAINBENCH_BN_PDL_REDUCTION=0. Session
// 27's traces: about 0.85 us between a convolution and the batch norm after
// it, 30-50 us a step for ResNet50 at batch 1024. Session 29, two runs each
// against the ordinary launch: +1.8%, +0.1%, +0.9%, +0.5% at batch 1024
// (ResNet18 bf16, fp32, ResNet50 bf16, fp32), +0.4%, -0.2%, +0.3%, +0.2% at
// 128.
bool ReductionDependentLaunch() {
  static const bool setting = OnUnlessZero("TRAINBENCH_BN_PDL_REDUCTION");
  return setting && DependentLaunchReady();
}

// An NHWC kernel of (Params, tx) on `stream`, as a programmatic dependent of
// the kernel before it where `dependent` (falling back to the ordinary
// launch where the launch is refused up front).
template <auto kernel>
void LaunchNhwc(bool dependent, dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  if (dependent) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t config = ConfigWith(grid, 0, stream, attribute);
    if (cudaLaunchKernelEx(&config, kernel, p, tx) == cudaSuccess) return;
    (void)cudaGetLastError();
  }
  kernel<<<grid, kThreads, 0, stream>>>(p, tx);
}

// The NHWC reduction of training on `stream`.
template <auto kernel>
void LaunchReduction(dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  LaunchNhwc<kernel>(ReductionDependentLaunch(), grid, p, tx, stream);
}

// The NHWC element-wise pass, after the reduction just launched on `stream`.
template <auto kernel>
void LaunchElementwise(dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  LaunchNhwc<kernel>(DependentLaunchReady(), grid, p, tx, stream);
}

// kSecondGrad: the backward adds p.grad_y2 to dy (BnBackwardArgs::grad_y2).
// kMask (NHWC, with a residual): y's ReLU mask, p.relu_mask, written by the
// forward's element-wise pass and read by the backward's reduction.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad = false,
          bool kMask = false>
void LaunchTyped(const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  if (pr.layout == Layout::kNhwc) {
    if (LaunchOnePassRows<T, kVec, kBackward, kRelu, kResidual, kSecondGrad, kMask>(g, p, stream)) return;
    const dim3 grid(g.tiles, g.splits);
    const int reverse = ReverseSetting();
    constexpr bool kReduceMask = kMask && kBackward, kElementwiseMask = kMask && !kBackward;
    if (reverse == kReverseReduction)
      LaunchReduction<ReduceNhwc<T, kVec, kBackward, kRelu, kResidual, kSecondGrad, true, kReduceMask>>(grid, p, g.tx,
                                                                                                        stream);
    else
      LaunchReduction<ReduceNhwc<T, kVec, kBackward, kRelu, kResidual, kSecondGrad, false, kReduceMask>>(grid, p, g.tx,
                                                                                                         stream);
    constexpr auto elementwise = ElementwiseNhwc<T, kVec, kBackward, kRelu, kResidual, false, kElementwiseMask>;
    constexpr auto reversed = ElementwiseNhwc<T, kVec, kBackward, kRelu, kResidual, true, kElementwiseMask>;
    if (reverse == kReverseElementwise)
      LaunchElementwise<reversed>(dim3(g.elem_tiles, ElementwiseRowBlocks<reversed>(g)), p, g.elem_tx, stream);
    else
      LaunchElementwise<elementwise>(dim3(g.elem_tiles, ElementwiseRowBlocks<elementwise>(g)), p, g.elem_tx, stream);
    return;
  }
  ReduceNchw<T, kVec, kBackward, kRelu, kResidual, kSecondGrad><<<dim3(g.tiles, g.splits), kThreads, 0, stream>>>(p);
  const int64_t packs = pr.n * pr.c * pr.s / kVec;
  const int blocks = static_cast<int>(std::min<int64_t>((packs + kThreads - 1) / kThreads, int64_t{1} << 20));
  if (pr.n * pr.c * pr.s < (int64_t{1} << 31)) {
    ElementwiseNchw<T, kVec, kBackward, kRelu, kResidual, int32_t>
        <<<blocks, kThreads, 0, stream>>>(p, static_cast<int32_t>(packs));
  } else {
    ElementwiseNchw<T, kVec, kBackward, kRelu, kResidual, int64_t><<<blocks, kThreads, 0, stream>>>(p, packs);
  }
}

// Only the element-wise pass (evaluation).
template <typename T, int kVec, bool kRelu, bool kResidual>
void LaunchInference(const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  if (pr.layout == Layout::kNhwc) {
    constexpr auto elementwise = ElementwiseNhwc<T, kVec, false, kRelu, kResidual>;
    elementwise<<<dim3(g.elem_tiles, ElementwiseRowBlocks<elementwise>(g)), kThreads, 0, stream>>>(p, g.elem_tx);
    return;
  }
  const int64_t packs = pr.n * pr.c * pr.s / kVec;
  const int blocks = static_cast<int>(std::min<int64_t>((packs + kThreads - 1) / kThreads, int64_t{1} << 20));
  if (pr.n * pr.c * pr.s < (int64_t{1} << 31)) {
    ElementwiseNchw<T, kVec, false, kRelu, kResidual, int32_t>
        <<<blocks, kThreads, 0, stream>>>(p, static_cast<int32_t>(packs));
  } else {
    ElementwiseNchw<T, kVec, false, kRelu, kResidual, int64_t><<<blocks, kThreads, 0, stream>>>(p, packs);
  }
}

enum class Pass { kForward, kBackward, kInference };

// kMask: y's ReLU mask in training (p.relu_mask; evaluation has none).
template <typename T, int kVec, bool kRelu, bool kResidual, bool kMask = false>
void LaunchPass(Pass pass, const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  switch (pass) {
    case Pass::kForward:
      LaunchTyped<T, kVec, false, kRelu, kResidual, false, kMask>(pr, g, p, stream);
      break;
    case Pass::kBackward:
      LaunchTyped<T, kVec, true, kRelu, kResidual, false, kMask>(pr, g, p, stream);
      break;
    case Pass::kInference:
      LaunchInference<T, kVec, kRelu, kResidual>(pr, g, p, stream);
      break;
  }
}

// With a residual: the second gradient added where the backward has one.
template <typename T, int kVec, bool kMask>
void LaunchResidual(Pass pass, const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  if (pass == Pass::kBackward && p.grad_y2 != nullptr)
    LaunchTyped<T, kVec, true, true, true, /*kSecondGrad=*/true, kMask>(pr, g, p, stream);
  else
    LaunchPass<T, kVec, true, true, kMask>(pass, pr, g, p, stream);
}

template <typename T, int kVec>
void LaunchAct(Pass pass, const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  if (pr.residual) {
    if constexpr (kVec * sizeof(T) == 16) {  // where ReluMaskBytes has a mask
      if (p.relu_mask != nullptr) return LaunchResidual<T, kVec, /*kMask=*/true>(pass, pr, g, p, stream);
    }
    LaunchResidual<T, kVec, false>(pass, pr, g, p, stream);
  } else if (pr.relu) {
    LaunchPass<T, kVec, true, false>(pass, pr, g, p, stream);
  } else {
    LaunchPass<T, kVec, false, false>(pass, pr, g, p, stream);
  }
}

template <typename T>
void LaunchWidth(Pass pass, const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  switch (g.vec) {
    case 8:
      if constexpr (sizeof(T) == 2) LaunchAct<T, 8>(pass, pr, g, p, stream);
      break;
    case 4:
      LaunchAct<T, 4>(pass, pr, g, p, stream);
      break;
    case 2:
      LaunchAct<T, 2>(pass, pr, g, p, stream);
      break;
    default:
      LaunchAct<T, 1>(pass, pr, g, p, stream);
      break;
  }
}

cudaError_t Launch(Pass pass, const BnProblem& pr, Params p, cudaStream_t stream) {
  if (!Supported(pr)) return cudaErrorInvalidValue;
  const Geometry g = Plan(pr);
  p.rows = pr.n * pr.s;
  p.s = pr.s;
  p.c = static_cast<int>(pr.c);
  if (pass != Pass::kInference) {
    const int device = CurrentDevice();
    const int slot = device < 0 ? -1 : StreamSlot(device, stream);
    if (slot < 0) return cudaErrorNotReady;  // PrepareDevice first
    p.counters = counters[device].base.load(std::memory_order_acquire) + int64_t{slot} * kCounterWords;
    p.first_stream = slot == 0;
    p.partials = p.coef + static_cast<int64_t>(pr.c) * kBackwardCoefficients;
  }
  ForElementType(pr.dtype, [&](auto t) { LaunchWidth<typename decltype(t)::type>(pass, pr, g, p, stream); });
  return cudaGetLastError();
}

}  // namespace

bool Supported(const BnProblem& pr) noexcept {
  if (pr.n < 1 || pr.c < 1 || pr.s < 1 || pr.c > kMaxTiles) return false;
  if (pr.residual && !pr.relu) return false;
  if (pr.n * pr.s < 2) return false;  // one value per channel: no variance
  return pr.n <= (int64_t{1} << 40) / (pr.c * pr.s);
}

bool OnePass(const BnProblem& pr) noexcept { return Supported(pr) && Plan(pr).one_pass_rows > 0; }

int ReduceTileChannels(const BnProblem& pr) noexcept {
  if (!Supported(pr) || pr.layout != Layout::kNhwc) return 0;
  const Geometry g = Plan(pr);
  return g.tx * g.vec;
}

int64_t ReluMaskBytes(const BnProblem& pr) noexcept {
  if (!Supported(pr) || !pr.residual || pr.layout != Layout::kNhwc) return 0;
  const int bytes = ElementBytes(pr.dtype), vec = WidestPack(pr.c, bytes);  // Plan's pack
  return vec * bytes == 16 ? pr.n * pr.s * (pr.c / vec) : 0;
}

int64_t WorkspaceFloats(const BnProblem& pr) noexcept {
  const Geometry g = Plan(pr);
  return pr.c * kBackwardCoefficients + static_cast<int64_t>(std::max(g.splits, g.one_pass_splits)) * pr.c * 2;
}

bool PrepareDevice(cudaStream_t stream) noexcept {
  const int device = CurrentDevice();
  if (device < 0) return false;
  DeviceCounters& d = counters[device];
  if (d.base.load(std::memory_order_acquire) == nullptr) {
    const std::lock_guard<std::mutex> lock(counters_mutex);
    if (d.base.load(std::memory_order_relaxed) == nullptr) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) return false;
      constexpr size_t kBytes = size_t{kMaxStreams} * kCounterWords * sizeof(int);
      int* p = nullptr;
      if (cudaMalloc(&p, kBytes) != cudaSuccess) return false;
      // Cleared before any stream may use them: not only `stream`.
      if (cudaMemsetAsync(p, 0, kBytes, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {
        cudaFree(p);
        return false;
      }
      d.base.store(p, std::memory_order_release);  // kept for the process's life
    }
  }
  return StreamSlot(device, stream) >= 0;
}

cudaError_t BnForwardTraining(const BnProblem& pr, const BnForwardArgs& a, cudaStream_t stream) noexcept {
  Params p{};
  p.x = a.x;
  p.residual = a.residual;
  p.out = a.y;
  p.weight = a.weight;
  p.bias = a.bias;
  p.running_mean = a.running_mean;
  p.running_var = a.running_var;
  p.mean = a.save_mean;
  p.invstd = a.save_invstd;
  p.coef = a.workspace;
  p.eps = a.eps;
  p.momentum = a.momentum;
  p.batches = a.num_batches_tracked;
  p.relu_mask = static_cast<unsigned char*>(a.relu_mask);
  if ((a.residual != nullptr) != pr.residual) return cudaErrorInvalidValue;
  if (a.relu_mask != nullptr && ReluMaskBytes(pr) == 0) return cudaErrorInvalidValue;
  return Launch(Pass::kForward, pr, p, stream);
}

cudaError_t BnForwardInference(const BnProblem& pr, const void* x, const void* residual, const float* weight,
                               const float* bias, const float* running_mean, const float* running_var, float eps,
                               void* y, float* workspace, cudaStream_t stream) noexcept {
  if ((residual != nullptr) != pr.residual || !Supported(pr)) return cudaErrorInvalidValue;
  Params p{};
  p.x = x;
  p.residual = residual;
  p.out = y;
  p.weight = weight;
  p.bias = bias;
  p.running_mean = const_cast<float*>(running_mean);
  p.running_var = const_cast<float*>(running_var);
  p.coef = workspace;
  p.eps = eps;
  p.c = static_cast<int>(pr.c);
  InferenceCoefficients<<<static_cast<int>((pr.c + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  return Launch(Pass::kInference, pr, p, stream);
}

cudaError_t BnBackwardTraining(const BnProblem& pr, const BnBackwardArgs& a, cudaStream_t stream) noexcept {
  // With a residual, y or its mask (exactly one); without, neither.
  const bool one_of_them = (a.y != nullptr) != (a.relu_mask != nullptr);
  const bool neither = a.y == nullptr && a.relu_mask == nullptr;
  if ((a.grad_residual != nullptr) != pr.residual || !(pr.residual ? one_of_them : neither))
    return cudaErrorInvalidValue;
  if (a.relu_mask != nullptr && ReluMaskBytes(pr) == 0) return cudaErrorInvalidValue;
  if (a.grad_y2 != nullptr && !pr.residual) return cudaErrorInvalidValue;
  Params p{};
  p.grad_y = a.grad_y;
  p.grad_y2 = a.grad_y2;
  p.x = a.x;
  p.y = a.y;
  p.out = a.grad_x;
  p.grad_residual = a.grad_residual;
  p.weight = a.weight;
  p.bias = a.bias;
  p.mean = const_cast<float*>(a.save_mean);
  p.invstd = const_cast<float*>(a.save_invstd);
  p.grad_weight = a.grad_weight;
  p.grad_bias = a.grad_bias;
  p.coef = a.workspace;
  p.relu_mask = static_cast<unsigned char*>(const_cast<void*>(a.relu_mask));
  return Launch(Pass::kBackward, pr, p, stream);
}

}  // namespace resnet::kernels

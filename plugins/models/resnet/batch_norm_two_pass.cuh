#pragma once
// The fused batch norm's two kernels each way (batch_norm_act_kernels.cu):
// the reduction (statistics forward; the gradients' sums backward) and the
// element-wise pass, NHWC and NCHW, and evaluation's constants.
#include "batch_norm_device.cuh"

namespace resnet::kernels::bn {

// NHWC reduction. Forward: sums of d and d^2 (d = x - the channel's first
// value); backward: of dz and dz (x - mean), writing dr = dz with a residual.
// The rows from the last to the first (what the kernel before it wrote
// last, the likeliest still in L2; 0.2-0.6% a step in each of the four
// ResNet cells at batch 1024 on an H200, against first to last).
// kMask (backward with a residual): y's ReLU mask read instead of y.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad = false,
          bool kMask = false>
__global__ void __launch_bounds__(kThreads, kReduceBlocksPerSm) ReduceNhwc(Params p, int tx) {
  // Launched as a programmatic dependent of the kernel before it where the
  // device has them (LaunchReduction): nothing of it runs until
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
    const int64_t at_step = step * p.c;
    int64_t at = (p.rows - 1 - row0) * p.c + c0;
#pragma unroll(kBackward ? 2 : 4)
    for (int64_t r = row0; r < p.rows; r += step, at -= at_step) row(at);
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

// The element-wise pass, NHWC: the reductions' geometry, a thread's channels
// fixed. Launched after a reduction, it waits for it (programmatic dependent
// launch, above) with its first row of inputs asked into L1 meanwhile.
// kMask (forward with a residual): y's ReLU mask written beside y.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kMask = false>
__global__ void __launch_bounds__(kThreads) ElementwiseNhwc(Params p, int tx) {
  constexpr int kK = Coefficients(kBackward);
  const int ty = kThreads / tx;
  const int lane_c = threadIdx.x % tx, lane_r = threadIdx.x / tx;
  const int c0 = (blockIdx.x * tx + lane_c) * kVec;
  const bool active = c0 < p.c && lane_r < ty;
  const T* x = static_cast<const T*>(p.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * ty + lane_r;
  const auto row_at = [&](int64_t r) { return r * p.c + c0; };
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

}  // namespace resnet::kernels::bn

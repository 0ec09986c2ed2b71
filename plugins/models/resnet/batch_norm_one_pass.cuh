#pragma once
// The fused batch norm's one kernel each way for NHWC tensors that fit the
// registers of blocks resident together (batch_norm_act_kernels.cu): the
// statistics, a wait for the channel tile's other blocks (as a thread block
// cluster, or through global memory), then the element-wise pass.
#include "batch_norm_device.cuh"

namespace resnet::kernels::bn {

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
  Pack<T, kVec> xs[kRows], dzs[kRows];  // dzs: backward only
  float a0[kVec] = {}, a1[kVec] = {};
  if (active) {
    float ref[kVec], scale[kVec] = {}, shift[kVec] = {};
    ReductionConstants<T, kVec, kBackward, kRelu, kResidual>(p, c0, ref, scale, shift);
    // Every load issued before the first add.
    Pack<T, kVec> gs[kRows], ys[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t at = (row0 + i * step) * p.c + c0;
      if (row0 + i * step >= p.rows) continue;
      xs[i] = LoadPack<T, kVec>(x, at);
      if constexpr (kBackward) gs[i] = LoadPack<T, kVec>(static_cast<const T*>(p.grad_y), at);
      if constexpr (kBackward && kResidual)
        ys[i] = kMask ? LoadReluMask<T, kVec>(p, at) : LoadPack<T, kVec>(static_cast<const T*>(p.y), at);
    }
    if constexpr (kBackward && kResidual && kSecondGrad) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        if (row0 + i * step >= p.rows) continue;
        gs[i] = AddSecondGrad<T, kVec>(p, gs[i], (row0 + i * step) * p.c + c0);
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (row0 + i * step >= p.rows) continue;
      dzs[i] = Accumulate<T, kVec, kBackward, kRelu, kResidual>(xs[i], gs[i], ys[i], ref, scale, shift, a0, a1);
      if constexpr (kBackward && kResidual)
        StorePack<T, kVec>(static_cast<T*>(p.grad_residual), (row0 + i * step) * p.c + c0, dzs[i]);
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
        out.v[j] = FromFloat<T>(BackwardDx(k[j], ToFloat(xs[i].v[j]), ToFloat(dzs[i].v[j])));
    } else {
      Pack<T, kVec> rv{};
      if constexpr (kResidual) rv = LoadPack<T, kVec>(static_cast<const T*>(p.residual), at);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out.v[j] = FromFloat<T>(
            Elementwise<T, false, kRelu, kResidual>::Apply(k[j], ToFloat(xs[i].v[j]), ToFloat(rv.v[j]), 0.f, 0.f));
      }
      if constexpr (kMask) StoreReluMask<T, kVec>(p, at, out);
    }
    StorePack<T, kVec>(static_cast<T*>(p.out), at, out);
  }
}

}  // namespace resnet::kernels::bn

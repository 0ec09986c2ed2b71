// See classifier_kernels.h. Rows (the forward, and grad_x in the backward):
// a block per kRows rows, each thread a pack of kVec features of those rows
// at a time, so that each weight read serves kRows rows (the weights are the
// larger operand at batch 128: ResNet50's are 80 KB of fp32, its rows 4 KB);
// the forward's k sums of each row in registers (kK of them, kK >= k),
// reduced across each warp by shuffles and then across the warps in shared
// memory, in warp order. Columns (grad_weight): a block per 64 features and
// chunk of rows, each lane two of them over every eighth row of the chunk,
// the warps' sums added in shared memory in warp order; up to kOneChunkRows
// rows one chunk writes grad_weight itself, above it each chunk writes its
// sums to the caller's workspace and a second kernel adds the chunks in
// order (one chunk per 64 features had few blocks for the many rows of batch
// 1024: 8 of them for ResNet18). The first column block of the first chunk
// also sums grad_y's columns for grad_bias. Nothing is allocated or cleared,
// so the kernels can be captured in a CUDA graph.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "classifier_kernels.h"
#include "kernel_host.h"
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
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 4;  // rows a block of the forward or of grad_x takes at a time
constexpr int kColumnsPerLane = 2;
constexpr int kColumnsPerBlock = 32 * kColumnsPerLane;
// grad_weight: rows summed in one chunk up to this many (the form measured at
// batch 128), else in chunks of at least kMinChunkRows, as many as fill the
// device once.
constexpr int64_t kOneChunkRows = 256;
constexpr int64_t kMinChunkRows = 64;
constexpr int64_t kMaxChunks = 1024;

struct ClassifierParams {
  const void* x;
  const float* weight;
  const float* bias;
  const float* grad_y;
  float* y;
  void* grad_x;
  float* grad_weight;
  float* grad_bias;
  float* workspace;  // chunks x k x c sums of grad_weight, where chunks > 1
  int64_t n;
  int c, k;
  int row_blocks;     // the backward's blocks [0, row_blocks) compute grad_x
  int column_blocks;  // then column_blocks x chunks blocks grad_weight (and grad_bias)
  int chunks;
  int64_t chunk_rows;
};

// kVec consecutive fp32 weights: 16-byte loads where kVec is a multiple of 4.
template <int kVec>
__device__ __forceinline__ void LoadWeights(const float* w, float (&out)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(w + i);
      out[i] = v.x;
      out[i + 1] = v.y;
      out[i + 2] = v.z;
      out[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = w[i];
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T, int kK, int kVec>
__global__ void __launch_bounds__(kThreads) ForwardKernel(ClassifierParams p) {
  __shared__ float partial[kWarps][kRows][kK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, packs = p.c / kVec;
  const T* x = static_cast<const T*>(p.x);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < p.n;
       row0 += static_cast<int64_t>(gridDim.x) * kRows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.n - row0));
    float sum[kRows][kK] = {};
    for (int pack = threadIdx.x; pack < packs; pack += kThreads) {
      const int col = pack * kVec;
      float xs[kRows][kVec];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < rows) {
          const Pack<T, kVec> v = LoadPack<T, kVec>(x, (row0 + r) * p.c + col);
#pragma unroll
          for (int i = 0; i < kVec; ++i) xs[r][i] = ToFloat<T>(v.v[i]);
        } else {
#pragma unroll
          for (int i = 0; i < kVec; ++i) xs[r][i] = 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < kK; ++j) {
        if (j >= p.k) break;
        float w[kVec];
        LoadWeights<kVec>(p.weight + static_cast<int64_t>(j) * p.c + col, w);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int i = 0; i < kVec; ++i) sum[r][j] = fmaf(xs[r][i], w[i], sum[r][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kK; ++j) {
        if (j >= p.k) break;
        const float s = WarpSum(sum[r][j]);
        if (lane == 0) partial[warp][r][j] = s;
      }
    __syncthreads();
    for (int o = threadIdx.x; o < rows * p.k; o += kThreads) {
      const int r = o / p.k, j = o % p.k;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += partial[w][r][j];
      p.y[(row0 + r) * p.k + j] = p.bias != nullptr ? s + p.bias[j] : s;
    }
    __syncthreads();  // partial is written again for the next rows
  }
}

// grad_x's rows: grad_x[row] = grad_y[row] W, kRows rows a block.
template <typename T, int kK, int kVec>
__device__ __forceinline__ void GradInputRows(const ClassifierParams& p) {
  __shared__ float g[kRows][kK];
  const int packs = p.c / kVec;
  T* gx = static_cast<T*>(p.grad_x);
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows; row0 < p.n;
       row0 += static_cast<int64_t>(p.row_blocks) * kRows) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.n - row0));
    __syncthreads();  // the previous rows' g is read
    if (threadIdx.x < kRows * kK) {
      const int r = threadIdx.x / kK, j = threadIdx.x % kK;
      g[r][j] = r < rows && j < p.k ? p.grad_y[(row0 + r) * p.k + j] : 0.0f;
    }
    __syncthreads();
    for (int pack = threadIdx.x; pack < packs; pack += kThreads) {
      const int col = pack * kVec;
      float sum[kRows][kVec] = {};
#pragma unroll
      for (int j = 0; j < kK; ++j) {
        if (j >= p.k) break;
        float w[kVec];
        LoadWeights<kVec>(p.weight + static_cast<int64_t>(j) * p.c + col, w);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float gj = g[r][j];
#pragma unroll
          for (int i = 0; i < kVec; ++i) sum[r][i] = fmaf(gj, w[i], sum[r][i]);
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        Pack<T, kVec> out;
#pragma unroll
        for (int i = 0; i < kVec; ++i) out.v[i] = FromFloat<T>(sum[r][i]);
        StorePack<T, kVec>(gx, (row0 + r) * p.c + col, out);
      }
    }
  }
}

// grad_weight's columns [first, first + 64) over one chunk of rows (where
// grad_weight is not null), and in the first column block of the first chunk
// grad_bias.
template <typename T, int kK>
__device__ __forceinline__ void GradWeightColumns(const ClassifierParams& p, int block) {
  __shared__ float partial[kWarps][kK][kColumnsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int column_block = block % p.column_blocks, chunk = block / p.column_blocks;
  const T* x = static_cast<const T*>(p.x);
  if (p.grad_weight != nullptr) {
    const int first = column_block * kColumnsPerBlock + lane * kColumnsPerLane;
    const int64_t begin = chunk * p.chunk_rows, end = min(p.n, begin + p.chunk_rows);
    float sum[kK][kColumnsPerLane] = {};
    for (int64_t row = begin + warp; row < end; row += kWarps) {
      float xs[kColumnsPerLane];
#pragma unroll
      for (int i = 0; i < kColumnsPerLane; ++i) xs[i] = first + i < p.c ? ToFloat<T>(x[row * p.c + first + i]) : 0.0f;
#pragma unroll
      for (int j = 0; j < kK; ++j) {
        if (j >= p.k) break;
        const float g = p.grad_y[row * p.k + j];
#pragma unroll
        for (int i = 0; i < kColumnsPerLane; ++i) sum[j][i] = fmaf(g, xs[i], sum[j][i]);
      }
    }
#pragma unroll
    for (int j = 0; j < kK; ++j)
#pragma unroll
      for (int i = 0; i < kColumnsPerLane; ++i) partial[warp][j][lane * kColumnsPerLane + i] = sum[j][i];
    __syncthreads();
    float* out = p.chunks > 1 ? p.workspace + static_cast<int64_t>(chunk) * p.k * p.c : p.grad_weight;
    for (int o = threadIdx.x; o < p.k * kColumnsPerBlock; o += kThreads) {
      const int j = o / kColumnsPerBlock, col = column_block * kColumnsPerBlock + o % kColumnsPerBlock;
      if (col >= p.c) continue;
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += partial[w][j][o % kColumnsPerBlock];
      out[static_cast<int64_t>(j) * p.c + col] = s;
    }
  }
  if (block != 0 || p.grad_bias == nullptr) return;
  __syncthreads();  // partial is reused
  float sum[kK] = {};
  for (int64_t row = threadIdx.x; row < p.n; row += kThreads) {
#pragma unroll
    for (int j = 0; j < kK; ++j)
      if (j < p.k) sum[j] += p.grad_y[row * p.k + j];
  }
#pragma unroll
  for (int j = 0; j < kK; ++j) {
    const float s = WarpSum(sum[j]);
    if (lane == 0) partial[warp][j][0] = s;
  }
  __syncthreads();
  if (threadIdx.x < p.k) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += partial[w][threadIdx.x][0];
    p.grad_bias[threadIdx.x] = s;
  }
}

template <typename T, int kK, int kVec>
__global__ void __launch_bounds__(kThreads) BackwardKernel(ClassifierParams p) {
  if (static_cast<int>(blockIdx.x) < p.row_blocks) {
    GradInputRows<T, kK, kVec>(p);
  } else {
    GradWeightColumns<T, kK>(p, static_cast<int>(blockIdx.x) - p.row_blocks);
  }
}

// grad_weight = the chunks' sums added in chunk order (elements = k x c).
__global__ void __launch_bounds__(kThreads)
    SumChunksKernel(const float* workspace, float* grad_weight, int64_t elements, int chunks) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < elements;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float s = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk) s += workspace[chunk * elements + i];
    grad_weight[i] = s;
  }
}

int RowBlocks(int64_t rows) {
  return static_cast<int>(std::clamp<int64_t>((rows + kRows - 1) / kRows, 1, int64_t{16} * SmCount()));
}

struct WeightPlan {
  int64_t column_blocks = 0;
  int64_t chunks = 1;
  int64_t chunk_rows = 0;
};

// grad_weight's blocks: 64 features each, the rows in one chunk or (above
// kOneChunkRows) in as many chunks as make one wave of blocks, each a
// multiple of kWarps rows and at least kMinChunkRows.
WeightPlan PlanWeight(const ClassifierProblem& pr, bool grad_weight, bool grad_bias) {
  WeightPlan plan;
  plan.chunk_rows = pr.n;
  if (!grad_weight) {
    plan.column_blocks = grad_bias ? 1 : 0;
    return plan;
  }
  plan.column_blocks = (pr.c + kColumnsPerBlock - 1) / kColumnsPerBlock;
  if (pr.n <= kOneChunkRows) return plan;
  const int64_t wave = (SmCount() + plan.column_blocks - 1) / plan.column_blocks;
  const int64_t chunks = std::clamp<int64_t>(wave, 1, std::min(kMaxChunks, pr.n / kMinChunkRows));
  const int64_t rows = (pr.n + chunks - 1) / chunks;
  plan.chunk_rows = (rows + kWarps - 1) / kWarps * kWarps;
  plan.chunks = (pr.n + plan.chunk_rows - 1) / plan.chunk_rows;
  return plan;
}

// The widest pack of features (16 bytes of x) that divides c and that every
// pointer is aligned to (x's for its pack, the weight's for 16-byte loads of
// fp32); else one feature.
int PackWidth(const ClassifierProblem& pr, const void* weight, std::initializer_list<const void*> activations) {
  const int bytes = ElementBytes(pr.dtype), width = 16 / bytes;
  if (pr.c % width != 0 || !Aligned(weight, 16)) return 1;
  for (const void* a : activations)
    if (a != nullptr && !Aligned(a, 16)) return 1;
  return width;
}

template <typename T, int kK, int kVec>
void LaunchVec(bool backward, const ClassifierParams& p, int blocks, cudaStream_t stream) {
  if (backward) {
    BackwardKernel<T, kK, kVec><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    ForwardKernel<T, kK, kVec><<<blocks, kThreads, 0, stream>>>(p);
  }
}

template <typename T, int kK>
void LaunchClasses(bool backward, int width, const ClassifierParams& p, int blocks, cudaStream_t stream) {
  if (width == 1) return LaunchVec<T, kK, 1>(backward, p, blocks, stream);
  return LaunchVec<T, kK, 16 / sizeof(T)>(backward, p, blocks, stream);
}

template <typename T>
void LaunchTyped(bool backward, int width, const ClassifierParams& p, int blocks, cudaStream_t stream) {
  if (p.k <= 4) return LaunchClasses<T, 4>(backward, width, p, blocks, stream);
  if (p.k <= 8) return LaunchClasses<T, 8>(backward, width, p, blocks, stream);
  return LaunchClasses<T, kMaxClasses>(backward, width, p, blocks, stream);
}

cudaError_t Launch(bool backward, const ClassifierProblem& pr, ClassifierParams p, int width, int blocks,
                   cudaStream_t stream) {
  if (!ClassifierSupported(pr)) return cudaErrorInvalidValue;
  p.n = pr.n;
  p.c = static_cast<int>(pr.c);
  p.k = static_cast<int>(pr.k);
  ForElementType(pr.dtype,
                 [&](auto t) { LaunchTyped<typename decltype(t)::type>(backward, width, p, blocks, stream); });
  if (backward && p.grad_weight != nullptr && p.chunks > 1) {
    const int64_t elements = static_cast<int64_t>(p.k) * p.c;
    const int sum_blocks =
        static_cast<int>(std::clamp<int64_t>((elements + kThreads - 1) / kThreads, 1, 4 * SmCount()));
    SumChunksKernel<<<sum_blocks, kThreads, 0, stream>>>(p.workspace, p.grad_weight, elements, p.chunks);
  }
  return cudaGetLastError();
}

}  // namespace

bool ClassifierSupported(const ClassifierProblem& pr) noexcept {
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  return pr.k >= 1 && pr.k <= kMaxClasses && pr.n >= 1 && pr.c >= 1 && pr.c <= kIntMax && pr.n <= kIntMax / pr.c;
}

cudaError_t ClassifierForward(const ClassifierProblem& pr, const void* x, const float* weight, const float* bias,
                              float* y, cudaStream_t stream) noexcept {
  if (x == nullptr || weight == nullptr || y == nullptr) return cudaErrorInvalidValue;
  ClassifierParams p{};
  p.x = x;
  p.weight = weight;
  p.bias = bias;
  p.y = y;
  return Launch(false, pr, p, PackWidth(pr, weight, {x}), RowBlocks(pr.n), stream);
}

int64_t ClassifierBackwardWorkspace(const ClassifierProblem& pr, bool grad_weight) noexcept {
  if (!grad_weight || !ClassifierSupported(pr)) return 0;
  const WeightPlan plan = PlanWeight(pr, true, false);
  return plan.chunks > 1 ? plan.chunks * pr.k * pr.c : 0;
}

cudaError_t ClassifierBackward(const ClassifierProblem& pr, const void* x, const float* weight, const float* grad_y,
                               void* grad_x, float* grad_weight, float* grad_bias, float* workspace,
                               cudaStream_t stream) noexcept {
  if (grad_y == nullptr || (grad_x != nullptr && weight == nullptr) || (grad_weight != nullptr && x == nullptr))
    return cudaErrorInvalidValue;
  if (grad_x == nullptr && grad_weight == nullptr && grad_bias == nullptr) return cudaSuccess;
  if (!ClassifierSupported(pr)) return cudaErrorInvalidValue;
  const WeightPlan plan = PlanWeight(pr, grad_weight != nullptr, grad_bias != nullptr);
  if (plan.column_blocks * plan.chunks > int64_t{1} << 24) return cudaErrorInvalidValue;
  if (plan.chunks > 1 && workspace == nullptr) return cudaErrorInvalidValue;
  ClassifierParams p{};
  p.x = x;
  p.weight = weight;
  p.grad_y = grad_y;
  p.grad_x = grad_x;
  p.grad_weight = grad_weight;
  p.grad_bias = grad_bias;
  p.workspace = workspace;
  p.row_blocks = grad_x != nullptr ? RowBlocks(pr.n) : 0;
  p.column_blocks = static_cast<int>(plan.column_blocks);
  p.chunks = static_cast<int>(plan.chunks);
  p.chunk_rows = plan.chunk_rows;
  const int width = grad_x != nullptr ? PackWidth(pr, weight, {grad_x}) : 1;
  return Launch(true, pr, p, width, p.row_blocks + p.column_blocks * p.chunks, stream);
}

}  // namespace resnet::kernels

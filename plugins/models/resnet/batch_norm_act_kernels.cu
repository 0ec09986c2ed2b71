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
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "batch_norm_act_kernels.h"
#include "batch_norm_one_pass.cuh"
#include "batch_norm_two_pass.cuh"
#include "kernel_host.h"
#include "path_log.h"
#include "trainbench/cuda_element.cuh"

namespace resnet::kernels {
namespace {

using namespace bn;  // NOLINT: the kernels and their parameters, this file's own
using trainbench::cuda::ForElementType;

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

// Blocks of `kernel` one multiprocessor holds at once, per device, asked once.
// `kernel` is the template argument, so each kernel has its own record.
template <auto kernel>
int ResidentBlocks() {
  static std::array<std::atomic<int>, kMaxDevices> blocks{};
  const int device = CurrentDevice();
  if (device < 0) return 0;
  int b = blocks[device].load(std::memory_order_relaxed);
  if (b == 0) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the two kernels run instead
      n = -1;
    }
    b = n > 0 ? n : -1;
    blocks[device].store(b, std::memory_order_relaxed);
  }
  return b;
}

// Blocks per channel tile of an NHWC element-wise pass (`kernel`): the
// rows' share, at most one wave of the blocks the device holds at once.
// Sized for 8 per SM, the bf16 passes (43-80 registers a thread: 3-5 blocks
// per SM) ran as a full wave and a partial one, and reached two thirds of
// the fp32 passes' bandwidth on the same shapes (H200, ResNet50 at batch
// 1024).
template <auto kernel>
int ElementwiseRowBlocks(const Geometry& g) {
  const int per_sm = ResidentBlocks<kernel>();
  if (per_sm <= 0) return g.rows_blocks;
  return static_cast<int>(std::clamp<int64_t>(int64_t{per_sm} * SmCount() / g.elem_tiles, 1, g.rows_blocks));
}

// A launch of kThreads-thread blocks over `grid` with one launch attribute
// (which the caller fills in, and keeps until the launch).
cudaLaunchConfig_t ConfigWith(dim3 grid, cudaStream_t stream, cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

// The launch of `kernel` as clusters of (1, splits, 1) blocks.
cudaLaunchConfig_t ClusterConfig(const Geometry& g, cudaStream_t stream, cudaLaunchAttribute& attribute) {
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = g.one_pass_splits;
  attribute.val.clusterDim.z = 1;
  return ConfigWith(dim3(g.one_pass_tiles, g.one_pass_splits), stream, attribute);
}

// Whether `kernel` runs as clusters of `splits` blocks on this device: its
// code for sm_90 or later loaded, cluster launches supported, and at least
// one such cluster fits (else the blocks wait for each other through global
// memory). Asked once per device and size.
template <auto kernel>
bool ClusterReady(const Geometry& g) {
  static std::array<std::array<std::atomic<signed char>, kPortableClusterBlocks + 1>, kMaxDevices> ready{};
  const int device = CurrentDevice();
  if (!g.sm90_launches || g.one_pass_splits > kPortableClusterBlocks || device < 0) return false;
  std::atomic<signed char>& known = ready[device][g.one_pass_splits];
  signed char r = known.load(std::memory_order_relaxed);
  if (r == 0) {
    int supported = 0, clusters = 0;
    cudaFuncAttributes attributes{};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = ClusterConfig(g, nullptr, attribute);
    const bool ok = cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device) == cudaSuccess &&
                    supported != 0 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                    attributes.binaryVersion >= 90 &&
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
  constexpr auto clustered = OnePassNhwc<T, kVec, kBackward, kRelu, kResidual, kRows, true, kSecondGrad, kMask>;
  if (ClusterReady<clustered>(g)) {
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = ClusterConfig(g, stream, attribute);
    if (cudaLaunchKernelEx(&config, clustered, p, g.one_pass_tx) == cudaSuccess) {
      trainbench::plugins::CountPath("batch_norm", "one_pass_cluster");
      return true;
    }
    (void)cudaGetLastError();  // a launch refused up front: the two kernels instead
    return false;
  }
  constexpr auto kernel = OnePassNhwc<T, kVec, kBackward, kRelu, kResidual, kRows, false, kSecondGrad, kMask>;
  if (!p.first_stream) return false;
  if (static_cast<int64_t>(ResidentBlocks<kernel>()) * SmCount() <
      static_cast<int64_t>(g.one_pass_tiles) * g.one_pass_splits)
    return false;
  kernel<<<dim3(g.one_pass_tiles, g.one_pass_splits), kThreads, 0, stream>>>(p, g.one_pass_tx);
  trainbench::plugins::CountPath("batch_norm", "one_pass_global_wait");
  return true;
}

template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad, bool kMask>
bool LaunchOnePassRows(const Geometry& g, const Params& p, cudaStream_t stream) {
  if constexpr (kVec * sizeof(T) != 16) {
    return false;
  } else {
    static_assert(std::size(kOnePassRows) == 2 && kOnePassRows[0] == 2 && kOnePassRows[1] == 4);
    switch (g.one_pass_rows) {
      case 2:
        return LaunchOnePass<T, kVec, kBackward, kRelu, kResidual, 2, kSecondGrad, kMask>(g, p, stream);
      case 4:
        return LaunchOnePass<T, kVec, kBackward, kRelu, kResidual, 4, kSecondGrad, kMask>(g, p, stream);
      default:
        return false;
    }
  }
}

// Whether the NHWC passes of training are launched as programmatic
// dependents of the kernel before them (above): on devices of compute
// capability 9.0 or later. The element-wise pass then starts while the
// reduction finishes, and the reduction's launch overlaps the last blocks of
// the convolution before it (about 0.85 us a batch norm; +0.1 to +1.8% a
// step at batch 1024 on an H200). Asked once per device.
bool DependentLaunchReady(const Geometry& g) {
  static std::array<std::atomic<signed char>, kMaxDevices> ready{};
  const int device = CurrentDevice();
  if (!g.sm90_launches || device < 0) return false;
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

// An NHWC kernel of (Params, tx) on `stream`, as a programmatic dependent of
// the kernel before it where `dependent` (falling back to the ordinary
// launch where the launch is refused up front).
template <auto kernel>
void LaunchNhwc(bool dependent, dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  if (dependent) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t config = ConfigWith(grid, stream, attribute);
    if (cudaLaunchKernelEx(&config, kernel, p, tx) == cudaSuccess) return;
    (void)cudaGetLastError();
  }
  kernel<<<grid, kThreads, 0, stream>>>(p, tx);
}

// The NHWC reduction of training on `stream`.
template <auto kernel>
void LaunchReduction(const Geometry& g, dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  LaunchNhwc<kernel>(DependentLaunchReady(g), grid, p, tx, stream);
}

// The NHWC element-wise pass, after the reduction just launched on `stream`.
template <auto kernel>
void LaunchElementwise(const Geometry& g, dim3 grid, const Params& p, int tx, cudaStream_t stream) {
  LaunchNhwc<kernel>(DependentLaunchReady(g), grid, p, tx, stream);
}

// kSecondGrad: the backward adds p.grad_y2 to dy (BnBackwardArgs::grad_y2).
// kMask (NHWC, with a residual): y's ReLU mask, p.relu_mask, written by the
// forward's element-wise pass and read by the backward's reduction.
template <typename T, int kVec, bool kBackward, bool kRelu, bool kResidual, bool kSecondGrad = false,
          bool kMask = false>
void LaunchTyped(const BnProblem& pr, const Geometry& g, const Params& p, cudaStream_t stream) {
  if (pr.layout == Layout::kNhwc) {
    if (LaunchOnePassRows<T, kVec, kBackward, kRelu, kResidual, kSecondGrad, kMask>(g, p, stream)) return;
    trainbench::plugins::CountPath("batch_norm", "two_kernels_nhwc");
    constexpr bool kReduceMask = kMask && kBackward, kElementwiseMask = kMask && !kBackward;
    LaunchReduction<ReduceNhwc<T, kVec, kBackward, kRelu, kResidual, kSecondGrad, kReduceMask>>(
        g, dim3(g.tiles, g.splits), p, g.tx, stream);
    constexpr auto elementwise = ElementwiseNhwc<T, kVec, kBackward, kRelu, kResidual, kElementwiseMask>;
    LaunchElementwise<elementwise>(g, dim3(g.elem_tiles, ElementwiseRowBlocks<elementwise>(g)), p, g.elem_tx, stream);
    return;
  }
  trainbench::plugins::CountPath("batch_norm", "two_kernels_nchw");
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
  trainbench::plugins::CountPath("batch_norm", "evaluation_kernel");
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
  Geometry g = Plan(pr, SmCount());
  g.sm90_launches = pr.sm90_launches;
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

bool OnePass(const BnProblem& pr) noexcept { return Supported(pr) && Plan(pr, SmCount()).one_pass_rows > 0; }

int ReduceTileChannels(const BnProblem& pr) noexcept {
  if (!Supported(pr) || pr.layout != Layout::kNhwc) return 0;
  const Geometry g = Plan(pr, SmCount());
  return g.tx * g.vec;
}

int64_t ReluMaskBytes(const BnProblem& pr) noexcept {
  if (!Supported(pr) || !pr.residual || pr.layout != Layout::kNhwc) return 0;
  const int bytes = ElementBytes(pr.dtype), vec = WidestPack(pr.c, bytes);  // Plan's pack
  return vec * bytes == 16 ? pr.n * pr.s * (pr.c / vec) : 0;
}

int64_t WorkspaceFloats(const BnProblem& pr) noexcept {
  const Geometry g = Plan(pr, SmCount());
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

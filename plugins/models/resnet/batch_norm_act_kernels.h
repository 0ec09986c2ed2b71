#pragma once
// CUDA kernels of the ResNets' fused batch normalisation: `act(bn(x) [+ r])`
// with act ReLU or none, and its backward, on raw device pointers (no
// LibTorch here, so this part builds with nvcc alone; batch_norm_act.cc wraps
// it as an autograd function).
//
// x: (N, C, H, W) of float, bfloat16 or half, fully contiguous NCHW or NHWC;
// r (the residual) and y likewise; per-channel tensors fp32. The arithmetic
// in fp32 (the statistics' sums, per block, are added in fp64):
//   training forward (two kernels: statistics, then the element-wise pass)
//     mean, var   over N, H, W (var biased; the running variance gets the
//                 unbiased one, as torch.nn.BatchNorm2d)
//     scale = w * invstd, shift = b - mean * scale, invstd = 1 / sqrt(var + eps)
//     y = round(act(fma(x, scale, shift) [+ r]))
//   backward (two kernels: the reduction, then the element-wise pass)
//     dz  = dy where y > 0 (ReLU), else 0; with no residual the mask is
//           recomputed from x exactly as the forward computed y, so y is not read
//     dr  = dz (written by the reduction, with a residual)
//     db  = sum dz, dw = sum dz (x - mean) * invstd
//     dx  = w invstd (dz - db / M - (x - mean) invstd^2 sum dz (x - mean) / M)
// Against the eager composite (batch_norm, add, relu) this moves each element
// 3 times forward instead of 5 (8 with the residual) and 5 times backward
// instead of 7 (7 instead of 8 with the residual), in 4 kernels instead of 6
// to 8. NHWC tensors small enough for at most 8 blocks per channel tile, of
// 16 channels or more (the ResNets' layers 2-4 at batch 128 and 32 px) go in one kernel each way, both
// passes' arithmetic unchanged but for the order of the sums: each element
// read once, the blocks of a channel tile waiting for each other between the
// statistics and the element-wise pass (as one thread block cluster on sm_90,
// their sums in distributed shared memory; elsewhere through global memory). The statistics kernels finish in
// their last block (a counter per channel tile, reset by that block), so no
// kernel of this file allocates or clears memory: all of them can be captured
// in a CUDA graph.
//
// On sm_90 and later the NHWC element-wise pass that follows a reduction is
// a programmatic dependent launch: its blocks start while the reduction
// finishes and wait for it before reading what it wrote.
//
// The counters are per stream (PrepareDevice allocates them for up to 80
// streams a device): kernels of this file may run on several streams at
// once, as the branches of a captured step do (plugins/models/resnet/side_stream.h).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "batch_norm_plan.h"
#include "kernel_types.h"

namespace resnet::kernels {

/// Whether a training forward and backward of `problem` are planned as one
/// kernel each on the current device (its multiprocessors decide; a kernel
/// whose blocks the device cannot keep resident together still falls back to
/// the two).
bool OnePass(const BnProblem& problem) noexcept;

/// Channels per tile of the NHWC training reductions planned on the current
/// device: 64, fewer where 64-channel tiles would leave it short of blocks
/// (for tests and benchmarks).
int ReduceTileChannels(const BnProblem& problem) noexcept;
/// fp32 elements of the workspace a training forward or backward needs.
int64_t WorkspaceFloats(const BnProblem& problem) noexcept;

/// Bytes of the ReLU mask a training forward with a residual can write for
/// its backward instead of the backward reading y (BnForwardArgs::relu_mask):
/// one byte per 16-byte pack of a row, bit j for the pack's element j, set
/// where y > 0 as stored. 0 where the kernels write none: no residual, NCHW,
/// or channels that 16-byte packs do not divide.
int64_t ReluMaskBytes(const BnProblem& problem) noexcept;

/// Allocates and clears this device's counters, once (synchronising
/// `stream`), and gives `stream` its own; false when that cannot be done now
/// (first called inside a stream capture, or 80 streams of the device have
/// taken theirs). Kernels on a stream that was not prepared fail with
/// cudaErrorNotReady unless a slot is left for it.
bool PrepareDevice(cudaStream_t stream) noexcept;

struct BnForwardArgs {
  const void* x;
  const void* residual;  ///< null without one
  const float* weight;
  const float* bias;
  float* running_mean;  ///< null: running statistics not tracked
  float* running_var;
  int64_t* num_batches_tracked;  ///< null: not counted; else one added per call
  float eps, momentum;
  void* y;
  float* save_mean;  ///< (C): the batch mean and 1 / sqrt(var + eps)
  float* save_invstd;
  float* workspace;  ///< WorkspaceFloats(problem)
  /// Null, or ReluMaskBytes(problem) bytes (not 0) that the forward fills
  /// with y's ReLU mask for BnBackwardArgs::relu_mask.
  void* relu_mask = nullptr;
};

/// Batch statistics, running statistics updated, y written.
cudaError_t BnForwardTraining(const BnProblem& problem, const BnForwardArgs& args, cudaStream_t stream) noexcept;

/// Evaluation: y = act(x * scale + shift [+ r]) from the running statistics.
/// `workspace`: 2 * C floats.
cudaError_t BnForwardInference(const BnProblem& problem, const void* x, const void* residual, const float* weight,
                               const float* bias, const float* running_mean, const float* running_var, float eps,
                               void* y, float* workspace, cudaStream_t stream) noexcept;

struct BnBackwardArgs {
  const void* grad_y;
  const void* x;
  const void* y;  ///< the forward's output: read with a residual (unless relu_mask), else null
  const float* weight;
  const float* bias;
  const float* save_mean;
  const float* save_invstd;
  void* grad_x;
  void* grad_residual;  ///< with a residual, else null
  float* grad_weight;
  float* grad_bias;
  float* workspace;  ///< WorkspaceFloats(problem)
  /// With a residual: null, or a second gradient of y that the kernels add
  /// to grad_y where they read it (in fp32, rounded to the element type, as
  /// autograd adds the two gradients of a tensor that two layers read: a
  /// block's output, read by the next block's first convolution and by its
  /// residual branch), instead of a separate add before them.
  const void* grad_y2;
  /// With a residual: null, or the mask the forward wrote
  /// (BnForwardArgs::relu_mask), read instead of y (y then null): one byte
  /// in place of each 16-byte pack of y.
  const void* relu_mask = nullptr;
};

cudaError_t BnBackwardTraining(const BnProblem& problem, const BnBackwardArgs& args, cudaStream_t stream) noexcept;

}  // namespace resnet::kernels

#pragma once
// act(batch_norm(x) [+ residual]) for the ResNets, act ReLU or none: on CUDA
// (when this build has the kernels, see batch_norm_act_kernels.h) two kernels
// forward and two backward for the whole chain; elsewhere, and with
// `fused` false, LibTorch's composite (the module's batch_norm, an in-place
// add and ReLU), as torchvision's block.

#include <torch/types.h>

#include <utility>

#include "trainbench/sdk/support/batch_norm.h"

namespace resnet {

/// Whether this build has the CUDA kernels.
bool FusedKernelsBuilt() noexcept;

/// How the fused kernels may run in training (the ResNets' options).
struct BnLaunch {
  /// batchnorm_one_pass: on channels_last tensors that fit on chip, one
  /// kernel each way (see batch_norm_act_kernels.h), else always two.
  bool one_pass = true;
  /// sm90_launches: on GPUs of compute capability 9.0 and later, thread
  /// block clusters and programmatic dependent launches; false: launched as
  /// on earlier GPUs.
  bool sm90_launches = true;
};

/// The fused path takes CUDA tensors of float, bfloat16 or half, NCHW or
/// channels_last, a module with fp32 affine parameters and a momentum, and
/// statistics of this rank alone (not cross-rank); in training mode it
/// updates the running statistics as the module would. Anything else, and
/// `fused` false, goes the composite way.
torch::Tensor BatchNormAct(trainbench::sdk::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                           bool relu, bool fused, BnLaunch launch = {});

/// relu(batch_norm(x) + residual) as two tensors of the same values, for a
/// residual block's output that the next block reads twice (its first
/// convolution, its residual branch): on the fused path two outputs of one
/// node, whose two gradients the backward's kernels add where they read them
/// (in fp32, rounded as autograd rounds its own add of them) instead of a
/// separate add before it; elsewhere the same tensor twice.
std::pair<torch::Tensor, torch::Tensor> BatchNormActTwice(trainbench::sdk::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                                          const torch::Tensor& residual, bool fused,
                                                          BnLaunch launch = {});

/// Whether a training step of `x` (CUDA, 4-d) would run one kernel each way
/// with `one_pass` on this device (for tests and benchmarks).
bool OnePassApplies(const torch::Tensor& x, bool relu, bool residual);

/// Whether a fused training step of `x` (CUDA, 4-d) with a residual keeps
/// y's ReLU mask for the backward instead of y: channels_last, channels of
/// whole 16-byte packs (for tests and benchmarks).
bool ReluMaskApplies(const torch::Tensor& x);

/// Channels per tile of the fused training reductions of `x` (CUDA,
/// channels_last) on its device; 0 where the fused kernels do not take it or
/// are not built (for tests and benchmarks).
int ReduceTileChannels(const torch::Tensor& x);

}  // namespace resnet

#pragma once
/// @file
/// Batch normalisation that can normalise over the combined batch of all
/// ranks of a data-parallel cell (what PyTorch calls SyncBatchNorm).
///
/// In a data-parallel cell each rank sees a slice of every batch, so a plain
/// BatchNorm normalises with its slice's statistics: the training is then not
/// the one-GPU training with the combined batch, only close to it. A model
/// built from trainbench::sdk::BatchNorm2d (a drop-in replacement for
/// torch::nn::BatchNorm2d: same options, parameters and buffers) lets the
/// host switch it to cross-rank statistics (`sync_batchnorm: true` on a device
/// entry): per channel, every rank's mean and variance are gathered with one
/// all-reduce in the forward pass and combined, and the sums of dy and
/// dy*(x-mean) are added with one in the backward pass (as
/// torch.nn.SyncBatchNorm does). Running statistics then come from the
/// combined batch and are the same on every rank. Outside a data-parallel cell, and in eval
/// mode, it is exactly torch::nn::BatchNorm2d.

#include <torch/autograd.h>
#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "trainbench/sdk/cross_rank_sum.h"

namespace trainbench::sdk {

namespace detail {

inline torch::Tensor PerChannel(const torch::Tensor& t) { return t.view({1, -1, 1, 1}); }

/// Batch normalisation with given (cross-rank) statistics and the backward
/// pass of torch.nn.SyncBatchNorm: the per-channel sums of dy and dy*(x-mean)
/// are summed over the ranks (one all-reduce), then
///   dx = (dy - sum(dy)/N - (x-mean) * invstd^2 * sum(dy*(x-mean))/N) * invstd * weight
/// with N the combined count; weight and bias get this rank's share (the
/// parameter all-reduce adds the shares). Element-wise work in the
/// statistics' type (fp32, or fp64 for fp64 inputs).
class CrossRankBatchNormFunction : public torch::autograd::Function<CrossRankBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& mean,
                               const torch::Tensor& invstd, const torch::Tensor& count, CrossRankSum* sum) {
    ctx->save_for_backward({input, weight, mean, invstd, count});
    ctx->saved_data["sum"] = reinterpret_cast<int64_t>(sum);
    torch::Tensor out = (input - PerChannel(mean)) * PerChannel(invstd);
    if (weight.defined()) out = out * PerChannel(weight) + PerChannel(bias);
    return out.to(input.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &count = saved[4];
    auto* sum = reinterpret_cast<CrossRankSum*>(ctx->saved_data["sum"].toInt());
    const torch::Tensor dy = grads[0].to(mean.scalar_type());
    const torch::Tensor xmu = input - PerChannel(mean);
    torch::Tensor sums = torch::cat({dy.sum({0, 2, 3}), (dy * xmu).sum({0, 2, 3})});
    const int64_t channels = mean.size(0);
    torch::Tensor grad_weight, grad_bias;
    if (weight.defined()) {
      grad_bias = sums.narrow(0, 0, channels).clone();
      grad_weight = sums.narrow(0, channels, channels) * invstd;
    }
    sum->SumInPlace(sums);
    const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / count;
    const torch::Tensor mean_dy_xmu = sums.narrow(0, channels, channels) / count;
    torch::Tensor scale = weight.defined() ? invstd * weight : invstd;
    const torch::Tensor dx =
        (dy - PerChannel(mean_dy) - xmu * PerChannel(invstd * invstd * mean_dy_xmu)) * PerChannel(scale);
    return {dx.to(input.scalar_type()),
            grad_weight,
            grad_bias,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace detail

/// torch::nn::BatchNorm2d whose training-mode statistics can span the ranks
/// of a data-parallel cell (see the file comment). Same options, parameter
/// and buffer names as torch::nn::BatchNorm2d (checkpoints are compatible);
/// built on NormImplBase because LibTorch does not export what a subclass of
/// BatchNorm2dImpl would need.
class BatchNorm2dImpl : public torch::nn::NormImplBase<2, BatchNorm2dImpl, torch::nn::BatchNormOptions> {
 public:
  using torch::nn::NormImplBase<2, BatchNorm2dImpl, torch::nn::BatchNormOptions>::NormImplBase;
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(torch::nn::BatchNormOptions(num_features)) {}

  torch::Tensor forward(const torch::Tensor& input) {
    _check_input_dim(input);
    if (cross_rank_ != nullptr && is_training()) return CrossRankForward(input);
    // torch::nn::BatchNorm2d's forward.
    double momentum = options.momentum().value_or(0.0);
    if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) momentum = CountBatch();
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     is_training() || !options.track_running_stats(), momentum,
                                                     options.eps());
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "trainbench::sdk::BatchNorm2d(" << options.num_features() << ", eps=" << options.eps()
           << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats()
           << (cross_rank_ != nullptr ? ", cross_rank" : "") << ")";
  }

  /// Normalise over all ranks with `sum` (null: this rank's batch only). The
  /// host keeps `sum` alive while the model trains.
  void SetCrossRankSum(CrossRankSum* sum) noexcept { cross_rank_ = sum; }

  /// Whether training normalises over all ranks (SetCrossRankSum).
  bool HasCrossRankSum() const noexcept { return cross_rank_ != nullptr; }

  /// Counts one training batch; returns the running statistics' update
  /// factor: the momentum, or a cumulative average without one. For a
  /// model's own batch-norm kernels that update the running statistics.
  double CountBatch() {
    num_batches_tracked.add_(1);
    return options.momentum().has_value() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
  }

 private:
  void _check_input_dim(const torch::Tensor& input) override {
    TORCH_CHECK(input.dim() == 4, "BatchNorm2d: expected a 4-D input, got ", input.dim(), "-D");
  }

  torch::Tensor CrossRankForward(const torch::Tensor& input) {
    const int64_t channels = input.size(1);
    const int world = cross_rank_->WorldSize();
    // fp32 statistics whatever the input's precision (as cuDNN), fp64 for fp64.
    const auto compute = input.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    torch::Tensor mean, var, count;
    {
      torch::NoGradGuard no_grad;
      // Each rank's mean and variance, gathered through one sum of zero-padded rows, and
      // combined in fp64 (Chan et al.; sums of x and x^2 would lose digits
      // to cancellation where |mean| >> std).
      const auto [local_var, local_mean] = torch::var_mean(input.to(compute), {0, 2, 3}, /*unbiased=*/false);
      torch::Tensor all = torch::zeros({world, 2 * channels + 1}, local_mean.options().dtype(torch::kFloat64));
      all.select(0, cross_rank_->Rank())
          .copy_(torch::cat({local_mean.to(torch::kFloat64), local_var.to(torch::kFloat64),
                             torch::full({1}, static_cast<double>(input.numel() / channels), all.options())}));
      cross_rank_->SumInPlace(all);
      const torch::Tensor counts = all.narrow(1, 2 * channels, 1);  // [world, 1]
      const torch::Tensor means = all.narrow(1, 0, channels), vars = all.narrow(1, channels, channels);
      const torch::Tensor total = counts.sum();
      const torch::Tensor mean64 = (counts * means).sum(0) / total;
      const torch::Tensor var64 = (counts * (vars + (means - mean64).pow(2))).sum(0) / total;
      mean = mean64.to(compute);
      var = var64.to(compute);
      count = total.to(compute);
      if (options.track_running_stats()) {
        const double momentum = CountBatch();
        // The running variance is the unbiased one, as in torch::nn::BatchNorm.
        const torch::Tensor unbiased = var64 * total / (total - 1).clamp_min(1.0);
        running_mean.mul_(1.0 - momentum).add_(mean64.to(running_mean.dtype()), momentum);
        running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype()), momentum);
      }
    }
    const torch::Tensor invstd = torch::rsqrt(var + options.eps());
    return detail::CrossRankBatchNormFunction::apply(input, options.affine() ? weight : torch::Tensor(),
                                                     options.affine() ? bias : torch::Tensor(), mean, invstd, count,
                                                     cross_rank_);
  }

  CrossRankSum* cross_rank_ = nullptr;
};
TORCH_MODULE(BatchNorm2d);

}  // namespace trainbench::sdk

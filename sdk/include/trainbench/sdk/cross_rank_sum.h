#pragma once
/// @file
/// What the host hands a model for batch normalisation over the combined
/// batch of a data-parallel cell (Model::SyncBatchNorm, SDK ABI 1.1);
/// trainbench/sdk/support/batch_norm.h has a BatchNorm2d that uses it.

#include <torch/types.h>

namespace trainbench::sdk {

/// Sums tensors over the ranks of a data-parallel cell; implemented by the
/// host (SDK ABI 1.1), handed to a model by Model::SyncBatchNorm().
class CrossRankSum {
 public:
  virtual ~CrossRankSum() = default;
  /// Replaces the contiguous tensor `t` by its sum over all ranks. Collective:
  /// every rank calls it with a tensor of the same shape, in the same order.
  /// Throws on a communication failure.
  virtual void SumInPlace(torch::Tensor& t) = 0;
  /// This rank (0 .. WorldSize() - 1).
  virtual int Rank() const noexcept = 0;
  /// Number of ranks.
  virtual int WorldSize() const noexcept = 0;
};

}  // namespace trainbench::sdk

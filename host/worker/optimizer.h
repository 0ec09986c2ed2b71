#pragma once
// Optimizers of the training loop. SGD is written with LibTorch's multi-tensor
// ("foreach") kernels, as PyTorch's own torch.optim.SGD does by default: a
// handful of launches per step instead of several per parameter, which is
// what keeps a GPU busy with small models, and what a CUDA graph captures.

#include <torch/types.h>

#include <memory>
#include <vector>

#include "trainbench/protocol/cell_spec.h"

namespace trainbench::worker {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Called just before the backward whose gradients the next Step() uses:
  /// whether some parameters will be updated during that backward, as soon
  /// as their gradients are final (`training.optimizer.overlap`: SGD's fused
  /// kernel on one CUDA device, while a CUDA graph is being captured), on a
  /// side stream that Step() joins. Default: no.
  virtual bool BeginBackward() { return false; }
  /// One update from the parameters' current gradients (parameters without
  /// one are left alone), or the rest of it after BeginBackward(). Makes the
  /// host wait for nothing.
  virtual void Step() = 0;
  virtual void SetLearningRate(double lr) = 0;
  /// How many parameters' updates ran during a backward so far (tests).
  virtual int64_t UpdatedDuringBackward() const { return 0; }
};

/// SGD (momentum, dampening 0, weight decay, Nesterov) or Adam, from the cell.
std::unique_ptr<Optimizer> MakeOptimizer(const protocol::OptimizerSettings& optimizer,
                                         std::vector<torch::Tensor> params);

}  // namespace trainbench::worker

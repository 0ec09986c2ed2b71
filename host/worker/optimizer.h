#pragma once
// Optimizers of the training loop. SGD is written with LibTorch's multi-tensor
// ("foreach") kernels, as PyTorch's own torch.optim.SGD does by default: a
// handful of launches per step instead of several per parameter, which is
// what keeps a GPU busy with small models, and what a CUDA graph captures.

#include <torch/types.h>

#include <memory>
#include <vector>

#include "mixed_precision.h"
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
  /// The learning rate of every update from the next step on, those it
  /// handed to working copies (UpdateInBackward) included.
  virtual void SetLearningRate(double lr) = 0;
  /// Takes over the updates of `copies`' parameters inside the backward,
  /// each group's as soon as its gradients are final (PyTorch's
  /// optimizer-in-backward): SGD with `training.optimizer.overlap`, where the
  /// copies can (MixedPrecision::CanUpdate). The updates stay this object's:
  /// its arithmetic, its learning rate; its Step() then leaves those
  /// parameters alone. Returns whether it took them. Default: no.
  virtual bool UpdateInBackward(MixedPrecision& /*copies*/) { return false; }
  /// How many parameters' updates ran during a backward so far (tests).
  virtual int64_t UpdatedDuringBackward() const { return 0; }
};

/// SGD (momentum, dampening 0, weight decay, Nesterov) or Adam, from the cell.
std::unique_ptr<Optimizer> MakeOptimizer(const protocol::OptimizerSettings& optimizer,
                                         std::vector<torch::Tensor> params);

}  // namespace trainbench::worker

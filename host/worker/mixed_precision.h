#pragma once
// The worker's working copies of a model's parameter groups
// (sdk::WorkingCopies, SDK 1.5), one of two ways by what the cell runs:
//
// - Casts. Under autocast a group's fp32 parameters are cast to its type by
//   one CUDA kernel for the whole group, and their gradients back to fp32 by
//   one more in the backward, into the parameters' `.grad` (LibTorch's
//   autocast casts each weight alone, one kernel each way per weight). The
//   optimizer then updates them like every other parameter.
// - Mixed-precision SGD (UpdateWith), as apex's FusedSGD and MLPerf's ResNet
//   submissions run it: the copies are kept from step to step, and when a
//   group's gradients are final (its node of the backward runs) one kernel
//   reads their low-precision gradients, updates the fp32 parameters and
//   momentum buffers with torch.optim.SGD's arithmetic and writes the next
//   forward's copies: one pass where the casts take three (the cast for the
//   forward, the gradients' cast back, the optimizer's update), and neither
//   cast waits on the step's critical path: inside a captured step each
//   group's update runs on a side stream beside the rest of the backward,
//   joined when the backward's last group has been updated. The parameters
//   get no `.grad`. The optimizer (optimizer.h) owns these updates, as
//   PyTorch's optimizer-in-backward owns its per-parameter steps: it hands
//   this object its arithmetic, whose learning rate it keeps, and leaves
//   the groups' parameters out of its own Step().
//
// Outside autocast (no type asked) a group is the parameters themselves; in
// SGD's way behind the update's node, the update reading fp32 gradients.
// A copy is made again where its parameter changed since it was written (its
// version counter moved: anything but the update changing it in place), so
// copies never go stale.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "trainbench/sdk/working_copies.h"

namespace trainbench::worker {

/// torch.optim.SGD's settings (dampening 0, not maximising), as the
/// optimizer that owns them holds them.
struct SgdArithmetic {
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

class MixedPrecision final : public sdk::WorkingCopies {
 public:
  /// Whether this build has the CUDA kernels (the casts' single launch and
  /// the SGD update).
  static bool KernelsBuilt();

  /// Whether the groups' updates can be SGD's way: this build has the
  /// kernels and every parameter is a dense fp32 CUDA tensor on one device.
  static bool UpdatesApply(const std::vector<std::vector<torch::Tensor>>& groups);

  /// No groups until Adopt() (the object is handed to the model first).
  MixedPrecision();
  ~MixedPrecision() override;
  MixedPrecision(const MixedPrecision&) = delete;
  MixedPrecision& operator=(const MixedPrecision&) = delete;

  /// `groups`: the model's (already checked: its parameters, each once),
  /// cast for the forward and left to the optimizer.
  void Adopt(std::vector<std::vector<torch::Tensor>> groups);
  /// Whether UpdateWith() can take the groups' updates (UpdatesApply()).
  bool CanUpdate() const;
  /// From the next backward on, each group's update runs in it with `sgd`'s
  /// arithmetic, read at each update (the owner's learning rate changes
  /// reach it); throws std::invalid_argument where CanUpdate() is false.
  /// Momentum buffers start at zero (torch.optim.SGD's first step: the
  /// gradient).
  void UpdateWith(std::shared_ptr<const SgdArithmetic> sgd);

  void BeginForward() override;
  std::vector<torch::Tensor> Group(size_t group, std::optional<c10::ScalarType> type) override;

  /// Whether this object updates its parameters (UpdateWith).
  bool Updates() const;
  /// Every parameter of every group.
  std::vector<torch::Tensor> Parameters() const;
  /// The number of groups.
  size_t Groups() const;

  struct State;

 private:
  std::shared_ptr<State> state_;  // shared with the autograd nodes of backwards still to run
};

}  // namespace trainbench::worker

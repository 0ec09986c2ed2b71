#pragma once
/// @file
/// The parameters a model reads through the host (SDK ABI 1.5): the point
/// where a group of parameters' gradients are final, and the precision the
/// forward reads them in, without the model knowing the optimizer.
///
/// A model that runs its own operations in a lower precision than its fp32
/// parameters (its convolutions under bf16 autocast, say) reads each
/// parameter through a copy in that precision. Optimizers want two things
/// from such a model, and both are about the parameters, not about the
/// arithmetic: when a group's gradients are final (so that its update can
/// start beside the rest of the backward), and what precision the forward
/// read (so that the update can write the next forward's copy in the same
/// pass instead of a cast per parameter each way, as apex's and MLPerf's
/// mixed-precision SGD do). Model::UseWorkingCopies() hands the model the
/// host's object; the model says which parameters it reads through it, in
/// groups, and asks for a group's working copies at each forward.

#include <c10/core/ScalarType.h>
#include <torch/types.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace trainbench::sdk {

/// The host's working copies of a model's parameter groups; implemented by
/// the host (SDK ABI 1.5), handed to a model by Model::UseWorkingCopies(),
/// kept alive by the host while it trains the model.
class WorkingCopies {
 public:
  virtual ~WorkingCopies() = default;

  /// Called by the model at the start of each Forward() that reads any group.
  virtual void BeginForward() = 0;

  /// Group `group`'s parameters (in the order the model listed them) for one
  /// forward, each with its parameter's sizes and strides: in `type` (bf16
  /// or half) where given, else in the parameters' own precision. With grad
  /// mode on they are behind one autograd node per group, whose backward
  /// runs once the gradients of every use of the group in this forward have
  /// reached it (the group's gradients are final there: the model asks for a
  /// group just before its first use, so that autograd runs that node right
  /// after the group's last use in the backward). What the host does there
  /// is the optimizer's business: pass fp32 gradients on to the parameters'
  /// `.grad`, or update the group itself (the parameters then get no
  /// `.grad`). The model must not read a group's parameters any other way
  /// in a forward that asked for the group. Throws std::out_of_range for a
  /// group the model did not list; the model's Forward() reports it.
  virtual std::vector<torch::Tensor> Group(size_t group, std::optional<c10::ScalarType> type) = 0;
};

}  // namespace trainbench::sdk

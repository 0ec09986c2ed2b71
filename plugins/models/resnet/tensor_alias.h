#pragma once
// A second tensor on a tensor's memory, for the ResNets' autograd functions.

#include <torch/types.h>

namespace resnet {

/// A new tensor on `t`'s memory, not a view: autograd treats it as a tensor
/// of its own (a node's second output for a second reader, or a kept tensor
/// handed to this step's graph without the history of the last).
inline torch::Tensor Alias(const torch::Tensor& t) {
  return torch::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

}  // namespace resnet

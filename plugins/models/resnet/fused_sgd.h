#pragma once
// SGD's update of the ResNets' convolution weights inside their backward
// (sdk::Model::TakeSgdUpdates), mixed-precision SGD as apex's FusedSGD and
// MLPerf's ResNet submissions run it: under autocast the convolutions read a
// low-precision copy of each fp32 weight that this class keeps, and when a
// stage's weight gradients are final (its node of the backward runs) one
// kernel reads their low-precision gradients, updates the fp32 weights and
// momentum buffers with torch.optim.SGD's arithmetic and writes the next
// forward's copies (weight_cast_kernels.h, SgdTensors). That is one pass
// where autocast's path takes three (the weights cast for the forward, the
// gradients cast back to fp32, the optimizer's update), and neither cast
// waits on the step's critical path any more: inside a captured step the
// update runs on a side stream beside the rest of the backward
// (side_stream.h), joined by the last stage's node.
// Without autocast the convolutions read the fp32 weights and the update
// runs the same way (it keeps copies made earlier current).
//
// A copy is made again where its weight changed since it was written (its
// version counter moved: anything but this class's kernel changing the
// weight in place), so the copies never go stale.

#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "trainbench/sdk/model.h"

namespace resnet {

/// Whether this build has the update kernel (CUDA).
bool FusedSgdBuilt();

/// The SGD state of the weights a model took (groups: the model's stages,
/// each updated as one once its gradients are final).
class SgdWeights {
 public:
  /// Throws std::invalid_argument unless every weight is a dense fp32 CUDA
  /// tensor on one device, or where this build has no kernel. Momentum
  /// buffers start at zero (torch.optim.SGD's first step: the gradient).
  SgdWeights(const trainbench::sdk::SgdSettings& sgd, std::vector<std::vector<torch::Tensor>> groups);
  ~SgdWeights();
  SgdWeights(const SgdWeights&) = delete;
  SgdWeights& operator=(const SgdWeights&) = delete;

  void SetLearningRate(double lr);

  /// Before a forward's first Weights().
  void BeginForward();

  /// Group g's weights for one forward, in the group's order: in `cast`
  /// (bf16 or half) the kept copies, else the weights' own memory; with
  /// grad mode on, behind one autograd node whose backward updates the
  /// group from the gradients that reach it (and passes none on).
  std::vector<torch::Tensor> Weights(size_t g, std::optional<at::ScalarType> cast);

  /// Every weight taken (the host's optimizer leaves them alone).
  std::vector<torch::Tensor> All() const;

  struct State;

 private:
  std::shared_ptr<State> state_;  // and the autograd nodes of backwards still to run
};

}  // namespace resnet

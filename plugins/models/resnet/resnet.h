#pragma once
// torchvision's ResNet (v1.5: stride on the 3x3 conv of a bottleneck), with
// the same module tree, parameter names, shapes and initialisation, so that a
// state dict maps one to one. `stem` chooses torchvision's ImageNet stem
// (7x7/2 conv + 3x3/2 max-pool, what the study used on 32x32 inputs) or the
// usual CIFAR stem (3x3/1 conv, no max-pool).

#include <memory>
#include <string>
#include <vector>

#include "trainbench/sdk/model.h"
#include "trainbench/sdk/options.h"

namespace trainbench::plugins {

/// Blocks per stage and block type: {2,2,2,2} basic = ResNet18,
/// {3,4,6,3} bottleneck = ResNet50.
struct ResNetSpec {
  std::vector<int64_t> layers;
  bool bottleneck;
};

/// Builds the model from validated options `num_classes` and `stem`.
std::unique_ptr<sdk::Model> MakeResNet(const ResNetSpec& spec, const sdk::Options& options);

}  // namespace trainbench::plugins

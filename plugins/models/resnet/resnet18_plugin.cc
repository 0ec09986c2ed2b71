// ResNet18: torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]);
// 11,689,512 parameters with 1000 classes, 11,181,642 with 10.
#include "resnet.h"
#include "resnet_params.h"
#include "trainbench/sdk/plugin.h"

namespace {
std::unique_ptr<trainbench::sdk::Model> Make(const trainbench::sdk::Options& options) {
  return trainbench::plugins::MakeResNet({{2, 2, 2, 2}, /*bottleneck=*/false}, options);
}
}  // namespace

TRAINBENCH_MODEL_PLUGIN("resnet18", "1.4.0", "ResNet18 (torchvision architecture)", trainbench::plugins::kResNetParams,
                        Make)

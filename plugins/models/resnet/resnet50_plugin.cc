// ResNet50: torchvision's resnet50 (Bottleneck v1.5, [3, 4, 6, 3]);
// 25,557,032 parameters with 1000 classes, 23,528,522 with 10.
#include "resnet.h"
#include "resnet_params.h"
#include "trainbench/sdk/plugin.h"

namespace {
std::unique_ptr<trainbench::sdk::Model> Make(const trainbench::sdk::Options& options) {
  return trainbench::plugins::MakeResNet({{3, 4, 6, 3}, /*bottleneck=*/true}, options);
}
}  // namespace

TRAINBENCH_MODEL_PLUGIN("resnet50", "1.4.0", "ResNet50 (torchvision architecture, v1.5)",
                        trainbench::plugins::kResNetParams, Make)

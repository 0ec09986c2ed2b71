#pragma once
// Options shared by the ResNet plugins.
#include "trainbench/sdk/abi.h"

namespace trainbench::plugins {

inline const TbParamSpec kResNetParams[] = {
    {"num_classes", TB_PARAM_INT, "10", "number of output classes", nullptr, 1, 2, 100000},
    {"stem", TB_PARAM_ENUM, "\"imagenet\"",
     "imagenet: 7x7/2 conv + max-pool (torchvision, as in the study); cifar: 3x3/1 conv, no pool", "imagenet,cifar", 0,
     0, 0},
};

}  // namespace trainbench::plugins

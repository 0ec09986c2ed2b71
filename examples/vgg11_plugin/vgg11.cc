// VGG-11 (configuration "A" of Simonyan & Zisserman, 2014), as torchvision
// builds it: 8 conv 3x3 + ReLU layers with 5 max-pools, an adaptive average
// pool to 7x7 and a 4096-4096-classes classifier with dropout. 132,863,336
// parameters with 1000 classes (torchvision's published figure).

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/pooling.h>
#include <trainbench/sdk/plugin.h>
#include <trainbench/sdk/support/module_model.h>

#include <memory>

namespace {

namespace F = torch::nn::functional;
using trainbench::sdk::CountedConv2d;
using trainbench::sdk::CountedLinear;

class Vgg11Impl : public torch::nn::Module {
 public:
  Vgg11Impl(int64_t num_classes, double dropout) : dropout_(dropout) {
    const int64_t config[] = {64, -1, 128, -1, 256, 256, -1, 512, 512, -1, 512, 512, -1};
    int64_t in = 3;
    for (int64_t c : config) {
      if (c < 0) {
        features_->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      } else {
        features_->push_back(CountedConv2d(torch::nn::Conv2dOptions(in, c, 3).padding(1)));
        features_->push_back(torch::nn::ReLU());
        in = c;
      }
    }
    register_module("features", features_);
    fc1_ = register_module("fc1", CountedLinear(512 * 7 * 7, 4096));
    fc2_ = register_module("fc2", CountedLinear(4096, 4096));
    fc3_ = register_module("fc3", CountedLinear(4096, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = F::adaptive_avg_pool2d(features_->forward(x), F::AdaptiveAvgPool2dFuncOptions({7, 7}));
    const auto drop = F::DropoutFuncOptions().p(dropout_).training(is_training());
    x = F::dropout(torch::relu(fc1_(x.flatten(1))), drop);
    x = F::dropout(torch::relu(fc2_(x)), drop);
    return fc3_(x);
  }

 private:
  double dropout_;
  torch::nn::Sequential features_;
  CountedLinear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};
TORCH_MODULE(Vgg11);

const TbParamSpec kParams[] = {
    {"num_classes", TB_PARAM_INT, "10", "number of output classes", nullptr, 1, 2, 100000},
    {"dropout", TB_PARAM_FLOAT, "0.5", "dropout probability in the classifier", nullptr, 1, 0, 0.99},
};

std::unique_ptr<trainbench::sdk::Model> Make(const trainbench::sdk::Options& options) {
  const int64_t classes = options.GetInt("num_classes");
  return std::make_unique<trainbench::sdk::ModuleModel<Vgg11>>(Vgg11(classes, options.GetFloat("dropout")),
                                                               std::array<int64_t, 3>{3, 32, 32}, classes);
}

}  // namespace

TRAINBENCH_MODEL_PLUGIN("vgg11", "1.0.0", "VGG-11 (torchvision layout), an out-of-tree example", kParams, Make)

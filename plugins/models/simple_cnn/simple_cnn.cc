// SimpleCNN: the small network of the study, about 0.5M parameters.
//
// Exact architecture (input 3x32x32), identical to the plain-PyTorch baseline
// in bench/ so that the two can be compared step for step:
//   conv1 3->32, 3x3, pad 1, ReLU, max-pool 2   -> 32x16x16
//   conv2 32->64, 3x3, pad 1, ReLU, max-pool 2  -> 64x8x8
//   conv3 64->128, 3x3, pad 1, ReLU, max-pool 2 -> 128x4x4
//   flatten (2048), fc1 2048->hidden (192), ReLU, fc2 hidden->num_classes
// With the defaults: 488,586 parameters, 62,532,864 training FLOPs per image.
//
// `fused_epilogue` (default on): on CUDA each convolution runs without its
// bias, and bias + ReLU + max-pool run as one kernel, with one kernel for
// their backward (bias_relu_pool.h). The same function and gradients; the
// parameters keep their names and shapes.

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>

#include <exception>
#include <memory>
#include <string>

#include "bias_relu_pool.h"
#include "path_log.h"
#include "trainbench/sdk/plugin.h"
#include "trainbench/sdk/support/module_model.h"

namespace {

namespace F = torch::nn::functional;
using trainbench::sdk::CountedConv2d;
using trainbench::sdk::CountedLinear;

class SimpleCnnImpl : public torch::nn::Module {
 public:
  SimpleCnnImpl(int64_t hidden, int64_t num_classes, bool fused_epilogue)
      : fused_(fused_epilogue && simple_cnn::FusedKernelsBuilt()),
        conv1_(register_module("conv1", CountedConv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        conv2_(register_module("conv2", CountedConv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        conv3_(register_module("conv3", CountedConv2d(torch::nn::Conv2dOptions(64, 128, 3).padding(1)))),
        fc1_(register_module("fc1", CountedLinear(128 * 4 * 4, hidden))),
        fc2_(register_module("fc2", CountedLinear(hidden, num_classes))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = Block(conv1_, x);
    x = Block(conv2_, x);
    x = Block(conv3_, x);
    x = torch::relu(fc1_(x.flatten(1)));
    return fc2_(x);
  }

 private:
  // max_pool2d(relu(conv(x)), 2)
  torch::Tensor Block(CountedConv2d& conv, const torch::Tensor& x) {
    // FLOPs are measured on the CPU (sdk::MeasureTrainingFlops), through the
    // counted layer of the composite path. The convolution as constructed
    // above: 3x3, stride 1, padding 1.
    if (fused_ && x.is_cuda()) {
      return simple_cnn::BiasReluMaxPool(torch::conv2d(x, conv->weight, /*bias=*/{}, /*stride=*/1, /*padding=*/1),
                                         conv->bias);
    }
    trainbench::plugins::CountPath("epilogue", "composite");
    return F::max_pool2d(torch::relu(conv(x)), F::MaxPool2dFuncOptions(2));
  }

  bool fused_;
  CountedConv2d conv1_, conv2_, conv3_;
  CountedLinear fc1_, fc2_;
};
TORCH_MODULE(SimpleCnn);

const TbParamSpec kParams[] = {
    {"num_classes", TB_PARAM_INT, "10", "number of output classes", nullptr, 1, 2, 100000},
    {"hidden", TB_PARAM_INT, "192", "width of the hidden fully connected layer", nullptr, 1, 1, 65536},
    {"fused_epilogue", TB_PARAM_BOOL, "true",
     "on CUDA, bias + ReLU + max-pool of each convolution as one kernel (and one for their backward)", nullptr, 0, 0,
     0},
};

// The network as a Model that says which form each convolution's epilogue
// ran in (Model::PathTaken): {"epilogue": {"fused_kernel": n, "composite": n}},
// counted per block as the host runs them (a captured step: its capture).
class SimpleCnnModel : public trainbench::sdk::ModuleModel<SimpleCnn> {
 public:
  using ModuleModel::ModuleModel;

  trainbench::sdk::Status PathTaken(std::string* json_object) noexcept override {
    try {
      *json_object = trainbench::plugins::PathJson();
      return trainbench::sdk::Status::Ok();
    } catch (const std::exception& e) {
      return trainbench::sdk::Status::Error(std::string("path: ") + e.what());
    }
  }
};

std::unique_ptr<trainbench::sdk::Model> Make(const trainbench::sdk::Options& options) {
  const int64_t classes = options.GetInt("num_classes");
  return std::make_unique<SimpleCnnModel>(
      SimpleCnn(options.GetInt("hidden"), classes, options.GetBool("fused_epilogue")),
      std::array<int64_t, 3>{3, 32, 32}, classes);
}

}  // namespace

TRAINBENCH_MODEL_PLUGIN("simple_cnn", "1.1.0", "SimpleCNN: 3 conv + 2 fc layers, about 0.5M parameters", kParams, Make)

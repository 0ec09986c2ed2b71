#pragma once
/// @file
/// ModuleModel: a ready Model implementation around any torch::nn module
/// holder whose forward(Tensor) returns logits, so that a model plugin only
/// writes its network.

#include <torch/nn/modules/batchnorm.h>

#include <array>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "trainbench/sdk/model.h"
#include "trainbench/sdk/support/batch_norm.h"
#include "trainbench/sdk/support/flops.h"

namespace trainbench::sdk {

/// Wraps a module holder (e.g. a TORCH_MODULE type) as a Model. Exceptions
/// from forward() come back as Status. Not thread-safe, like Model.
template <class Holder>
class ModuleModel : public Model {
 public:
  ModuleModel(Holder net, std::array<int64_t, 3> input_shape, int64_t num_classes)
      : net_(std::move(net)), input_shape_(input_shape), num_classes_(num_classes) {}

  torch::nn::Module& module() noexcept override { return *net_; }

  Status Forward(const torch::Tensor& input, torch::Tensor* logits) noexcept override {
    try {
      *logits = net_->forward(input);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }

  std::array<int64_t, 3> InputShape() const noexcept override { return input_shape_; }
  int64_t NumClasses() const noexcept override { return num_classes_; }

  Status TrainingFlopsPerSample(int64_t* flops) noexcept override {
    return MeasureTrainingFlops(
        *net_, [this](const torch::Tensor& x) { return net_->forward(x); }, input_shape_, flops);
  }

  /// Switches every trainbench::sdk::BatchNorm2d to cross-rank statistics;
  /// refuses a network that also has plain torch::nn batch normalisation
  /// (it would silently stay per rank).
  Status SyncBatchNorm(CrossRankSum* sum) noexcept override {
    try {
      std::vector<sdk::BatchNorm2dImpl*> layers;
      for (const auto& item : net_->named_modules("", /*include_self=*/false)) {
        torch::nn::Module& m = *item.value();
        if (auto* bn = m.template as<sdk::BatchNorm2dImpl>()) {
          layers.push_back(bn);
        } else if (m.template as<torch::nn::BatchNorm1dImpl>() != nullptr ||
                   m.template as<torch::nn::BatchNorm2dImpl>() != nullptr ||
                   m.template as<torch::nn::BatchNorm3dImpl>() != nullptr) {
          return Status::Error("layer '" + item.key() +
                               "' is a torch::nn batch normalisation; build it from trainbench::sdk::BatchNorm2d "
                               "to synchronise it across ranks");
        }
      }
      for (auto* bn : layers) bn->SetCrossRankSum(sum);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }

  /// The wrapped network.
  Holder& net() noexcept { return net_; }

 private:
  Holder net_;
  std::array<int64_t, 3> input_shape_;
  int64_t num_classes_;
};

}  // namespace trainbench::sdk

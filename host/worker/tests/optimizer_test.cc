// The worker's optimizers against LibTorch's own: SGD (momentum, weight
// decay, Nesterov) step by step, on the CPU (the multi-tensor form) and, where
// a GPU is present, on CUDA (PyTorch's fused kernel, buffers started at zero);
// and `overlap`, which outside a captured CUDA step changes nothing, and
// which alone lets SGD take working copies' updates into the backward.
#include "optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace trainbench::worker {
namespace {

std::vector<torch::Device> Devices() {
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  return devices;
}

// Three parameters of different shapes, the same values on every call.
std::vector<torch::Tensor> Params(const torch::Device& device) {
  torch::manual_seed(4);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{16, 8, 3, 3}, {16}, {10, 16}})
    params.push_back(torch::randn(shape).to(device).requires_grad_());
  return params;
}

// Gradients for step `step` (the same for both optimizers).
void SetGradients(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes()).to(p.device());
}

TEST(Optimizer, SgdStepsAsLibTorchsSgd) {
  for (const torch::Device& device : Devices()) {
    for (const bool nesterov : {false, true}) {
      protocol::OptimizerSettings settings;
      settings.lr = 0.05;
      settings.momentum = 0.9;
      settings.weight_decay = 5e-4;
      settings.nesterov = nesterov;
      std::vector<torch::Tensor> ours = Params(device), theirs = Params(device);
      const auto optimizer = MakeOptimizer(settings, ours);
      torch::optim::SGD reference(theirs, torch::optim::SGDOptions(settings.lr)
                                              .momentum(settings.momentum)
                                              .weight_decay(settings.weight_decay)
                                              .nesterov(nesterov));
      for (int step = 0; step < 4; ++step) {
        SetGradients(ours, step);
        SetGradients(theirs, step);
        EXPECT_FALSE(optimizer->BeginBackward());  // no capture here
        optimizer->Step();
        reference.step();
        for (size_t i = 0; i < ours.size(); ++i)
          EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-5, 1e-6))
              << device << (nesterov ? " nesterov" : "") << " step " << step << " parameter " << i;
      }
      EXPECT_EQ(optimizer->UpdatedDuringBackward(), 0);
    }
  }
}

// A parameter without a gradient at a step is left alone, momentum included.
TEST(Optimizer, SgdLeavesAParameterWithoutAGradientAlone) {
  for (const torch::Device& device : Devices()) {
    protocol::OptimizerSettings settings;
    std::vector<torch::Tensor> params = Params(device);
    const auto optimizer = MakeOptimizer(settings, params);
    SetGradients(params, 0);
    optimizer->Step();
    const torch::Tensor before = params[1].detach().clone();
    SetGradients(params, 1);
    params[1].mutable_grad() = torch::Tensor();
    optimizer->Step();
    EXPECT_TRUE(torch::equal(params[1].detach(), before)) << device;
  }
}

// AdamW: PyTorch's semantics (decoupled weight decay: the weights shrunk by
// lr x weight_decay before the bias-corrected Adam step), against the figures
// of its update rule worked out in double precision outside LibTorch (Python,
// three steps of gradients t x [0.5, -0.25], lr 0.1, betas (0.9, 0.999), eps
// 1e-8, weight decay 0.1), and Adam (the decay added to the gradient) against
// its own: the two differ, so a mix-up fails one of them.
TEST(Optimizer, AdamwAndAdamStepAsPyTorchsFigures) {
  struct Expected {
    const char* name;
    double w0, w1;
  };
  for (const Expected& e : {Expected{"adamw", 0.6809358610891806, -1.6512348651445434},
                            Expected{"adam", 0.7056952879647671, -1.7025510105384787}}) {
    protocol::OptimizerSettings settings;
    settings.name = e.name;
    settings.lr = 0.1;
    settings.betas = {0.9, 0.999};
    settings.eps = 1e-8;
    settings.weight_decay = 0.1;
    torch::Tensor w = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
    const auto optimizer = MakeOptimizer(settings, {w});
    for (int t = 1; t <= 3; ++t) {
      w.mutable_grad() = torch::tensor({0.5 * t, -0.25 * t}, torch::kDouble);
      optimizer->Step();
    }
    EXPECT_NEAR(w[0].item<double>(), e.w0, 1e-12) << e.name;
    EXPECT_NEAR(w[1].item<double>(), e.w1, 1e-12) << e.name;
  }
}

// The learning rate a schedule sets reaches the next step: a step at lr 0
// leaves the weights as they were (AdamW's decay is lr x weight_decay too).
TEST(Optimizer, AdamwFollowsTheLearningRateItIsGiven) {
  protocol::OptimizerSettings settings;
  settings.name = "adamw";
  settings.lr = 0.1;
  torch::Tensor w = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
  const auto optimizer = MakeOptimizer(settings, {w});
  w.mutable_grad() = torch::tensor({0.5, -0.25}, torch::kDouble);
  optimizer->SetLearningRate(0.0);
  optimizer->Step();
  EXPECT_EQ(w[0].item<double>(), 1.0);
  EXPECT_EQ(w[1].item<double>(), -2.0);
}

// Only SGD with `overlap` takes working copies' updates into the backward,
// and only where the copies can run them (CUDA kernels, dense fp32 CUDA
// parameters): elsewhere the copies only cast, and Step() updates every
// parameter.
TEST(Optimizer, OnlySgdWithOverlapTakesTheWorkingCopiesUpdates) {
  struct Case {
    const char* name;
    bool overlap;
  };
  for (const Case& c : {Case{"sgd", false}, Case{"sgd", true}, Case{"adam", true}, Case{"adamw", true}}) {
    protocol::OptimizerSettings settings;
    settings.name = c.name;
    settings.overlap = c.overlap;
    std::vector<torch::Tensor> params = Params(torch::kCPU);
    const auto optimizer = MakeOptimizer(settings, params);
    MixedPrecision copies;
    copies.Adopt({{params[0], params[2]}});
    const std::string what = std::string(c.name) + (c.overlap ? " with overlap" : "");
    EXPECT_FALSE(optimizer->UpdateInBackward(copies)) << what;
    EXPECT_FALSE(copies.Updates()) << what;
    std::vector<torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().clone());
    SetGradients(params, 0);
    optimizer->Step();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_FALSE(torch::equal(params[i].detach(), before[i])) << what << ": parameter " << i << " not updated";
  }
}

}  // namespace
}  // namespace trainbench::worker

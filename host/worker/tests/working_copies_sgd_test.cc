// The worker's mixed-precision SGD of a model's working copies
// (host/worker/mixed_precision.h) against torch.optim.SGD's arithmetic
// written out in ATen ops: weights and momentum
// after several steps, with bf16, half or fp32 gradients, weight decay,
// Nesterov, no momentum; the next forward's copies exactly the updated
// weights rounded; a copy made again where its weight changed in place; the
// same updates from a CUDA graph whose updates run on side streams. Built
// only where the kernels are; skipped without a GPU.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixed_precision.h"
#include "optimizer.h"

namespace {

using trainbench::worker::MixedPrecision;
using SgdSettings = trainbench::worker::SgdArithmetic;

// Weights of assorted shapes in two groups: a channels_last convolution,
// odd element counts, a 1-D view one element into its storage (not aligned
// to a pack).
std::vector<std::vector<torch::Tensor>> Groups() {
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  return {{torch::randn({64, 32, 3, 3}, cuda).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(),
           torch::randn({7, 5, 1, 1}, cuda).requires_grad_()},
          {torch::randn({1001}, cuda).narrow(0, 1, 1000).detach().requires_grad_(),
           torch::randn({3, 13}, cuda).requires_grad_(), torch::randn({256, 128, 1, 1}, cuda).requires_grad_()}};
}

// torch.optim.SGD's step on one weight (dampening 0, momentum buffer
// starting at zero), each intermediate rounded to fp32 where PyTorch's fused
// kernel stores it.
void ReferenceStep(torch::Tensor& p, torch::Tensor& buf, const torch::Tensor& grad, const SgdSettings& s) {
  torch::Tensor g = grad.to(torch::kDouble);
  const torch::Tensor pd = p.to(torch::kDouble);
  if (s.weight_decay != 0) g = (g + s.weight_decay * pd).to(torch::kFloat).to(torch::kDouble);
  if (s.momentum != 0) {
    buf = (s.momentum * buf.to(torch::kDouble) + g).to(torch::kFloat);
    g = s.nesterov ? (g + s.momentum * buf.to(torch::kDouble)).to(torch::kFloat).to(torch::kDouble)
                   : buf.to(torch::kDouble);
  }
  p = (pd - s.lr * g).to(torch::kFloat);
}

// `groups` adopted, their updates in the backward with `s`'s arithmetic.
void Adopt(MixedPrecision& sgd, const std::vector<std::vector<torch::Tensor>>& groups, const SgdSettings& s) {
  sgd.Adopt(groups);
  sgd.UpdateWith(std::make_shared<const SgdSettings>(s));
}

double MaxRelative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max() / b.to(torch::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}

// Gradients of each step, in `type` (the copies' or fp32).
std::vector<std::vector<std::vector<torch::Tensor>>> StepGradients(
    const std::vector<std::vector<torch::Tensor>>& groups, int steps, at::ScalarType type) {
  std::vector<std::vector<std::vector<torch::Tensor>>> all(steps);
  for (auto& step : all)
    for (const auto& group : groups) {
      step.emplace_back();
      for (const auto& w : group) step.back().push_back(torch::randn(w.sizes(), w.options()).to(type));
    }
  return all;
}

// One forward and backward through the working copies: every group's
// weights for the forward, the step's gradients into them.
void Step(MixedPrecision& sgd, size_t groups, std::optional<at::ScalarType> cast,
          const std::vector<std::vector<torch::Tensor>>& grads) {
  sgd.BeginForward();
  std::vector<torch::Tensor> outputs, upstream;
  for (size_t g = 0; g < groups; ++g) {
    const std::vector<torch::Tensor> w = sgd.Group(g, cast);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i].scalar_type(), cast.value_or(at::kFloat));
      outputs.push_back(w[i]);
      upstream.push_back(grads[g][i]);
    }
  }
  torch::autograd::backward(outputs, upstream);
}

void ExpectUpdatesAsSgd(const SgdSettings& settings, std::optional<at::ScalarType> cast, bool captured) {
  const std::string what = std::string(cast ? c10::toString(*cast) : "fp32") + (captured ? ", captured" : "") +
                           ", momentum " + std::to_string(settings.momentum) + ", weight decay " +
                           std::to_string(settings.weight_decay) + (settings.nesterov ? ", Nesterov" : "");
  torch::manual_seed(3);
  std::vector<std::vector<torch::Tensor>> groups = Groups();
  std::vector<torch::Tensor> expected, buffers;
  for (const auto& group : groups)
    for (const auto& w : group) {
      expected.push_back(w.detach().clone());
      buffers.push_back(torch::zeros_like(w.detach()));
    }
  const int steps = 3;
  const auto grads = StepGradients(groups, steps, cast.value_or(at::kFloat));
  for (const auto& step : grads) {
    size_t k = 0;
    for (const auto& group : step)
      for (const auto& g : group) {
        ReferenceStep(expected[k], buffers[k], g.to(torch::kFloat), settings);
        ++k;
      }
  }
  MixedPrecision sgd;
  Adopt(sgd, groups, settings);
  if (!captured) {
    for (const auto& step : grads) Step(sgd, groups.size(), cast, step);
  } else {
    // One step eagerly (the copies made), then the rest as replays of a
    // captured one whose gradients are copied in before each replay.
    Step(sgd, groups.size(), cast, grads[0]);
    std::vector<std::vector<torch::Tensor>> fed;
    for (const auto& group : grads[1]) {
      fed.emplace_back();
      for (const auto& g : group) fed.back().push_back(torch::empty_like(g));
    }
    at::cuda::CUDAGraph graph;
    auto stream = c10::cuda::getStreamFromPool();
    {
      c10::cuda::CUDAStreamGuard guard(stream);
      graph.capture_begin();
      Step(sgd, groups.size(), cast, fed);
      graph.capture_end();
    }
    for (int s = 1; s < steps; ++s) {
      for (size_t g = 0; g < fed.size(); ++g)
        for (size_t i = 0; i < fed[g].size(); ++i) fed[g][i].copy_(grads[s][g][i]);
      graph.replay();
    }
  }
  torch::cuda::synchronize();
  size_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i, ++k) {
      const torch::Tensor& w = groups[g][i];
      EXPECT_FALSE(w.grad().defined()) << what << ": the update passes no gradient on";
      EXPECT_LE(MaxRelative(w.detach(), expected[k]), 1e-6) << what << ", weight " << k;
    }
    if (!cast) continue;
    // The next forward's copies: the updated weights, rounded.
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> copies = sgd.Group(g, cast);
    for (size_t i = 0; i < copies.size(); ++i)
      EXPECT_TRUE(torch::equal(copies[i], groups[g][i].detach().to(*cast))) << what << ", copy of group " << g;
  }
}

TEST(MixedPrecisionSgd, UpdatesAsTorchOptimSgd) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const SgdSettings plain{0.1, 0.9, 5e-4, false}, nesterov{0.05, 0.9, 0, true}, no_momentum{0.2, 0, 1e-2, false};
  for (const SgdSettings& s : {plain, nesterov, no_momentum})
    for (const std::optional<at::ScalarType> cast :
         {std::optional<at::ScalarType>(at::kBFloat16), std::optional<at::ScalarType>(at::kHalf),
          std::optional<at::ScalarType>()})
      ExpectUpdatesAsSgd(s, cast, /*captured=*/false);
}

// Inside a capture each group's update runs on a side stream, joined by the
// last group's node: a missing join fails the capture, a missing wait reads
// a gradient before it is copied in.
TEST(MixedPrecisionSgd, UpdatesFromACapturedStepOnSideStreams) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectUpdatesAsSgd({0.1, 0.9, 5e-4, false}, at::kBFloat16, /*captured=*/true);
  ExpectUpdatesAsSgd({0.1, 0.9, 0, false}, std::nullopt, /*captured=*/true);
}

TEST(MixedPrecisionSgd, MakesACopyAgainWhereItsWeightChangedInPlace) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(4);
  std::vector<std::vector<torch::Tensor>> groups = Groups();
  MixedPrecision sgd;
  Adopt(sgd, groups, SgdSettings{0.1, 0.9, 0, false});
  Step(sgd, groups.size(), at::kBFloat16, StepGradients(groups, 1, at::kBFloat16)[0]);
  torch::NoGradGuard no_grad;
  groups[1][1].mul_(-3);  // anything but the update's kernel: its version counter moves
  const std::vector<torch::Tensor> copies = sgd.Group(1, at::kBFloat16);
  EXPECT_TRUE(torch::equal(copies[1], groups[1][1].to(at::kBFloat16)));
  EXPECT_TRUE(torch::equal(copies[0], groups[1][0].to(at::kBFloat16)));
}

// A backward that runs after the working copies were destroyed still
// updates the weights: its autograd nodes keep the state alive.
TEST(MixedPrecisionSgd, ABackwardAfterTheObjectIsGoneStillUpdates) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(10);
  std::vector<std::vector<torch::Tensor>> groups = Groups();
  const SgdSettings settings{0.1, 0.9, 0, false};
  const auto grads = StepGradients(groups, 1, at::kBFloat16)[0];
  std::vector<torch::Tensor> outputs, upstream, expected;
  {
    MixedPrecision sgd;
    Adopt(sgd, groups, settings);
    sgd.BeginForward();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<torch::Tensor> w = sgd.Group(g, at::kBFloat16);
      for (size_t i = 0; i < w.size(); ++i) {
        outputs.push_back(w[i]);
        upstream.push_back(grads[g][i]);
        torch::Tensor p = groups[g][i].detach().clone(), buf = torch::zeros_like(p);
        ReferenceStep(p, buf, grads[g][i].to(torch::kFloat), settings);
        expected.push_back(p);
      }
    }
  }
  torch::autograd::backward(outputs, upstream);
  torch::cuda::synchronize();
  size_t k = 0;
  for (const auto& group : groups)
    for (const auto& w : group) {
      EXPECT_LE(MaxRelative(w.detach(), expected[k]), 1e-6) << "weight " << k;
      ++k;
    }
}

// The optimizer owns the updates it hands to the working copies: its
// learning rate reaches them (a step at lr 0 changes nothing, the next at
// 0.1 is SGD's), and its Step() updates only the parameters it kept.
TEST(MixedPrecisionSgd, TheOptimizerOwnsTheUpdatesInTheBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(11);
  std::vector<std::vector<torch::Tensor>> groups = Groups();
  const torch::Tensor kept = torch::randn({6, 4}, torch::TensorOptions(torch::kCUDA)).requires_grad_();
  std::vector<torch::Tensor> all{kept};
  for (const auto& group : groups) all.insert(all.end(), group.begin(), group.end());
  trainbench::protocol::OptimizerSettings o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.overlap = true;
  const auto optimizer = trainbench::worker::MakeOptimizer(o, all);
  MixedPrecision copies;
  copies.Adopt(groups);
  ASSERT_TRUE(optimizer->UpdateInBackward(copies));
  EXPECT_TRUE(copies.Updates());
  std::vector<torch::Tensor> expected, buffers;
  for (const torch::Tensor& w : all) {
    expected.push_back(w.detach().clone());
    buffers.push_back(torch::zeros_like(w.detach()));
  }
  const auto grads = StepGradients(groups, 2, at::kBFloat16);
  for (int step = 0; step < 2; ++step) {
    const double lr = step == 0 ? 0.0 : 0.1;
    optimizer->SetLearningRate(lr);
    const torch::Tensor kept_grad = torch::randn(kept.sizes(), kept.options());
    Step(copies, groups.size(), at::kBFloat16, grads[step]);
    kept.mutable_grad() = kept_grad;
    optimizer->Step();
    const SgdSettings s{lr, o.momentum, o.weight_decay, o.nesterov};
    ReferenceStep(expected[0], buffers[0], kept_grad, s);
    size_t k = 1;
    for (const auto& group : grads[step])
      for (const auto& g : group) {
        ReferenceStep(expected[k], buffers[k], g.to(torch::kFloat), s);
        ++k;
      }
    torch::cuda::synchronize();
    for (size_t i = 0; i < all.size(); ++i)
      EXPECT_LE(MaxRelative(all[i].detach(), expected[i]), 1e-6) << "step " << step << ", weight " << i;
  }
}

TEST(MixedPrecisionSgd, RefusesWeightsItCannotUpdate) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const SgdSettings s{0.1, 0.9, 0, false};
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (const torch::Tensor& w :
       {torch::zeros({4}), torch::zeros({4}, cuda.dtype(torch::kHalf)), torch::zeros({4, 4}, cuda).narrow(1, 0, 2)}) {
    MixedPrecision sgd;
    EXPECT_FALSE(MixedPrecision::UpdatesApply({{w}})) << w.options();
    sgd.Adopt({{w}});
    EXPECT_FALSE(sgd.CanUpdate()) << w.options();
    EXPECT_THROW(sgd.UpdateWith(std::make_shared<const SgdSettings>(s)), std::invalid_argument) << w.options();
  }
}

}  // namespace

// The worker's working copies as casts (host/worker/mixed_precision.h: a
// group's weights cast in one kernel, their gradients back in one more)
// against each weight's own .to(type): the same values, the same gradients
// back in fp32 with the weights' strides, any number of weights and sizes,
// unaligned ones, capture in a CUDA graph; LibTorch's casts where the kernel
// does not apply; what a model may ask and not. The GPU cases skip without
// a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixed_precision.h"

#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
#include <ATen/cuda/CUDAGraph.h>

#include "cuda_graph.h"
#endif

namespace {

using trainbench::worker::MixedPrecision;

// One group of `weights` through the working copies (casts), for a forward.
std::vector<torch::Tensor> CastWeights(const std::vector<torch::Tensor>& weights, at::ScalarType type) {
  MixedPrecision copies;
  copies.Adopt({weights});
  copies.BeginForward();
  return copies.Group(0, type);
}

// Weights of assorted shapes: channels_last convolutions, odd element
// counts, a 1-D view one element into its storage (not 16-byte aligned).
std::vector<torch::Tensor> Weights(int count) {
  std::vector<torch::Tensor> weights;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (int i = 0; i < count; ++i) {
    torch::Tensor w;
    switch (i % 4) {
      case 0:
        w = torch::randn({64, 32, 3, 3}, cuda).contiguous(torch::MemoryFormat::ChannelsLast);
        break;
      case 1:
        w = torch::randn({7, 5, 1, 1}, cuda);
        break;
      case 2:
        w = torch::randn({1001}, cuda).narrow(0, 1, 1000);
        break;
      default:
        w = torch::randn({3 + i, 13}, cuda);
        break;
    }
    weights.push_back(w.requires_grad_());
  }
  return weights;
}

void ExpectCastsAsLibTorch(int count, at::ScalarType type) {
  torch::manual_seed(count);
  std::vector<torch::Tensor> weights = Weights(count);
  std::vector<torch::Tensor> upstream;
  for (const auto& w : weights) upstream.push_back(torch::randn(w.sizes(), w.options()).to(type));
  // Reference: each weight's own cast, its gradient.
  std::vector<torch::Tensor> expected_grads;
  for (size_t i = 0; i < weights.size(); ++i) {
    (weights[i].to(type) * upstream[i]).sum().backward();
    expected_grads.push_back(weights[i].grad().clone());
    weights[i].mutable_grad() = torch::Tensor();
  }
  const std::vector<torch::Tensor> cast = CastWeights(weights, type);
  ASSERT_EQ(cast.size(), weights.size());
  torch::Tensor loss = torch::zeros({}, torch::TensorOptions(torch::kCUDA).dtype(type));
  for (size_t i = 0; i < cast.size(); ++i) {
    EXPECT_EQ(cast[i].scalar_type(), type);
    EXPECT_EQ(cast[i].strides(), weights[i].strides()) << "weight " << i;
    EXPECT_TRUE(torch::equal(cast[i], weights[i].detach().to(type))) << "weight " << i;
    loss = loss + (cast[i] * upstream[i]).sum();
  }
  ASSERT_NE(cast[0].grad_fn(), nullptr);
  loss.backward();
  for (size_t i = 0; i < weights.size(); ++i) {
    const torch::Tensor& g = weights[i].grad();
    ASSERT_TRUE(g.defined()) << "weight " << i;
    EXPECT_EQ(g.scalar_type(), torch::kFloat);
    EXPECT_EQ(g.strides(), weights[i].strides()) << "weight " << i;
    EXPECT_TRUE(torch::equal(g, expected_grads[i])) << "weight " << i;
  }
}

TEST(WorkingCopiesCast, OneKernelCastsAsLibTorchBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectCastsAsLibTorch(8, torch::kBFloat16);
}

TEST(WorkingCopiesCast, OneKernelCastsAsLibTorchHalf) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectCastsAsLibTorch(8, torch::kHalf);
}

// More weights than one launch's table holds (48): several launches.
TEST(WorkingCopiesCast, ManyWeightsInSeveralLaunches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectCastsAsLibTorch(101, torch::kBFloat16);
}

// A weight whose gradient is not needed gets none; the others still do.
TEST(WorkingCopiesCast, WeightsWithoutGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<torch::Tensor> weights = Weights(3);
  const std::vector<torch::Tensor> cast = CastWeights(weights, torch::kBFloat16);
  (cast[0].to(torch::kFloat).sum() + cast[2].to(torch::kFloat).sum()).backward();
  EXPECT_TRUE(weights[0].grad().defined());
  EXPECT_FALSE(weights[1].grad().defined());
  EXPECT_TRUE(torch::equal(weights[2].grad(), torch::ones_like(weights[2])));
}

// CPU weights, double, fp32 targets: each weight's own .to(type).
TEST(WorkingCopiesCast, LibTorchsCastWhereTheKernelDoesNotApply) {
  const std::vector<torch::Tensor> cpu{torch::randn({4, 4}).requires_grad_()};
  const auto out = CastWeights(cpu, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(out[0], cpu[0].detach().to(torch::kBFloat16)));
  EXPECT_EQ(out[0].grad_fn()->name().find("CastAll"), std::string::npos);
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<torch::Tensor> doubles{
      torch::randn({4, 4}, torch::TensorOptions(torch::kCUDA).dtype(torch::kDouble))};
  EXPECT_EQ(CastWeights(doubles, torch::kBFloat16)[0].scalar_type(), torch::kBFloat16);
  const std::vector<torch::Tensor> strided{torch::randn({8, 8}, torch::kCUDA).slice(1, 0, 8, 2)};
  EXPECT_TRUE(torch::equal(CastWeights(strided, torch::kHalf)[0], strided[0].to(torch::kHalf)));
}

#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
TEST(WorkingCopiesCastGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(9);
  std::vector<torch::Tensor> weights = Weights(6);
  auto step = [&] {
    for (auto& w : weights) w.mutable_grad() = torch::Tensor();
    torch::Tensor loss = torch::zeros({}, torch::kCUDA);
    for (const auto& c : CastWeights(weights, torch::kBFloat16)) loss = loss + c.to(torch::kFloat).square().sum();
    loss.backward();
  };
  at::cuda::CUDAGraph graph;
  std::vector<torch::Tensor> expected;
  trainbench::testing::WarmUpAndCapture(graph, step, [&] {
    for (const auto& w : weights) expected.push_back(w.grad().clone());
  });
  torch::cuda::synchronize();
  {
    torch::NoGradGuard no_grad;
    for (auto& w : weights) w.mul_(0.5);  // replays read the weights' new values
  }
  graph.replay();
  torch::cuda::synchronize();
  for (size_t i = 0; i < weights.size(); ++i)
    EXPECT_TRUE(torch::allclose(weights[i].grad(), expected[i] * 0.5, 1e-2, 1e-2)) << "weight " << i;
}
#endif

// Without a type a group is the parameters themselves; a group the model
// did not list, or a type that is not bf16 or half, is refused; SGD's way
// needs CUDA parameters.
TEST(WorkingCopies, WhatAModelMayAsk) {
  const std::vector<torch::Tensor> cpu{torch::randn({4, 4}).requires_grad_(), torch::randn({3}).requires_grad_()};
  MixedPrecision copies;
  copies.Adopt({cpu, {}});
  EXPECT_FALSE(copies.Updates());
  EXPECT_EQ(copies.Groups(), 2u);
  EXPECT_EQ(copies.Parameters().size(), 2u);
  copies.BeginForward();
  const auto same = copies.Group(0, std::nullopt);
  ASSERT_EQ(same.size(), 2u);
  EXPECT_TRUE(same[0].is_same(cpu[0]));
  EXPECT_TRUE(copies.Group(1, torch::kBFloat16).empty());
  EXPECT_THROW(copies.Group(2, std::nullopt), std::out_of_range);
  EXPECT_THROW(copies.Group(0, torch::kDouble), std::invalid_argument);
  EXPECT_FALSE(MixedPrecision::UpdatesApply({cpu}));
  EXPECT_FALSE(MixedPrecision::UpdatesApply({}));
  EXPECT_FALSE(copies.CanUpdate());
  EXPECT_THROW(copies.UpdateWith(std::make_shared<const trainbench::worker::SgdArithmetic>(
                   trainbench::worker::SgdArithmetic{0.1, 0.9, 0, false})),
               std::invalid_argument);
  EXPECT_FALSE(copies.Updates());
}

}  // namespace

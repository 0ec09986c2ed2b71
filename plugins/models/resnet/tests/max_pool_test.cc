// The ResNet stem's max pool on CUDA (plugins/models/resnet/max_pool.h)
// against torch::max_pool2d: every dtype and layout, odd map sizes, other
// windows, ties, NaN and -inf; outputs and gradients equal (the same maxima,
// the same first-maximum rule, the same order of adding), evaluation, the
// composite where the kernels do not apply, replays in a CUDA graph.
// Built only where the kernels are (a LibTorch with CUDA); skipped without a GPU.
#include "max_pool.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda_graph.h"

namespace {

struct Case {
  torch::Dtype dtype;
  bool channels_last;
  std::vector<int64_t> shape;
  int kernel, stride, padding;
  bool ties;  // small integers: many equal values in a window
};

std::string Name(const Case& c) {
  std::string s = c10::toString(c.dtype);
  s += c.channels_last ? "_nhwc" : "_nchw";
  for (int64_t d : c.shape) s += "_" + std::to_string(d);
  s += "_k" + std::to_string(c.kernel) + "s" + std::to_string(c.stride) + "p" + std::to_string(c.padding);
  return s + (c.ties ? "_ties" : "");
}

class MaxPool : public ::testing::TestWithParam<Case> {};

torch::Tensor Input(const Case& c) {
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  torch::Tensor x = c.ties ? torch::randint(-3, 4, c.shape, torch::TensorOptions(torch::kCUDA)).to(c.dtype)
                           : torch::randn(c.shape, torch::TensorOptions(torch::kCUDA).dtype(c.dtype));
  return x.contiguous(format);
}

// y and dx of one forward and backward, fused or LibTorch's.
std::pair<torch::Tensor, torch::Tensor> PoolStep(const torch::Tensor& base, const torch::Tensor& upstream,
                                                 const Case& c, bool fused) {
  torch::Tensor x = base.clone().requires_grad_();
  torch::Tensor y = resnet::MaxPool2d(x, c.kernel, c.stride, c.padding, fused);
  y.backward(upstream);
  return {y.detach(), x.grad()};
}

TEST_P(MaxPool, EqualsLibTorchsForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  torch::manual_seed(11);
  const torch::Tensor x = Input(c);
  const torch::Tensor reference = torch::max_pool2d(x, c.kernel, c.stride, c.padding);
  const torch::Tensor upstream =
      torch::randn(reference.sizes(), reference.options())
          .contiguous(c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
  const auto [y, dx] = PoolStep(x, upstream, c, true);
  const auto [ry, rdx] = PoolStep(x, upstream, c, false);
  EXPECT_EQ(y.sizes(), ry.sizes());
  EXPECT_EQ(y.strides(), ry.strides()) << "the output keeps x's layout";
  EXPECT_TRUE(torch::equal(y, ry));
  EXPECT_EQ(dx.strides(), x.strides());
  // The same windows' gradients added in the same order in fp32: equal.
  EXPECT_TRUE(torch::equal(dx, rdx)) << "max difference " << (dx - rdx).abs().max().item<double>();
  // Evaluation (no autograd) gives the same output.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(resnet::MaxPool2d(x, c.kernel, c.stride, c.padding, true), ry));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (bool cl : {false, true}) {
      cases.push_back({dtype, cl, {8, 64, 16, 16}, 3, 2, 1, false});    // the ResNet stem at 32 px
      cases.push_back({dtype, cl, {4, 64, 112, 112}, 3, 2, 1, false});  // ... at 224 px
      cases.push_back({dtype, cl, {3, 24, 15, 17}, 3, 2, 1, true});     // odd maps, ties
      cases.push_back({dtype, cl, {2, 6, 9, 9}, 3, 2, 1, false});       // 6 channels: a 2-wide pack
      cases.push_back({dtype, cl, {2, 5, 7, 8}, 2, 2, 0, true});        // 5 channels: one element a thread
      cases.push_back({dtype, cl, {2, 16, 10, 10}, 5, 1, 2, true});     // overlapping windows, stride 1
      cases.push_back({dtype, cl, {2, 8, 1, 1}, 3, 2, 1, false});       // a 1x1 map (both layouts at once)
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cuda, MaxPool, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

// NaN wins its window (the last NaN, as LibTorch's), -inf loses to anything,
// a window of -inf only gives its gradient to its first position: as
// LibTorch's NCHW and CPU kernels do, so both layouts are checked against its
// NCHW kernel (its NHWC CUDA kernel leaves such a window's position at the
// plane's first element, and its gradient is lost unless the window holds it).
TEST(MaxPoolSpecialValues, NanAndInfinityAsLibTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (bool cl : {false, true}) {
    torch::manual_seed(2);
    torch::Tensor x = torch::randn({2, 8, 9, 9}, torch::kCUDA);
    x.index_put_({0, 0, 2, 2}, nan);
    x.index_put_({0, 0, 2, 4}, nan);
    x.index_put_({1, 3}, -inf);
    x.index_put_({1, 4, 0, 0}, inf);
    x = x.contiguous(cl ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
    const torch::Tensor upstream = torch::randn({2, 8, 5, 5}, torch::kCUDA);
    Case c{torch::kFloat, cl, {}, 3, 2, 1, false};
    const auto [y, dx] = PoolStep(x, upstream, c, true);
    auto [ry, rdx] = PoolStep(x.contiguous(), upstream, c, false);
    EXPECT_TRUE(torch::equal(y.isnan(), ry.isnan())) << "layout " << cl;
    EXPECT_TRUE(torch::equal(torch::nan_to_num(y), torch::nan_to_num(ry)));
    EXPECT_TRUE(torch::equal(dx, rdx)) << "layout " << cl;
  }
}

// What the kernels do not take goes to LibTorch: CPU tensors, double,
// windows past 15, non-dense strides; `fused` false always.
TEST(MaxPoolPaths, LibTorchWhereTheKernelsDoNotApply) {
  const torch::Tensor cpu = torch::randn({2, 4, 8, 8}).requires_grad_();
  EXPECT_EQ(resnet::MaxPool2d(cpu, 3, 2, 1, true).grad_fn()->name().find("Fused"), std::string::npos);
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Tensor x = torch::randn({2, 4, 40, 40}, torch::kCUDA).requires_grad_();
  auto fused_node = [](const torch::Tensor& y) { return y.grad_fn()->name().find("Fused") != std::string::npos; };
  EXPECT_TRUE(fused_node(resnet::MaxPool2d(x, 3, 2, 1, true)));
  EXPECT_FALSE(fused_node(resnet::MaxPool2d(x, 3, 2, 1, false)));
  EXPECT_FALSE(fused_node(resnet::MaxPool2d(x.to(torch::kDouble), 3, 2, 1, true)));
  EXPECT_FALSE(fused_node(resnet::MaxPool2d(x, 16, 1, 0, true)));
  const torch::Tensor strided = x.slice(3, 0, 40, 2);
  EXPECT_FALSE(fused_node(resnet::MaxPool2d(strided, 3, 2, 1, true)));
  EXPECT_TRUE(torch::equal(resnet::MaxPool2d(strided, 3, 2, 1, true), torch::max_pool2d(strided, 3, 2, 1)));
  // LibTorch's own checks still speak for what no pool takes.
  EXPECT_THROW(resnet::MaxPool2d(x, 3, 2, 2, true), c10::Error);
}

TEST(MaxPoolGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(4);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  torch::Tensor x =
      torch::randn({16, 64, 16, 16}, torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16)).contiguous(cl);
  x.requires_grad_();
  auto step = [&] {
    x.mutable_grad() = torch::Tensor();
    resnet::MaxPool2d(x, 3, 2, 1, true).to(torch::kFloat).square().sum().backward();
  };
  at::cuda::CUDAGraph graph;
  torch::Tensor expected;
  trainbench::testing::WarmUpAndCapture(graph, step, [&] { expected = x.grad().clone(); });
  torch::cuda::synchronize();
  for (int replay = 0; replay < 2; ++replay) {
    {
      torch::NoGradGuard no_grad;
      x.grad().zero_();
    }
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(x.grad(), expected)) << "replay " << replay;
  }
}

}  // namespace

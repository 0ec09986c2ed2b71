// The ResNet stem's convolution in space-to-depth form (plugins/models/resnet/
// stem.h) against LibTorch's conv2d(x, w, stride 2, padding 3): outputs and
// weight gradients measured against fp64 for every element type, odd and
// small images, 2-4 channels, both weight layouts, autocast; what it does not
// take; replays in a CUDA graph. Built where the kernels and the cuDNN path
// are; skipped without a GPU.
#include "stem.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "autocast_scope.h"
#include "relative_error.h"

namespace {

using trainbench::testing::RelativeError;

struct Case {
  torch::Dtype dtype;
  int64_t n, c, h, w, k;
  bool weight_channels_last;
};

std::string Name(const Case& c) {
  return std::string(c10::toString(c.dtype)) + "_" + std::to_string(c.n) + "x" + std::to_string(c.c) + "x" +
         std::to_string(c.h) + "x" + std::to_string(c.w) + "_k" + std::to_string(c.k) +
         (c.weight_channels_last ? "_wnhwc" : "_wnchw");
}

// The stem's numbers exactly: TF32 off, so that fp32 is fp32 on both sides.
class NoTf32 {
 public:
  NoTf32() : was_(at::globalContext().allowTF32CuDNN()) { at::globalContext().setAllowTF32CuDNN(false); }
  ~NoTf32() { at::globalContext().setAllowTF32CuDNN(was_); }
  NoTf32(const NoTf32&) = delete;
  NoTf32& operator=(const NoTf32&) = delete;

 private:
  bool was_;
};

class StemConv : public ::testing::TestWithParam<Case> {};

TEST_P(StemConv, EqualsTheSevenBySevenConvolution) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const NoTf32 no_tf32;
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const torch::Tensor x =
      torch::randn({c.n, c.c, c.h, c.w}, cuda.dtype(c.dtype)).contiguous(at::MemoryFormat::ChannelsLast);
  torch::Tensor w = (torch::randn({c.k, c.c, 7, 7}, cuda.dtype(c.dtype)) * 0.2);
  if (c.weight_channels_last) w = w.contiguous(at::MemoryFormat::ChannelsLast);
  w.requires_grad_(true);
  ASSERT_TRUE(resnet::StemApplies(x, w, 2, 3));

  const torch::Tensor y = resnet::StemConv(x, w, {});
  const torch::Tensor w64 = w.detach().to(torch::kDouble).requires_grad_(true);
  const torch::Tensor truth = torch::conv2d(x.to(torch::kDouble), w64, {}, 2, 3);
  ASSERT_EQ(y.sizes(), truth.sizes());
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(y.scalar_type(), c.dtype);
  const double tolerance = c.dtype == torch::kFloat ? 1e-5 : c.dtype == torch::kHalf ? 2e-3 : 1e-2;
  EXPECT_LE(RelativeError(y, truth), tolerance);

  const torch::Tensor dy = torch::randn(y.sizes(), y.options()).contiguous(at::MemoryFormat::ChannelsLast);
  y.backward(dy);
  truth.backward(dy.to(torch::kDouble));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().strides(), w.strides()) << "the gradient keeps the weight's layout";
  // Sums over N x OH x OW products in the element type's accumulation.
  EXPECT_LE(RelativeError(w.grad(), w64.grad()), tolerance * 2);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    cases.push_back({dtype, 16, 3, 32, 32, 64, true});  // the study's images
    cases.push_back({dtype, 3, 3, 33, 17, 64, false});  // odd sizes: the last block half outside
    cases.push_back({dtype, 5, 2, 7, 9, 5, true});      // two channels, few filters
    cases.push_back({dtype, 2, 4, 2, 1, 8, false});     // an image smaller than a block
  }
  cases.push_back({torch::kBFloat16, 4, 3, 224, 224, 64, true});  // ImageNet's
  cases.push_back({torch::kFloat, 2, 2, 40, 24, 16, false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cuda, StemConv, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

// Under bf16 autocast an fp32 image and fp32 weight: the blocks and the
// filter in bf16, the output bf16, the weight's gradient fp32 (autocast's).
TEST(StemConvAutocast, TakesAutocastsType) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({8, 3, 32, 32}, torch::kCUDA).contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor w = (torch::randn({64, 3, 7, 7}, torch::kCUDA) * 0.2).requires_grad_(true);
  torch::Tensor y;
  {
    trainbench::worker::AutocastScope autocast(c10::kCUDA, trainbench::sdk::Amp::kBf16);
    ASSERT_TRUE(resnet::StemApplies(x, w, 2, 3));
    y = resnet::StemConv(x, w, {});
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const torch::Tensor w64 = w.detach().to(torch::kDouble).requires_grad_(true);
  const torch::Tensor truth = torch::conv2d(x.to(torch::kDouble), w64, {}, 2, 3);
  EXPECT_LE(RelativeError(y, truth), 1e-2);
  y.sum().backward();
  truth.sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_LE(RelativeError(w.grad(), w64.grad()), 2e-2);
}

// What it leaves to the 7x7 convolution: another geometry, an NCHW image
// (the output would change the network's layout), an image that needs a
// gradient, one channel or more than 4, fp64, the CPU.
TEST(StemConvApplies, OnlyToTheStem) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cl = at::MemoryFormat::ChannelsLast;
  const torch::Tensor x = torch::randn({2, 3, 32, 32}, torch::kCUDA).contiguous(cl);
  const torch::Tensor w = torch::randn({64, 3, 7, 7}, torch::kCUDA);
  EXPECT_TRUE(resnet::StemApplies(x, w, 2, 3));
  EXPECT_FALSE(resnet::StemApplies(x, w, 1, 3));
  EXPECT_FALSE(resnet::StemApplies(x, w, 2, 1));
  EXPECT_FALSE(resnet::StemApplies(x.contiguous(), w, 2, 3));
  EXPECT_FALSE(resnet::StemApplies(x.clone().requires_grad_(true), w, 2, 3));
  {
    torch::NoGradGuard no_grad;  // no gradient asked: it applies
    EXPECT_TRUE(resnet::StemApplies(x.clone().requires_grad_(true), w, 2, 3));
  }
  EXPECT_FALSE(resnet::StemApplies(torch::randn({2, 5, 32, 32}, torch::kCUDA).contiguous(cl),
                                   torch::randn({64, 5, 7, 7}, torch::kCUDA), 2, 3));
  EXPECT_FALSE(resnet::StemApplies(torch::randn({2, 3, 32, 32}, torch::kCUDA).contiguous(cl),
                                   torch::randn({64, 3, 5, 5}, torch::kCUDA), 2, 3));
  // One channel: NCHW and NHWC are the same memory, so the network's layout
  // cannot be told from the image (the blocks' would be channels_last).
  EXPECT_FALSE(resnet::StemApplies(torch::randn({2, 1, 32, 32}, torch::kCUDA).contiguous(cl),
                                   torch::randn({64, 1, 7, 7}, torch::kCUDA), 2, 3));
  EXPECT_FALSE(resnet::StemApplies(x.to(torch::kDouble), w.to(torch::kDouble), 2, 3));
  EXPECT_FALSE(resnet::StemApplies(x.cpu(), w.cpu(), 2, 3));
  EXPECT_THROW(resnet::StemConv(x.contiguous(), w, {}), std::invalid_argument);
}

// Captured once and replayed on new inputs: the kernels allocate nothing and
// take their pointers at capture, as the training step's graph needs.
TEST(StemConvGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const NoTf32 no_tf32;
  torch::manual_seed(7);
  const auto cl = at::MemoryFormat::ChannelsLast;
  torch::Tensor x = torch::randn({4, 3, 32, 32}, torch::kCUDA).contiguous(cl);
  torch::Tensor w = torch::randn({64, 3, 7, 7}, torch::kCUDA).requires_grad_(true);
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  const c10::cuda::CUDAStreamGuard guard(side);
  auto step = [&] {
    w.mutable_grad() = torch::Tensor();
    resnet::StemConv(x, w, {}).square().sum().backward();
    return w.grad();
  };
  for (int i = 0; i < 2; ++i) step();  // choices made, plans built (autotuning off: heuristics)
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  const torch::Tensor out = step();
  graph.capture_end();
  x.copy_(torch::randn_like(x));
  graph.replay();
  side.synchronize();
  const torch::Tensor w64 = w.detach().to(torch::kDouble).requires_grad_(true);
  torch::conv2d(x.to(torch::kDouble), w64, {}, 2, 3).square().sum().backward();
  EXPECT_LE(RelativeError(out, w64.grad()), 1e-5);
}

}  // namespace

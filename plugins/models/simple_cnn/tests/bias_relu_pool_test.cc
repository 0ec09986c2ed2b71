// SimpleCNN's fused convolution epilogue on CUDA (plugins/models/simple_cnn/
// bias_relu_pool.h) against LibTorch's composite max_pool2d(relu(y + bias), 2):
// every dtype and layout it takes, windows full of ties and of negative
// values, and the shapes it leaves to the composite. Built only where the
// kernels are (a LibTorch with CUDA); skipped without a GPU.
#include "bias_relu_pool.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>
#include <vector>

#include "cuda_graph.h"

namespace {

namespace F = torch::nn::functional;

struct Case {
  torch::Dtype dtype;
  bool channels_last;
  std::vector<int64_t> shape;
  bool fused;  // whether the fused kernels take it
};

class BiasReluMaxPool : public ::testing::TestWithParam<Case> {};

TEST_P(BiasReluMaxPool, EqualsTheCompositeForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  torch::manual_seed(7);
  // Quarter steps from -2 to 2: ties within a window are frequent, about half
  // the values are negative, and whole windows end up cut by ReLU.
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const torch::Tensor base = (torch::randint(-8, 9, c.shape, cuda) / 4.0).to(c.dtype).contiguous(format);
  const torch::Tensor bias0 = torch::randint(-4, 5, {c.shape[1]}, cuda) / 8.0;  // fp32, as a parameter

  torch::Tensor y1 = base.clone().requires_grad_(), b1 = bias0.clone().requires_grad_();
  torch::Tensor y2 = base.clone().requires_grad_(), b2 = bias0.clone().requires_grad_();
  const torch::Tensor fused = simple_cnn::BiasReluMaxPool(y1, b1);
  const torch::Tensor ref =
      F::max_pool2d(torch::relu(y2 + b2.to(c.dtype).view({1, -1, 1, 1})), F::MaxPool2dFuncOptions(2));
  {
    // Without gradients (evaluation) the forward kernel alone, no offsets kept.
    torch::NoGradGuard no_grad;
    const torch::Tensor inference = simple_cnn::BiasReluMaxPool(base, bias0);
    EXPECT_FALSE(inference.grad_fn());
    EXPECT_TRUE(torch::equal(inference, ref));
  }
  ASSERT_TRUE(fused.grad_fn());
  EXPECT_EQ(fused.grad_fn()->name().find("Fused") != std::string::npos, c.fused) << fused.grad_fn()->name();
  EXPECT_EQ(fused.scalar_type(), c.dtype);
  EXPECT_EQ(fused.sizes(), ref.sizes());
  if (c.fused) {
    EXPECT_TRUE(fused.is_contiguous(format));
  }
  EXPECT_TRUE(torch::equal(fused, ref)) << "max difference "
                                        << (fused.to(torch::kFloat) - ref.to(torch::kFloat)).abs().max().item<double>();

  const torch::Tensor upstream = torch::randn(ref.sizes(), cuda).to(c.dtype);
  fused.backward(upstream);
  ref.backward(upstream);
  EXPECT_TRUE(torch::equal(y1.grad(), y2.grad()));
  EXPECT_EQ(b1.grad().scalar_type(), torch::kFloat);
  // The reference sums in y's type (bf16/half rounding), the fused path in fp32.
  const double tol = c.dtype == torch::kFloat ? 1e-5 : 2e-2;
  EXPECT_TRUE(torch::allclose(b1.grad(), b2.grad(), tol, tol)) << b1.grad() << "\nvs\n" << b2.grad();
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (bool cl : {false, true}) {
      cases.push_back({dtype, cl, {4, 32, 32, 32}, true});  // SimpleCNN's first block
      cases.push_back({dtype, cl, {3, 6, 10, 6}, true});    // odd pooled width: narrow packs
      cases.push_back({dtype, cl, {2, 5, 6, 14}, true});    // odd channel count
      cases.push_back({dtype, cl, {2, 4, 5, 6}, false});    // odd height: the composite
    }
  }
  return cases;
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = c.dtype == torch::kFloat ? "Float" : c.dtype == torch::kBFloat16 ? "BFloat16" : "Half";
  name += c.channels_last ? "ChannelsLast" : "Nchw";
  for (int64_t s : c.shape) name += "_" + std::to_string(s);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Cuda, BiasReluMaxPool, ::testing::ValuesIn(Cases()), Name);

TEST(BiasReluMaxPoolGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  torch::Tensor y = torch::randn({8, 16, 8, 8}, cuda).requires_grad_();
  torch::Tensor b = torch::randn({16}, cuda).requires_grad_();
  auto step = [&] {
    y.mutable_grad() = torch::Tensor();
    b.mutable_grad() = torch::Tensor();
    simple_cnn::BiasReluMaxPool(y, b).sum().backward();
  };
  at::cuda::CUDAGraph graph;
  torch::Tensor expected_y, expected_b;
  trainbench::testing::WarmUpAndCapture(graph, step, [&] {
    expected_y = y.grad().clone();
    expected_b = b.grad().clone();
  });
  torch::NoGradGuard no_grad;
  y.grad().zero_();
  b.grad().zero_();
  graph.replay();
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(y.grad(), expected_y));
  EXPECT_TRUE(torch::allclose(b.grad(), expected_b));
}

}  // namespace

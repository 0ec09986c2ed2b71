// The whole map's filter gradient folded in one CUDA kernel
// (plugins/models/resnet/whole_map_kernels.h, FoldWholeMapGrad with
// `kernel`) against LibTorch's ops: the same values in fp32, and in bf16 and
// half the fp32 fold rounded once; every small case the rule takes and the
// ResNets' shapes, the vector and scalar paths, an unaligned gradient, the
// kernel inside a captured CUDA graph, and the whole map's autograd with
// the kernel on. Built only where the kernels are; skipped without a GPU.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAGraph.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_graph.h"
#include "whole_map.h"
#include "whole_map_cases.h"

namespace {

using resnet::FoldWholeMapGrad;
using resnet::WholeMap;

struct Case {
  int64_t k, c, h, w, r, stride, padding;
};

std::string Describe(const Case& c, at::ScalarType type) {
  return "K " + std::to_string(c.k) + " C " + std::to_string(c.c) + " h " + std::to_string(c.h) + " w " +
         std::to_string(c.w) + " r " + std::to_string(c.r) + " stride " + std::to_string(c.stride) + " padding " +
         std::to_string(c.padding) + " " + std::string(c10::toString(type));
}

// The cases: every small map the rule takes (whole_map_cases.h) with 4
// channels (the scalar path) and 16 (the vector path), and the ResNets' at
// 32 px (layer 3's 2x2 maps, layer 4's first 2x2 to 1x1 and its 1x1 maps).
std::vector<Case> Cases() {
  std::vector<Case> cases;
  trainbench::testing::ForEachSmallWholeMapCase([&](int64_t h, int64_t w, int64_t r, int64_t stride, int64_t padding) {
    if (resnet::WholeMapPlan(h, w, r, r, stride, padding))
      for (int64_t c : {4, 16}) cases.push_back({3, c, h, w, r, stride, padding});
  });
  cases.push_back({256, 256, 2, 2, 3, 1, 1});
  cases.push_back({512, 512, 2, 2, 3, 2, 1});
  cases.push_back({512, 512, 1, 1, 3, 1, 1});
  return cases;
}

WholeMap MapOf(const Case& c) { return *resnet::WholeMapPlan(c.h, c.w, c.r, c.r, c.stride, c.padding); }

// A whole-map filter gradient for `c`, in `type` on the GPU; with `offset`,
// one element into its storage (not aligned to any pack).
torch::Tensor Gradient(const Case& c, at::ScalarType type, bool offset = false) {
  const WholeMap m = MapOf(c);
  const int64_t rows = m.ho * m.wo * c.k, cols = c.h * c.w * c.c;
  const auto options = torch::TensorOptions(torch::kCUDA).dtype(type);
  if (!offset) return torch::randn({rows, cols, 1, 1}, options);
  return torch::randn({rows * cols + 1}, options).narrow(0, 1, rows * cols).view({rows, cols, 1, 1});
}

// The fold through LibTorch's ops in fp32, rounded once to `type`: what the
// kernel computes.
torch::Tensor Expected(const torch::Tensor& g, const Case& c) {
  return FoldWholeMapGrad(g.to(torch::kFloat), {c.k, c.c, c.r, c.r}, MapOf(c), false).to(g.scalar_type());
}

class WholeMapKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!resnet::WholeMapKernelBuilt()) GTEST_SKIP() << "this build has no ResNet kernels";
  }
};

TEST_F(WholeMapKernel, FoldsAsTheOpsInFp32AndRoundsOnceInOtherTypes) {
  torch::manual_seed(32);
  int cases = 0;
  for (const Case& c : Cases()) {
    ++cases;
    for (at::ScalarType type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      const std::string what = Describe(c, type);
      const torch::Tensor g = Gradient(c, type);
      const torch::Tensor got = FoldWholeMapGrad(g, {c.k, c.c, c.r, c.r}, MapOf(c), true);
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{c.k, c.c, c.r, c.r})) << what;
      EXPECT_TRUE(got.is_contiguous(torch::MemoryFormat::ChannelsLast)) << what;
      EXPECT_EQ(got.scalar_type(), type) << what;
      EXPECT_TRUE(torch::equal(got, Expected(g, c))) << what;
      if (type == torch::kFloat) {  // the same adds in the same order as the ops in g's own type
        EXPECT_TRUE(torch::equal(got, FoldWholeMapGrad(g, {c.k, c.c, c.r, c.r}, MapOf(c), false))) << what;
      }
    }
  }
  EXPECT_GE(cases, 40);  // the loops reach the rule's cases
}

TEST_F(WholeMapKernel, AnUnalignedGradientTakesTheScalarPath) {
  torch::manual_seed(33);
  const Case c{64, 64, 2, 2, 3, 1, 1};
  for (at::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor g = Gradient(c, type, true);
    ASSERT_NE(reinterpret_cast<uintptr_t>(g.data_ptr()) % 16, 0u);
    EXPECT_TRUE(torch::equal(FoldWholeMapGrad(g, {c.k, c.c, c.r, c.r}, MapOf(c), true), Expected(g, c)))
        << Describe(c, type);
  }
}

// Every tap gets written: a tap no window reaches is zero, not whatever the
// memory held (the kernel has no separate zeroing).
TEST_F(WholeMapKernel, TapsNoWindowReachesAreZero) {
  const Case c{32, 32, 1, 1, 3, 1, 1};  // layer 4's 1x1 maps: the centre tap alone
  for (int i = 0; i < 4; ++i) {
    // Leave garbage in the caching allocator's blocks of the result's size.
    torch::full({c.k, c.r, c.r, c.c}, std::nan(""), torch::TensorOptions(torch::kCUDA));
    const torch::Tensor got = FoldWholeMapGrad(Gradient(c, torch::kFloat), {c.k, c.c, c.r, c.r}, MapOf(c), true);
    torch::Tensor outside = got.clone();
    outside.select(2, 1).select(2, 1).zero_();
    EXPECT_EQ(outside.abs().max().item<float>(), 0.0f);
    EXPECT_FALSE(got.isnan().any().item<bool>());
  }
}

TEST_F(WholeMapKernel, RunsInsideACapturedGraph) {
  torch::manual_seed(34);
  const Case c{256, 256, 2, 2, 3, 1, 1};
  const torch::Tensor g = Gradient(c, torch::kBFloat16);
  torch::Tensor out;
  at::cuda::CUDAGraph graph;
  trainbench::testing::WarmUpAndCapture(graph, [&] {
    out = FoldWholeMapGrad(g, {c.k, c.c, c.r, c.r}, MapOf(c), true);
  });
  g.normal_();  // new values, read by the replay
  graph.replay();
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(out, Expected(g, c)));
}

// The whole map's autograd against the plain convolution, in fp32 on the
// GPU, its filter gradient folded by the kernel (the whole ResNets with it:
// Models.* in engine_tests).
TEST_F(WholeMapKernel, TheWholeMapsAutogradMatchesThePlainConvolution) {
  torch::manual_seed(35);
  // Full fp32 convolutions on both sides (LibTorch lets cuDNN use TF32 by
  // default), so that only the fold can tell them apart.
  at::Context& context = at::globalContext();
  const bool tf32 = context.allowTF32CuDNN();
  context.setAllowTF32CuDNN(false);
  const auto options = torch::TensorOptions(torch::kCUDA);
  const Case c{8, 16, 2, 2, 3, 1, 1};
  const std::vector<int64_t> ones{1, 1};
  const torch::Tensor x = torch::randn({4, c.c, c.h, c.w}, options).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor w0 = torch::randn({c.k, c.c, c.r, c.r}, options).contiguous(torch::MemoryFormat::ChannelsLast);
  torch::Tensor wa = w0.clone().requires_grad_(), wb = w0.clone().requires_grad_();
  const WholeMap m = MapOf(c);
  const torch::Tensor ya = torch::conv2d(x, wa, torch::Tensor(), at::IntArrayRef(ones), at::IntArrayRef(ones));
  const torch::Tensor yb =
      resnet::ChannelsAsMap(torch::conv2d(resnet::MapAsChannels(x), resnet::WholeMapFilter(wb, m)), m);
  const torch::Tensor up = torch::randn(ya.sizes(), options);
  (ya * up).sum().backward();
  (yb * up).sum().backward();
  EXPECT_TRUE(torch::allclose(ya, yb, 1e-4, 1e-4));
  EXPECT_TRUE(torch::allclose(wa.grad(), wb.grad(), 1e-4, 1e-4));
  EXPECT_TRUE(wb.grad().is_contiguous(torch::MemoryFormat::ChannelsLast));
  context.setAllowTF32CuDNN(tf32);
}

}  // namespace

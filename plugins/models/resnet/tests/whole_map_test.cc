// The convolutions over maps smaller than their filter as one matrix product
// (plugins/models/resnet/whole_map.h): which convolutions the rule takes,
// when it runs, and that the rewritten one gives the same output and
// gradients as the whole filter, in fp64 on the CPU.
#include "whole_map.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "whole_map_cases.h"

namespace {

using resnet::kWholeMapMinRows;
using resnet::WholeMapApplies;

// conv2d(x, w, stride, padding) against `rewritten(x, w)` in fp64, x (3, 4,
// h, w) and w (5, 4, r, r) in either layout: the same output, the same
// gradients of x and w, w's in w's layout. Returns the rewritten output,
// for the caller's own checks.
struct Compared {
  torch::Tensor rewritten_output;
  std::string what;
};
template <typename F>
std::vector<Compared> ExpectTheSameFunction(int64_t h, int64_t w, int64_t r, int64_t stride, int64_t padding,
                                            F rewritten) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const std::vector<int64_t> strides{stride, stride}, paddings{padding, padding};
  std::vector<Compared> compared;
  for (bool channels_last : {false, true}) {
    const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    const std::string what = "h " + std::to_string(h) + " w " + std::to_string(w) + " r " + std::to_string(r) +
                             " stride " + std::to_string(stride) + " padding " + std::to_string(padding) +
                             (channels_last ? " channels_last" : "");
    const torch::Tensor x0 = torch::randn({3, 4, h, w}, f64).contiguous(format);
    const torch::Tensor w0 = torch::randn({5, 4, r, r}, f64).contiguous(format);
    torch::Tensor xa = x0.clone().requires_grad_(), wa = w0.clone().requires_grad_();
    torch::Tensor xb = x0.clone().requires_grad_(), wb = w0.clone().requires_grad_();
    const torch::Tensor ya =
        torch::conv2d(xa, wa, torch::Tensor(), at::IntArrayRef(strides), at::IntArrayRef(paddings));
    const torch::Tensor yb = rewritten(xb, wb);
    EXPECT_EQ(ya.sizes(), yb.sizes()) << what;
    if (ya.sizes() != yb.sizes()) continue;
    const torch::Tensor up = torch::randn(ya.sizes(), f64);
    (ya * up).sum().backward();
    (yb * up).sum().backward();
    EXPECT_TRUE(torch::allclose(ya, yb, 1e-12, 1e-12)) << what;
    EXPECT_TRUE(torch::allclose(xa.grad(), xb.grad(), 1e-12, 1e-12)) << what;
    EXPECT_TRUE(torch::allclose(wa.grad(), wb.grad(), 1e-12, 1e-12)) << what;
    EXPECT_EQ(wb.grad().strides(), wb.strides()) << what;
    compared.push_back({yb, what});
  }
  return compared;
}

std::string Show(const std::optional<resnet::WholeMap>& m) {
  if (!m) return "none";
  return std::to_string(m->h) + "x" + std::to_string(m->w) + " to " + std::to_string(m->ho) + "x" +
         std::to_string(m->wo);
}

TEST(WholeMap, TheRuleTakesMapsSmallerThanTheFilterThatEveryWindowHolds) {
  using resnet::WholeMapPlan;
  // h, w, r, s, stride, padding
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 1, 1)), "2x2 to 2x2");  // ResNet layer 3 at 32 px
  EXPECT_EQ(Show(WholeMapPlan(1, 1, 3, 3, 1, 1)), "1x1 to 1x1");  // layer 4: the centre tap alone
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 2, 1)), "2x2 to 1x1");  // layer 4's first: a 2x2 corner
  EXPECT_EQ(Show(WholeMapPlan(1, 1, 3, 3, 2, 1)), "1x1 to 1x1");
  EXPECT_EQ(Show(WholeMapPlan(1, 1, 7, 7, 2, 3)), "1x1 to 1x1");
  EXPECT_EQ(Show(WholeMapPlan(1, 2, 3, 3, 1, 1)), "1x2 to 1x2");
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 5, 5, 1, 2)), "2x2 to 2x2");
  EXPECT_EQ(Show(WholeMapPlan(3, 3, 5, 5, 1, 2)), "3x3 to 3x3");
  EXPECT_EQ(Show(WholeMapPlan(4, 4, 7, 7, 1, 3)), "4x4 to 4x4");
  EXPECT_EQ(Show(WholeMapPlan(4, 4, 3, 3, 1, 1)), "none");  // layer 2: 16 pixels against 9 taps
  EXPECT_EQ(Show(WholeMapPlan(4, 4, 3, 3, 2, 1)), "none");  // layer 3's first: a window misses rows
  EXPECT_EQ(Show(WholeMapPlan(3, 3, 3, 3, 1, 1)), "none");  // 9 pixels, 9 taps
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 1, 1, 1, 0)), "none");  // 1x1 filters
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 1, 1, 2, 0)), "none");  // the 1x1 downsampling reads one pixel of four
  EXPECT_EQ(Show(WholeMapPlan(1, 1, 5, 5, 1, 1)), "none");  // no output
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 1, 2)), "none");  // the outer outputs' windows miss the map's far side
  EXPECT_EQ(Show(WholeMapPlan(1, 4, 3, 3, 1, 1)), "none");  // a row of 4: the windows miss its ends
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 1, 0)), "none");  // no output
  EXPECT_EQ(Show(WholeMapPlan(0, 2, 3, 3, 1, 1)), "none");
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 0, 1)), "none");
  EXPECT_EQ(Show(WholeMapPlan(2, 2, 3, 3, 1, -1)), "none");
}

TEST(WholeMap, ByDefaultItRunsInFp32AndFromTheMeasuredBatchInOtherTypes) {
  using c10::ScalarType;
  const std::optional<bool> rule;                            // unset: the rule
  EXPECT_TRUE(WholeMapApplies(rule, 1, ScalarType::Float));  // fp32 gained at batch 128 and 1024
  EXPECT_TRUE(WholeMapApplies(rule, 128, ScalarType::Float));
  EXPECT_FALSE(WholeMapApplies(rule, 128, ScalarType::BFloat16));  // bf16 lost at batch 128
  EXPECT_FALSE(WholeMapApplies(rule, kWholeMapMinRows - 1, ScalarType::BFloat16));
  EXPECT_TRUE(WholeMapApplies(rule, kWholeMapMinRows, ScalarType::BFloat16));
  EXPECT_TRUE(WholeMapApplies(rule, 1024, ScalarType::BFloat16));  // and gained at 1024
  EXPECT_TRUE(WholeMapApplies(rule, 1024, ScalarType::Half));
  EXPECT_FALSE(WholeMapApplies(rule, 128, ScalarType::Half));
  EXPECT_TRUE(WholeMapApplies(true, 1, ScalarType::BFloat16));
  EXPECT_FALSE(WholeMapApplies(false, 1024, ScalarType::Float));
}

// Every small case the rule takes: the same output (channels_last) and the
// same gradients of x and w, in w's layout, with either layout of x and w.
TEST(WholeMap, TheWholeMapProductIsTheSameFunction) {
  torch::manual_seed(30);
  int taken = 0, several = 0;
  trainbench::testing::ForEachSmallWholeMapCase([&](int64_t h, int64_t w, int64_t r, int64_t stride, int64_t padding) {
    const auto map = resnet::WholeMapPlan(h, w, r, r, stride, padding);
    if (!map) return;
    ++taken;
    if (map->ho * map->wo > 1) ++several;
    for (const Compared& c : ExpectTheSameFunction(h, w, r, stride, padding, [&](const auto&x, const auto&f) {
           return resnet::ChannelsAsMap(torch::conv2d(resnet::MapAsChannels(x), resnet::WholeMapFilter(f, *map)), *map);
         }))
      EXPECT_TRUE(c.rewritten_output.is_contiguous(torch::MemoryFormat::ChannelsLast)) << c.what;
  });
  EXPECT_GE(taken, 20);    // the loops reach the rule's cases
  EXPECT_GE(several, 10);  // and outputs of several pixels
}

// The fold asked for with the kernel on a CPU tensor (or in a build without
// the kernels) is LibTorch's ops': the same values, channels_last strides.
TEST(WholeMap, TheFoldOnTheCpuIsTheOpsEvenWithTheKernelAskedFor) {
  torch::manual_seed(32);
  const resnet::WholeMap map{2, 2, 2, 2, 1, 1};
  const torch::Tensor g = torch::randn({4 * 3, 2 * 2 * 8, 1, 1});
  const torch::Tensor ops = resnet::FoldWholeMapGrad(g, {3, 8, 3, 3}, map, false);
  const torch::Tensor asked = resnet::FoldWholeMapGrad(g, {3, 8, 3, 3}, map, true);
  EXPECT_EQ(ops.sizes(), (std::vector<int64_t>{3, 8, 3, 3}));
  EXPECT_TRUE(ops.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(ops, asked));
  // The centre tap joins every output pixel to its own input pixel: the sum
  // of the four diagonal blocks (p, p).
  const torch::Tensor blocks = g.reshape({4, 3, 2, 2, 8});
  torch::Tensor centre = torch::zeros({3, 8});
  for (int64_t p = 0; p < 4; ++p) centre += blocks[p].select(1, p / 2).select(1, p % 2);
  EXPECT_TRUE(torch::allclose(ops.select(3, 1).select(2, 1), centre));
}

// The measured rule of the late join: below 512 images a step, where the
// filter reaches the convolution in the type it computes in.
TEST(WholeMap, ItJoinsLateBelowTheMeasuredBatchWhereItsFilterIsUncast) {
  using c10::ScalarType;
  EXPECT_TRUE(resnet::WholeMapJoinsLate(128, ScalarType::Float, ScalarType::Float));
  EXPECT_TRUE(resnet::WholeMapJoinsLate(511, ScalarType::Float, ScalarType::Float));
  EXPECT_FALSE(resnet::WholeMapJoinsLate(512, ScalarType::Float, ScalarType::Float));
  EXPECT_FALSE(resnet::WholeMapJoinsLate(1024, ScalarType::Float, ScalarType::Float));
  // Under autocast the fp32 filter is cast first: never late.
  EXPECT_FALSE(resnet::WholeMapJoinsLate(128, ScalarType::Float, ScalarType::BFloat16));
  EXPECT_TRUE(resnet::WholeMapJoinsLate(128, ScalarType::BFloat16, ScalarType::BFloat16));
}

// The map as channels is a view of a channels_last input: no copy.
TEST(WholeMap, AChannelsLastMapIsAViewAsChannels) {
  const torch::Tensor x = torch::randn({2, 8, 2, 2}).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor v = resnet::MapAsChannels(x);
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{2, 32, 1, 1}));
  EXPECT_EQ(v.data_ptr(), x.data_ptr());
  EXPECT_EQ(v.suggest_memory_format(), torch::MemoryFormat::ChannelsLast);  // the cuDNN path's NHWC layout
  const torch::Tensor w = torch::randn({3, 8, 3, 3}).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor f = resnet::WholeMapFilter(w, resnet::WholeMap{2, 2, 2, 2, 1, 1});
  EXPECT_EQ(f.sizes(), (std::vector<int64_t>{12, 32, 1, 1}));
  EXPECT_EQ(f.suggest_memory_format(), torch::MemoryFormat::ChannelsLast);
  // Block (output pixel 0, input pixel 3): the tap one down and one right of the centre.
  EXPECT_TRUE(torch::equal(f.narrow(0, 0, 3).narrow(1, 3 * 8, 8).squeeze(3).squeeze(2), w.select(3, 2).select(2, 2)));
  const resnet::WholeMap map{2, 2, 2, 2, 1, 1};
  const torch::Tensor y = torch::randn({2, 12, 1, 1});
  const torch::Tensor m = resnet::ChannelsAsMap(y, map);
  EXPECT_EQ(m.sizes(), (std::vector<int64_t>{2, 3, 2, 2}));
  EXPECT_EQ(m.data_ptr(), y.data_ptr());
  // Pixel-major: channel k of output pixel (1, 0) is element 2 * 3 + k.
  EXPECT_EQ(m[1][2][1][0].item<float>(), y[1][2 * 3 + 2][0][0].item<float>());
  // The cuDNN path's output is channels_last: still a view.
  const torch::Tensor ycl =
      torch::empty({2, 12, 1, 1}, torch::TensorOptions().memory_format(torch::MemoryFormat::ChannelsLast)).copy_(y);
  ASSERT_EQ(ycl.strides(), (std::vector<int64_t>{12, 1, 12, 12}));
  EXPECT_EQ(resnet::ChannelsAsMap(ycl, map).data_ptr(), ycl.data_ptr());
  EXPECT_TRUE(resnet::ChannelsAsMap(ycl, map).is_contiguous(torch::MemoryFormat::ChannelsLast));
}

}  // namespace

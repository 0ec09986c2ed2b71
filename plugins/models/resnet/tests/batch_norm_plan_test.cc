// The fused batch norm's launch planning (plugins/models/resnet/
// batch_norm_plan.h) on the CPU: how the ResNets' tensors are cut into
// blocks on an H200 (132 multiprocessors) and on smaller and larger devices.
#include "batch_norm_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace resnet::kernels {
namespace {

constexpr int kH200 = 132;

BnProblem Nhwc(DType dtype, int64_t n, int64_t c, int64_t hw, bool residual = false) {
  return BnProblem{dtype, Layout::kNhwc, n, c, hw * hw, /*relu=*/true, residual};
}

std::string Name(const BnProblem& p, int sms) {
  return std::to_string(p.n) + "x" + std::to_string(p.c) + "x" + std::to_string(p.s) + " on " + std::to_string(sms);
}

// What every plan must hold, whatever the shape and device: every channel
// and row covered, the grids within their limits, a one-pass kernel only of
// full 16-byte packs, at most kOnePassMaxSplits blocks a tile, all of them
// resident at once.
void ExpectSound(const BnProblem& p, int sms) {
  const Geometry g = Plan(p, sms);
  const std::string name = Name(p, sms);
  const int64_t rows = p.n * p.s;
  if (p.layout == Layout::kNchw) {
    EXPECT_EQ(g.tiles, p.c) << name;
    EXPECT_GE(g.splits, 1) << name;
    EXPECT_LE(g.splits, kMaxSplits) << name;
    EXPECT_EQ(g.one_pass_rows, 0) << name;
    return;
  }
  EXPECT_EQ(p.c % g.vec, 0) << name;
  EXPECT_GE(int64_t{g.tiles} * g.tx * g.vec, p.c) << name;
  EXPECT_GE(int64_t{g.elem_tiles} * g.elem_tx * g.vec, p.c) << name;
  EXPECT_GE(g.splits, 1) << name;
  EXPECT_LE(g.splits, kMaxSplits) << name;
  EXPECT_GE(g.rows_blocks, 1) << name;
  if (g.one_pass_rows == 0) return;
  EXPECT_TRUE(p.one_pass) << name;
  EXPECT_EQ(g.vec * ElementBytes(p.dtype), 16) << name;
  EXPECT_TRUE(g.one_pass_rows == 2 || g.one_pass_rows == 4) << name;
  EXPECT_LE(g.one_pass_splits, kOnePassMaxSplits) << name;
  EXPECT_LE(int64_t{g.one_pass_splits} * g.one_pass_tiles, int64_t{kOnePassBlocksPerSm} * sms) << name;
  EXPECT_GE(int64_t{g.one_pass_tiles} * g.one_pass_tx * g.vec, p.c) << name;
  EXPECT_GE(int64_t{g.one_pass_splits} * g.one_pass_rows * (kBnThreads / g.one_pass_tx), rows) << name;
}

TEST(BatchNormPlan, EveryResNetShapeIsSoundOnEveryDevice) {
  // The ResNets' batch norms at 32 and 224 px (channels x map side), both
  // types, batches from 1 to 1024, on devices of 1 to 160 multiprocessors.
  const std::pair<int64_t, int64_t> shapes[] = {{64, 16}, {64, 8},   {128, 4},  {256, 2},  {512, 1},
                                                {256, 8}, {512, 4},  {1024, 2}, {2048, 1}, {64, 112},
                                                {64, 56}, {256, 56}, {512, 28}, {2048, 7}};
  for (const int sms : {1, 16, 78, 108, 132, 160})
    for (const DType dtype : {DType::kFloat, DType::kBFloat16})
      for (const int64_t n : {1, 2, 8, 128, 256, 1024})
        for (const auto& [c, hw] : shapes) {
          ExpectSound(Nhwc(dtype, n, c, hw, true), sms);
          BnProblem nchw = Nhwc(dtype, n, c, hw);
          nchw.layout = Layout::kNchw;
          ExpectSound(nchw, sms);
        }
}

// On an H200: the one kernel where the tensor fits the registers of a few
// blocks per channel tile (the ResNets' layers 2-4 at batch 128), the two
// elsewhere.
TEST(BatchNormPlan, OnePassWhereTheTensorFits) {
  EXPECT_GT(Plan(Nhwc(DType::kBFloat16, 8, 64, 8), kH200).one_pass_rows, 0);
  EXPECT_GT(Plan(Nhwc(DType::kFloat, 8, 64, 8, true), kH200).one_pass_rows, 0);
  EXPECT_GT(Plan(Nhwc(DType::kBFloat16, 128, 128, 4, true), kH200).one_pass_rows, 0);  // layer 2 at batch 128
  EXPECT_EQ(Plan(Nhwc(DType::kBFloat16, 128, 64, 8), kH200).one_pass_rows, 0);         // 16 blocks even of 16 channels
  EXPECT_EQ(Plan(Nhwc(DType::kBFloat16, 256, 256, 32), kH200).one_pass_rows, 0);
  EXPECT_EQ(Plan(Nhwc(DType::kBFloat16, 8, 6, 8), kH200).one_pass_rows, 0);  // not 16-byte packs
  BnProblem two = Nhwc(DType::kBFloat16, 8, 64, 8);
  two.one_pass = false;
  EXPECT_EQ(Plan(two, kH200).one_pass_rows, 0);
}

// 64-channel reduction tiles, narrower only where 64 would leave the device
// short of blocks within kMaxSplits (64 channels over 65,536 rows), and
// never below kMinReduceTx packs.
TEST(BatchNormPlan, NarrowerReductionTilesOnlyWhereTheDeviceWouldNotFill) {
  const auto channels = [](const BnProblem& p, int sms) {
    const Geometry g = Plan(p, sms);
    return g.tx * g.vec;
  };
  EXPECT_EQ(channels(Nhwc(DType::kBFloat16, 8, 64, 8), kH200), 64);
  EXPECT_EQ(channels(Nhwc(DType::kBFloat16, 1024, 256, 8), kH200), 64);
  EXPECT_LT(channels(Nhwc(DType::kBFloat16, 1024, 64, 16), kH200), 64);
  EXPECT_GE(channels(Nhwc(DType::kBFloat16, 1024, 64, 16), kH200), kMinReduceTx * 8);
  EXPECT_EQ(channels(Nhwc(DType::kBFloat16, 1024, 64, 16), 16), 64);  // a small device fills anyway
}

TEST(BatchNormPlan, SupportedOnlyWhereTheKernelsAreRight) {
  EXPECT_TRUE(Supported(Nhwc(DType::kBFloat16, 8, 64, 8, true)));
  BnProblem residual_without_relu = Nhwc(DType::kBFloat16, 8, 64, 8, true);
  residual_without_relu.relu = false;
  EXPECT_FALSE(Supported(residual_without_relu));
  EXPECT_FALSE(Supported(Nhwc(DType::kFloat, 1, 64, 1)));  // one value per channel
  EXPECT_FALSE(Supported(Nhwc(DType::kFloat, 8, kMaxTiles + 1, 1)));
  EXPECT_FALSE(Supported(Nhwc(DType::kFloat, 0, 64, 8)));
  EXPECT_FALSE(Supported(Nhwc(DType::kFloat, int64_t{1} << 40, 64, 8)));
}

}  // namespace
}  // namespace resnet::kernels

#include "statistics.h"

#include <gtest/gtest.h>

#include "peak_flops.h"
#include "trainbench/protocol/cell_record.h"

namespace trainbench {
namespace {

TEST(Statistics, SpreadOfRepeatsHasAStudentTInterval) {
  const Spread s = SpreadOf({100, 110, 90});
  EXPECT_DOUBLE_EQ(s.median, 100);
  EXPECT_DOUBLE_EQ(s.min, 90);
  EXPECT_DOUBLE_EQ(s.max, 110);
  EXPECT_DOUBLE_EQ(s.mean, 100);
  // sd 10, n 3, t(0.975, 2) = 4.303: half-width 4.303 * 10 / sqrt(3) = 24.84.
  EXPECT_NEAR(s.ci_high - s.mean, 24.84, 0.01);
  EXPECT_NEAR(s.mean - s.ci_low, 24.84, 0.01);
  const Spread one = SpreadOf({42});
  EXPECT_DOUBLE_EQ(one.ci_low, 42);
  EXPECT_DOUBLE_EQ(one.ci_high, 42);
  EXPECT_DOUBLE_EQ(SpreadOf({1, 2, 3, 4}).median, 2.5);
}

TEST(Statistics, TheRatioIntervalIsPositiveAndWiderForNoisierSides) {
  const auto [low, high] = RatioInterval({200, 220, 180}, {100, 101, 99});
  EXPECT_GT(low, 0);
  EXPECT_LT(low, 2.0);
  EXPECT_GT(high, 2.0);
  // Noisy enough that a t-interval of the baseline alone would reach below 0.
  const auto [low2, high2] = RatioInterval({200, 200}, {10, 100, 190});
  EXPECT_GT(low2, 0);
  EXPECT_GT(high2 - low2, high - low);
  const auto [same_low, same_high] = RatioInterval({300}, {100});
  EXPECT_DOUBLE_EQ(same_low, 3);
  EXPECT_DOUBLE_EQ(same_high, 3);
}

TEST(PeakFlops, ComesFromTheDatasheetByNameAndPrecision) {
  const auto bf16 = DatasheetPeak({{"name", "NVIDIA H200"}, {"amp", "bf16"}});
  ASSERT_TRUE(bf16.has_value());
  EXPECT_EQ(bf16->tflops, 989);
  EXPECT_EQ(bf16->source, "datasheet: NVIDIA H200 bf16 dense");
  EXPECT_EQ(DatasheetPeak({{"name", "NVIDIA H200"}, {"amp", "none"}, {"tf32_convolutions", true}})->tflops, 494);
  EXPECT_EQ(DatasheetPeak({{"name", "NVIDIA H200 NVL"}, {"amp", "none"}})->tflops, 60);
  // Nothing is guessed: a CPU, or a GPU not in the table, has no peak.
  EXPECT_FALSE(DatasheetPeak({{"type", "cpu"}, {"name", "AMD EPYC 9654"}}).has_value());
  EXPECT_FALSE(DatasheetPeak({{"name", "NVIDIA Z9000"}}).has_value());
}

TEST(CellRecord, TimeToTrainIsSetupEpochsAndEvaluation) {
  protocol::Result r;
  r.epoch_seconds = {3.0, 2.0, 2.0};  // measured
  r.measured_epochs = 3;
  r.train_seconds = 7.0;
  r.setup_seconds = 0.5;
  r.warmup_seconds = 1.2;  // inside the first epoch already
  r.eval_seconds = 0.9;
  r.evaluations = 3;
  protocol::CellRecord cell;
  cell.Apply(r);
  EXPECT_DOUBLE_EQ(*cell.time_to_train_seconds, 0.5 + 7.0 + 0.9);
  // A budget ended within the first epoch: 4 epochs projected at the steady
  // rate, one evaluation measured and projected over them, the warm-up added.
  protocol::Result b;
  b.epoch_seconds = {2.0, 2.0, 2.0, 2.0};
  b.measured_epochs = 0;
  b.train_seconds = 8.0;
  b.setup_seconds = 0.5;
  b.warmup_seconds = 1.0;
  b.eval_seconds = 0.25;
  b.evaluations = 1;
  cell.Apply(b);
  EXPECT_DOUBLE_EQ(*cell.time_to_train_seconds, 0.5 + 8.0 + 4 * 0.25 + 1.0);
}

}  // namespace
}  // namespace trainbench

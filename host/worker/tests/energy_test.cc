// Energy counters: a fake powercap tree stands for RAPL.
#include "energy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "epoch_energy.h"
#include "remove_tree.h"
#include "test_env.h"

namespace trainbench::worker {
namespace {
namespace fs = std::filesystem;

class FakePowercap : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("powercap_" + std::to_string(::getpid()));
    trainbench::testing::RemoveTree(root_);
    // Two packages, a core sub-domain (not summed) and another kind of zone.
    Domain("intel-rapl:0", 1000, 262143328850);
    Domain("intel-rapl:1", 2000, 262143328850);
    Domain("intel-rapl:0:0", 999999, 262143328850);
    fs::create_directories(root_ / "dtpm");
  }
  void TearDown() override { trainbench::testing::RemoveTree(root_); }
  void Domain(const std::string& name, unsigned long long energy, unsigned long long range) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "energy_uj") << energy << "\n";
    std::ofstream(root_ / name / "max_energy_range_uj") << range << "\n";
  }
  void Set(const std::string& name, unsigned long long energy) { std::ofstream(root_ / name / "energy_uj") << energy; }
  fs::path root_;
};

TEST_F(FakePowercap, PackageDomainsAreSummed) {
  EnergyChoice rapl = OpenRapl(root_);
  ASSERT_NE(rapl.meter, nullptr) << rapl.reason;
  EXPECT_EQ(rapl.meter->source(), "rapl");
  const double start = rapl.meter->ReadJoules().value();
  Set("intel-rapl:0", 1000 + 3000000);      // +3 J
  Set("intel-rapl:1", 2000 + 1500000);      // +1.5 J
  Set("intel-rapl:0:0", 999999 + 9000000);  // a sub-domain: not counted twice
  EXPECT_NEAR(rapl.meter->ReadJoules().value() - start, 4.5, 1e-9);
}

TEST_F(FakePowercap, ACounterThatWrapsIsCountedAcrossTheWrap) {
  Domain("intel-rapl:0", 9000000, 10000000);  // 1 J below its 10 J range
  trainbench::testing::RemoveTree(root_ / "intel-rapl:1");
  EnergyChoice rapl = OpenRapl(root_);
  ASSERT_NE(rapl.meter, nullptr) << rapl.reason;
  const double start = rapl.meter->ReadJoules().value();
  Set("intel-rapl:0", 500000);  // wrapped: 1 J to the top, then 0.5 J
  EXPECT_NEAR(rapl.meter->ReadJoules().value() - start, 1.5, 1e-9);
}

TEST_F(FakePowercap, ASmallStepBackIsAGlitchNotAWrap) {
  // A 262,144 J range (as Intel packages have): a 5 J dip must not become
  // 262,139 J.
  Domain("intel-rapl:0", 100000000, 262143328850);
  trainbench::testing::RemoveTree(root_ / "intel-rapl:1");
  EnergyChoice rapl = OpenRapl(root_);
  ASSERT_NE(rapl.meter, nullptr) << rapl.reason;
  const double start = rapl.meter->ReadJoules().value();
  Set("intel-rapl:0", 95000000);  // 5 J back
  EXPECT_NEAR(rapl.meter->ReadJoules().value() - start, 0.0, 1e-9);
  EXPECT_EQ(rapl.meter->glitches(), 1);
  Set("intel-rapl:0", 98000000);  // then on from there: +3 J
  EXPECT_NEAR(rapl.meter->ReadJoules().value() - start, 3.0, 1e-9);
  EXPECT_EQ(rapl.meter->glitches(), 1);
}

TEST_F(FakePowercap, WhatCannotBeReadIsSaidNotGuessed) {
  EXPECT_NE(OpenRapl(root_ / "absent").reason.find("is absent"), std::string::npos);
  fs::remove(root_ / "intel-rapl:1" / "energy_uj");
  EnergyChoice unreadable = OpenRapl(root_);
  EXPECT_EQ(unreadable.meter, nullptr);
  EXPECT_NE(unreadable.reason.find("not readable"), std::string::npos) << unreadable.reason;
  // An accelerator NVML does not know (no driver here, or a stand-in's UUID).
  EnergyChoice gpu = OpenEnergyMeter({{"type", "gpu-stand-in"}, {"uuid", "GPU-stand-in-0"}});
  EXPECT_EQ(gpu.meter, nullptr);
  EXPECT_FALSE(gpu.reason.empty());
  EXPECT_NE(OpenEnergyMeter({{"type", "tpu"}}).reason.find("no energy counter known"), std::string::npos);
}

// NVML through its stand-in: the stand-in GPU's counter, read by UUID; an
// unknown device is said, not guessed.
TEST(FakeNvml, TheGpuCounterIsReadByItsUuid) {
  ::setenv("TRAINBENCH_NVML_LIBRARY", trainbench::testing::FakeNvml().c_str(), 1);
  EnergyChoice gpu = OpenEnergyMeter({{"type", "gpu-stand-in"}, {"uuid", "GPU-stand-in-0"}});
  EnergyChoice unknown = OpenEnergyMeter({{"type", "gpu"}, {"uuid", "GPU-0000"}});
  ::unsetenv("TRAINBENCH_NVML_LIBRARY");
  ASSERT_NE(gpu.meter, nullptr) << gpu.reason;
  EXPECT_EQ(gpu.meter->source(), "nvml");
  const double before = gpu.meter->ReadJoules().value();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double after = gpu.meter->ReadJoules().value();
  EXPECT_GT(after - before, 0.2 * 250 * 0.9);  // 250 W for at least 0.2 s
  EXPECT_LT(after - before, 0.2 * 250 * 10);   // and not wildly more (a slow machine may sleep longer)
  EXPECT_EQ(unknown.meter, nullptr);
  EXPECT_NE(unknown.reason.find("NVML does not know the device GPU-0000"), std::string::npos) << unknown.reason;
}

// A meter that reads `joules` in turn, then fails (none).
class ScriptedMeter : public EnergyMeter {
 public:
  explicit ScriptedMeter(std::vector<double> joules) : joules_(std::move(joules)) {}
  std::string source() const override { return "rapl"; }
  std::optional<double> ReadJoules() override {
    if (next_ >= joules_.size()) return std::nullopt;
    return joules_[next_++];
  }

 private:
  std::vector<double> joules_;
  size_t next_ = 0;
};

EnergyChoice Scripted(std::vector<double> joules) { return {std::make_unique<ScriptedMeter>(std::move(joules)), ""}; }

// What an evaluation inside an epoch reads is left out; each epoch's joules,
// their sum, per sample and the average power over the training time.
TEST(EpochEnergy, CountsTheEpochsTrainingAlone) {
  EpochEnergy energy(Scripted({10, 15, 40, 50, 100, 130}));
  energy.StartEpoch();  // 10
  energy.Pause();       // 15: 5 J
  energy.Resume();      // 40 (the evaluation's 25 J left out)
  energy.EndEpoch();    // 50: 10 J more
  energy.StartEpoch();  // 100
  energy.EndEpoch();    // 130: 30 J
  protocol::Result result;
  energy.Fill(result, /*trained_seconds=*/2.0, /*samples=*/90);
  ASSERT_TRUE(result.energy_joules.has_value());
  EXPECT_DOUBLE_EQ(*result.energy_joules, 45.0);
  EXPECT_EQ(result.epoch_energy_joules, (std::vector<double>{15.0, 30.0}));
  EXPECT_DOUBLE_EQ(result.joules_per_sample.value(), 0.5);
  EXPECT_DOUBLE_EQ(result.average_power_watts.value(), 22.5);
  EXPECT_EQ(result.energy_source.value_or(""), "rapl");
}

// A meter that stops answering leaves no figure, and says why.
TEST(EpochEnergy, AMeterThatStopsAnsweringLeavesTheReason) {
  EpochEnergy energy(Scripted({10, 20}));
  energy.StartEpoch();
  energy.EndEpoch();
  energy.StartEpoch();  // fails
  energy.EndEpoch();
  protocol::Result result;
  energy.Fill(result, 1.0, 10);
  EXPECT_FALSE(result.energy_joules.has_value());
  EXPECT_EQ(result.energy_reason.value_or(""), "the rapl energy counter stopped answering during training");
  EpochEnergy none(EnergyChoice{nullptr, "no RAPL here"});
  none.StartEpoch();
  none.EndEpoch();
  protocol::Result without;
  none.Fill(without, 1.0, 10);
  EXPECT_EQ(without.energy_reason.value_or(""), "no RAPL here");
}

}  // namespace
}  // namespace trainbench::worker

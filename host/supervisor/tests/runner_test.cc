// The runner and the plugin catalog, below the command line.
#include "runner.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "eta.h"
#include "plugin_catalog.h"
#include "run_log.h"
#include "test_env.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

// Asks for a stop as soon as a cell starts: after the runner's check at the
// cell's start, before its first attempt.
class StopOnCellStart : public RunObserver {
 public:
  explicit StopOnCellStart(RunStop& stop) : stop_(stop) {}
  void OnCellStarted(size_t, const CellRecord&) override { stop_.Request(SIGTERM); }

 private:
  RunStop& stop_;
};

TEST(Runner, AStopBeforeTheFirstAttemptIsRecordedNotACrash) {
  Experiment e;
  e.name = "stop";
  e.dataset.kind = "synthetic";
  PluginUse model, device;
  model.plugin = model.label = "m";
  model.path = "/nonexistent/m.so";  // never loaded: no worker starts
  device.plugin = device.label = "cpu";
  device.path = "/nonexistent/cpu.so";
  e.models = {model};
  e.devices = {device};
  const fs::path out = fs::path(::testing::TempDir()) / ("runner_stop_" + std::to_string(::getpid()));
  RunStop stop;
  StopOnCellStart stopper(stop);
  const RunOutcome outcome = RunExperiment(e, out, nlohmann::json::object(), {&stopper}, stop);
  EXPECT_EQ(outcome.exit_code, 128 + SIGTERM);
  const auto& cell = outcome.results.at("cells").at(0);
  EXPECT_EQ(cell.at("status"), "interrupted");
  EXPECT_NE(cell.at("reason").get<std::string>().find("before this cell started (SIGTERM)"), std::string::npos) << cell;
  fs::remove_all(out);
}

TEST(Runner, ThePlanIsModelMajorAndItsRecordsCarryTheEntries) {
  Experiment e;
  for (const char* m : {"cnn", "resnet18"}) {
    PluginUse use;
    use.plugin = use.label = m;
    use.options = {{"width", 2}};
    e.models.push_back(use);
  }
  for (const char* d : {"cpu", "gpu0", "gpu1"}) {
    PluginUse use;
    use.plugin = "cuda";
    use.label = d;
    use.record = {{"name", "cuda"}, {"kind", "device"}};
    e.devices.push_back(use);
  }
  const std::vector<PlannedCell> plan = e.Cells();
  ASSERT_EQ(plan.size(), 6u);
  std::vector<std::string> names;
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].index, i);
    names.push_back(plan[i].name());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"cnn on cpu", "cnn on gpu0", "cnn on gpu1", "resnet18 on cpu",
                                             "resnet18 on gpu0", "resnet18 on gpu1"}));
  const CellRecord record = PlannedRecord(plan[4]);
  EXPECT_EQ(record.model, "resnet18");
  EXPECT_EQ(record.device, "gpu0");
  EXPECT_EQ(record.device_plugin, "cuda");
  EXPECT_EQ(record.status, "pending");
  EXPECT_EQ(record.model_options, (nlohmann::json{{"width", 2}}));
  ASSERT_EQ(record.plugins.size(), 1u);  // the model entry has no plugin record here
  EXPECT_EQ(record.plugins[0]["name"], "cuda");
  EXPECT_FALSE(record.samples_per_second);
}

protocol::Progress At(int64_t steps_done, double elapsed, int64_t steps_per_epoch = 100) {
  protocol::Progress p;
  p.steps_done = steps_done;
  p.elapsed_seconds = elapsed;
  p.steps_per_epoch = steps_per_epoch;
  return p;
}

TEST(Eta, AnAttemptEndsAtItsEpochsOrItsBudgets) {
  EXPECT_FALSE(AttemptSecondsLeft(At(0, 0), 3, std::nullopt, std::nullopt));  // no step timed yet
  // 50 of 300 steps in 10 s: 250 more at 0.2 s.
  EXPECT_DOUBLE_EQ(*AttemptSecondsLeft(At(50, 10), 3, std::nullopt, std::nullopt), 50.0);
  EXPECT_DOUBLE_EQ(*AttemptSecondsLeft(At(50, 10), 3, 80, std::nullopt), 6.0);     // a step budget
  EXPECT_DOUBLE_EQ(*AttemptSecondsLeft(At(50, 10), 3, std::nullopt, 25.0), 15.0);  // a time budget
  EXPECT_DOUBLE_EQ(*AttemptSecondsLeft(At(400, 10), 3, std::nullopt, std::nullopt), 0.0);
}

TEST(Eta, CellsToComeTakeWhatTheirDeviceTookBefore) {
  Experiment e;
  e.training.epochs = 1;
  e.measurement.repeats = 2;
  for (const char* m : {"a", "b"}) {
    PluginUse use;
    use.plugin = use.label = m;
    e.models.push_back(use);
  }
  for (const char* d : {"cpu", "gpu", "gone"}) {
    PluginUse use;
    use.plugin = use.label = d;
    use.path = std::string(d) == "gone" ? "" : "/x.so";  // "gone" cells are skipped: no time
    e.devices.push_back(use);
  }
  RunEta eta(e);
  eta.CellStarted(0);
  eta.AttemptStarted();
  // Nothing finished yet: the cells to come at this cell's pace (2 repeats
  // of 10 s + 10 s each): this one 10 s left + 20 s of its second repeat.
  auto first = eta.OnProgress(At(50, 10));
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(first->cell_seconds, 30.0);
  EXPECT_DOUBLE_EQ(first->run_seconds, 30.0 + 3 * 40.0);  // a/gpu, b/cpu, b/gpu
  eta.CellFinished(0, true, 100.0);                       // a on cpu: 100 s in all
  eta.CellStarted(1);
  eta.AttemptStarted();
  eta.AttemptStarted();  // the second repeat
  auto second = eta.OnProgress(At(50, 1));
  ASSERT_TRUE(second);
  EXPECT_DOUBLE_EQ(second->cell_seconds, 1.0);
  // b on cpu as a on cpu took (100 s); b on gpu as any cell that ran (100 s).
  EXPECT_DOUBLE_EQ(second->run_seconds, 1.0 + 100.0 + 100.0);
  eta.CellFinished(1, true, 4.0);  // a on gpu: 4 s
  eta.CellFinished(2, false);      // a on gone: skipped
  eta.CellStarted(3);
  eta.AttemptStarted();
  auto third = eta.OnProgress(At(50, 10));
  ASSERT_TRUE(third);
  EXPECT_DOUBLE_EQ(third->run_seconds, 30.0 + 4.0);  // then b on gpu, as a on gpu
}

TEST(Eta, DurationsReadAsTimes) {
  EXPECT_EQ(DurationText(41.6), "42 s");
  EXPECT_EQ(DurationText(185), "3 min 5 s");
  EXPECT_EQ(DurationText(7800), "2 h 10 min");
  EXPECT_EQ(DurationText(-3), "0 s");
}

TEST(PluginCatalog, ARejectedPluginIsFoundByItsFileName) {
  const PluginCatalog catalog = PluginCatalog::Discover({testing::FixtureDir()});
  const PluginInfo* rejected = catalog.FindRejected("fixture_fingerprint");
  ASSERT_NE(rejected, nullptr);
  EXPECT_FALSE(rejected->loaded);
  EXPECT_NE(rejected->reason.find("LibTorch differs"), std::string::npos) << rejected->reason;
  EXPECT_EQ(catalog.FindRejected("no_such_plugin"), nullptr);
  // Loaded plugins are not "rejected"; the one loadable fixture is described.
  ASSERT_NE(catalog.Find("fixture_abi"), nullptr);
  EXPECT_EQ(catalog.Find("fixture_abi")->path, (testing::FixtureDir() / "fixture_other_compiler.so").string());
}

}  // namespace
}  // namespace trainbench

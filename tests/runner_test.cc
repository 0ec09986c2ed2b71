// The runner and the plugin catalog, below the command line.
#include "runner.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "plugin_catalog.h"
#include "test_env.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

// Asks for a stop as soon as a cell starts: after the runner's check at the
// cell's start, before its first attempt.
class StopOnCellStart : public RunObserver {
 public:
  void OnCellStarted(size_t, const CellRecord&) override { RequestStop(SIGTERM); }
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
  StopOnCellStart stopper;
  const RunOutcome outcome = RunExperiment(e, out, nlohmann::json::object(), {&stopper});
  ClearStopRequest();
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

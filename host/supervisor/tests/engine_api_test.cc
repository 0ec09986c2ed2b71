// The engine library's public API (trainbench/engine.h) below the command:
// plugins found, plans built from code and from text, refusals as
// EngineError with their exit codes. Nothing here trains.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_env.h"
#include "trainbench/engine.h"

namespace trainbench {
namespace {

Engine TestEngine() {
  EngineOptions options;
  options.plugin_dirs = {testing::PluginDir()};
  return Engine(options);
}

TEST(EngineApi, FindsTheProjectsPlugins) {
  const Engine engine = TestEngine();
  std::vector<std::string> names;
  for (const auto& p : engine.plugins()) names.push_back(p.name);
  for (const char* expected : {"simple_cnn", "resnet18", "resnet50", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

TEST(EngineApi, APlanBuiltInCodeListsItsCellsModelMajor) {
  const Engine engine = TestEngine();
  const ExperimentPlan plan = engine.Build(ExperimentBuilder("api")
                                               .Synthetic(64, 32)
                                               .Model("simple_cnn")
                                               .Model("resnet18", {{"stem", "cifar"}}, "resnet18-cifar")
                                               .Device("cpu")
                                               .Device("cpu", {{"threads", 1}}, "cpu-1")
                                               .Epochs(1));
  EXPECT_EQ(plan.name(), "api");
  EXPECT_EQ(plan.cells(), (std::vector<std::string>{"simple_cnn on cpu", "simple_cnn on cpu-1", "resnet18-cifar on cpu",
                                                    "resnet18-cifar on cpu-1"}));
  const nlohmann::json resolved = plan.ToJson();
  EXPECT_EQ(resolved["models"][1]["options"]["stem"], "cifar");
  EXPECT_EQ(resolved["models"][1]["options"]["image_size"], 32);  // the schema's default, filled in
}

TEST(EngineApi, RefusalsAreEngineErrorsWithTheConfigExitCode) {
  const Engine engine = TestEngine();
  try {
    engine.Parse("name: x\nmodels: [simple_cnn]\n", "inline.yaml");
    FAIL() << "a config without a dataset was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.exit_code(), kExitConfig);
    EXPECT_NE(std::string(e.what()).find("inline.yaml:1:1: missing key 'dataset'"), std::string::npos) << e.what();
  }
  try {
    engine.Build(ExperimentBuilder("x").Synthetic(64, 32).Model("no_such_model").Device("cpu"));
    FAIL() << "an unknown plugin was accepted";
  } catch (const EngineError& e) {
    EXPECT_EQ(e.exit_code(), kExitConfig);
    EXPECT_NE(std::string(e.what()).find("no model plugin 'no_such_model'"), std::string::npos) << e.what();
  }
}

TEST(EngineApi, TheApiVersionIsTheOneThisSessionDocuments) {
  EXPECT_EQ(kEngineApiVersionMajor, 1);
  EXPECT_GE(kEngineApiVersionMinor, 2);  // SetUpLogging, LogError
  EXPECT_FALSE(EngineVersion().empty());
}

}  // namespace
}  // namespace trainbench

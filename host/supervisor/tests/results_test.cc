#include "results.h"

#include <gtest/gtest.h>

#include <fstream>

namespace trainbench {
namespace {

namespace fs = std::filesystem;

nlohmann::json CellJson(const std::string& model, const std::string& device, const std::string& status, double sps) {
  return {{"model", model},         {"device", device},       {"status", status}, {"samples_per_second", sps},
          {"epoch_seconds", {1.0}}, {"test_accuracy", {0.5}}, {"params", 1000}};
}

CellRecord Cell(const std::string& model, const std::string& device, const std::string& status, double sps) {
  return protocol::CellRecordFromJson(CellJson(model, device, status, sps));
}

TEST(Results, SpeedupIsAgainstTheBaselineOfTheSameModel) {
  Results r(::testing::TempDir(), {}, {}, "cpu");
  r.cells().push_back(Cell("a", "cpu", "ok", 100));
  r.cells().push_back(Cell("a", "cuda", "ok", 750));
  r.cells().push_back(Cell("b", "cpu", "failed", 0));
  r.cells().push_back(Cell("b", "cuda", "ok", 900));
  r.ComputeSpeedups();
  EXPECT_FALSE(r.cells()[0].speedup.has_value());
  EXPECT_DOUBLE_EQ(r.cells()[1].speedup.value(), 7.5);
  EXPECT_FALSE(r.cells()[3].speedup.has_value());         // no baseline result
  EXPECT_TRUE(r.doc()["cells"][0]["speedup"].is_null());  // written as null, as results.json always had it
}

TEST(Results, WritesJsonAndCsvAtomically) {
  const fs::path dir = fs::path(::testing::TempDir()) / "results_write";
  fs::create_directories(dir);
  Results r(dir, {{"name", "x"}}, {{"cpu_model", "test"}}, "cpu");
  r.cells().push_back(Cell("a", "cpu", "ok", 100));
  r.cells().back().reason = "has, a comma and \"quotes\"";
  r.Write();
  std::ifstream in(dir / "results.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["cells"][0]["model"], "a");
  EXPECT_EQ(doc["system"]["cpu_model"], "test");
  EXPECT_FALSE(fs::exists(dir / "results.json.tmp"));
  std::ifstream csv(dir / "results.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_EQ(header.rfind("model,device,status,reason,", 0), 0u);
  EXPECT_NE(row.find("\"has, a comma and \"\"quotes\"\"\""), std::string::npos) << row;
}

TEST(Results, RecordsFromDiskAreCheckedBeforeUse) {
  nlohmann::json cell = CellJson("a", "cpu", "ok", 100);
  cell["config"] = nlohmann::json::object();
  cell["train_loss"] = {2.3};
  auto doc = [](const nlohmann::json& c) { return nlohmann::json{{"format", "trainbench-results/1"}, {"cells", {c}}}; };
  EXPECT_EQ(CellsOf(doc(cell)).problem, "");
  EXPECT_EQ(CellsOf(doc(cell)).cells.size(), 1u);
  nlohmann::json no_epochs = cell;
  no_epochs.erase("epoch_seconds");
  EXPECT_EQ(CellsOf(doc(no_epochs)).problem, "cell a on cpu: 'epoch_seconds' missing or not a list");
  nlohmann::json text_rate = cell;
  text_rate["samples_per_second"] = "fast";
  EXPECT_EQ(CellsOf(doc(text_rate)).problem, "cell record: field 'samples_per_second' has the wrong type (string)");
  EXPECT_EQ(CellsOf(doc(CellJson("a", "cpu", "failed", 0))).problem, "");  // only ok cells carry measurements
  EXPECT_EQ(CellsOf(nlohmann::json()).problem, "not a JSON object");
  EXPECT_TRUE(CellsOf(doc(no_epochs)).cells.empty());
}

TEST(Results, RecordsKeepWhatANewerVersionWrote) {
  nlohmann::json j = CellJson("a", "cpu", "ok", 100);
  j["joules_per_sample"] = 0.25;  // a field this version does not know
  const CellRecord cell = protocol::CellRecordFromJson(j);
  EXPECT_EQ(protocol::ToJson(cell)["joules_per_sample"], 0.25);
  EXPECT_EQ(protocol::ToJson(cell)["samples_per_second"], 100.0);
}

TEST(Results, UnwritableFolderIsAClearError) {
  Results r("/proc/trainbench-cannot-write-here", {}, {}, "cpu");
  try {
    r.Write();
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainbench

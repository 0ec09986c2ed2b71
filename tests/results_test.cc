#include "results.h"

#include <gtest/gtest.h>

#include <fstream>

namespace trainbench {
namespace {

namespace fs = std::filesystem;

nlohmann::json Cell(const std::string& model, const std::string& device, const std::string& status, double sps) {
  return {{"model", model},         {"device", device},       {"status", status}, {"samples_per_second", sps},
          {"epoch_seconds", {1.0}}, {"test_accuracy", {0.5}}, {"params", 1000}};
}

TEST(Results, SpeedupIsAgainstTheBaselineOfTheSameModel) {
  Results r(::testing::TempDir(), {}, {}, "cpu");
  r.cells().push_back(Cell("a", "cpu", "ok", 100));
  r.cells().push_back(Cell("a", "cuda", "ok", 750));
  r.cells().push_back(Cell("b", "cpu", "failed", 0));
  r.cells().push_back(Cell("b", "cuda", "ok", 900));
  r.ComputeSpeedups();
  EXPECT_TRUE(r.cells()[0]["speedup"].is_null());
  EXPECT_DOUBLE_EQ(r.cells()[1]["speedup"].get<double>(), 7.5);
  EXPECT_TRUE(r.cells()[3]["speedup"].is_null());  // no baseline result
}

TEST(Results, WritesJsonAndCsvAtomically) {
  const fs::path dir = fs::path(::testing::TempDir()) / "results_write";
  fs::create_directories(dir);
  Results r(dir, {{"name", "x"}}, {{"cpu_model", "test"}}, "cpu");
  r.cells().push_back(Cell("a", "cpu", "ok", 100));
  r.cells().back()["reason"] = "has, a comma and \"quotes\"";
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
  nlohmann::json cell = Cell("a", "cpu", "ok", 100);
  cell["config"] = nlohmann::json::object();
  cell["train_loss"] = {2.3};
  EXPECT_EQ(CellRecordProblem(cell), "");
  nlohmann::json no_epochs = cell;
  no_epochs.erase("epoch_seconds");
  EXPECT_EQ(CellRecordProblem(no_epochs), "cell a on cpu: 'epoch_seconds' missing or not a list");
  nlohmann::json text_rate = cell;
  text_rate["samples_per_second"] = "fast";
  EXPECT_NE(CellRecordProblem(text_rate).find("'samples_per_second' missing or not a positive number"),
            std::string::npos);
  EXPECT_EQ(CellRecordProblem(Cell("a", "cpu", "failed", 0)), "");  // only ok cells carry measurements
  EXPECT_EQ(ResultsDocumentProblem(nlohmann::json()), "not a JSON object");
  const nlohmann::json doc = {{"format", "trainbench-results/1"}, {"cells", {no_epochs}}};
  EXPECT_EQ(ResultsDocumentProblem(doc), "cell a on cpu: 'epoch_seconds' missing or not a list");
}

TEST(Results, TheTableSurvivesCellsWithoutMeasurements) {
  Results r(::testing::TempDir(), {}, {}, "cpu");
  r.cells().push_back({{"model", "a"}, {"device", "cpu"}, {"status", "ok"}, {"speedup", "x"}, {"params", "p"}});
  r.cells().push_back({{"model", "a"}, {"device", "gpu"}, {"status", "failed"}, {"reason", 3}});
  const std::string table = r.Table();
  EXPECT_NE(table.find("a"), std::string::npos) << table;
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

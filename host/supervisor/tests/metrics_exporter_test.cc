// The metrics registry as the run feeds it (metrics.cc): worker events and
// cell outcomes in, the text a Prometheus server scrapes from /metrics out,
// read over HTTP from the exporter's own server.
#include <curl/curl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "config_loader.h"
#include "metrics.h"
#include "net.h"
#include "results.h"

namespace trainbench {
namespace {

const char* kExperiment = R"(name: unit
seed: 1
dataset: {kind: synthetic, train_size: 128, test_size: 32}
models: [simple_cnn]
devices: [cpu, {plugin: cpu, label: cpu-two}]
training: {epochs: 2, batch_size: 32}
measurement: {warmup_steps: 1}
)";

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// The exporter's /metrics page.
std::string Scrape(const MetricsExporter& exporter) {
  std::string body;
  CURL* curl = curl_easy_init();
  const std::string url = "http://" + exporter.address() + "/metrics";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  EXPECT_EQ(code, CURLE_OK) << curl_easy_strerror(code);
  return body;
}

// The value of the series whose line starts with `series` (name and labels
// as Prometheus's text format writes them), or NaN when there is none.
double Value(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

CellRecord Cell(const std::string& device) {
  CellRecord cell;
  cell.model = cell.model_plugin = "simple_cnn";
  cell.device = device;
  cell.device_plugin = "cpu";
  return cell;
}

protocol::Progress AfterSteps(int64_t steps, int64_t batch, double loss) {
  protocol::Progress p;
  p.epoch = 1 + steps / 4;
  p.step = steps % 4;
  p.steps_per_epoch = 4;
  p.steps_done = steps;
  p.samples_done = steps * batch;
  p.loss = loss;
  p.samples_per_second = 1000;
  p.step_seconds = {0.03, 0.04};
  p.memory_bytes = 1 << 20;
  p.peak_memory_bytes = 2 << 20;
  return p;
}

TEST(MetricsExporter, TurnsARunsEventsIntoSeries) {
  const Experiment e = ParseExperiment(kExperiment, "unit.yaml", "/tmp");
  MetricsSpec spec;
  spec.address = "127.0.0.1:" + std::to_string(FreeTcpPort());
  MetricsExporter exporter(spec);
  exporter.OnRunStarted(e, 2);
  std::string page = Scrape(exporter);
  EXPECT_EQ(Value(page, R"(trainbench_cells{experiment="unit"})"), 2) << page;
  EXPECT_EQ(Value(page, R"(trainbench_run_state{experiment="unit",state="running"})"), 1) << page;
  EXPECT_EQ(Value(page, R"(trainbench_run_state{experiment="unit",state="finished"})"), 0) << page;

  const std::string first = R"({device_type="cpu",experiment="unit",gpu="",model="simple_cnn",variant="cpu"})";
  CellRecord cell = Cell("cpu");
  exporter.OnCellStarted(0, cell);
  protocol::Started started;
  started.params = 1234;
  started.steps_per_epoch = 4;
  exporter.OnEvent(0, cell, started);
  exporter.OnEvent(0, cell, AfterSteps(2, 32, 2.5));
  page = Scrape(exporter);
  EXPECT_EQ(Value(page, R"(trainbench_cell_index{experiment="unit"})"), 1) << page;
  EXPECT_EQ(Value(page, "trainbench_model_parameters" + first), 1234) << page;
  EXPECT_EQ(Value(page, "trainbench_samples_total" + first), 64) << page;
  EXPECT_EQ(Value(page, "trainbench_steps_total" + first), 2) << page;
  EXPECT_EQ(Value(page, "trainbench_cell_progress_ratio" + first), 0.25) << page;  // 2 of 2 x 4 steps
  EXPECT_EQ(Value(page, "trainbench_train_loss" + first), 2.5) << page;
  EXPECT_EQ(Value(page, "trainbench_device_memory_peak_bytes" + first), 2 << 20) << page;
  EXPECT_EQ(Value(page, "trainbench_step_duration_seconds_count" + first), 2) << page;
  EXPECT_NEAR(Value(page, "trainbench_step_duration_seconds_sum" + first), 0.07, 1e-12) << page;

  // A second attempt of the cell starts again from step 0: the counters do
  // not go back (Prometheus would read a reset), and count on once it
  // passes what the first attempt reached.
  exporter.OnEvent(0, cell, AfterSteps(1, 32, 3.0));
  page = Scrape(exporter);
  EXPECT_EQ(Value(page, "trainbench_samples_total" + first), 64) << page;
  exporter.OnEvent(0, cell, AfterSteps(5, 32, 1.5));
  protocol::Epoch epoch;
  epoch.epoch = 1;
  epoch.seconds = 0.5;
  epoch.train_loss = 1.25;
  epoch.test_accuracy = 0.375;
  exporter.OnEvent(0, cell, epoch);
  page = Scrape(exporter);
  EXPECT_EQ(Value(page, "trainbench_samples_total" + first), 160) << page;
  EXPECT_EQ(Value(page, "trainbench_test_accuracy_ratio" + first), 0.375) << page;
  EXPECT_EQ(Value(page, "trainbench_train_loss" + first), 1.25) << page;

  cell.status = "ok";
  cell.samples_per_second = 1100;
  exporter.OnCellFinished(0, cell);
  page = Scrape(exporter);
  EXPECT_EQ(Value(page, R"(trainbench_cells_finished_total{experiment="unit",status="ok"})"), 1) << page;
  EXPECT_EQ(Value(page, "trainbench_cell_samples_per_second" + first), 1100) << page;
  EXPECT_EQ(Value(page, "trainbench_cell_progress_ratio" + first), 1) << page;

  // The second cell's loss went to NaN and the cell failed: the loss says
  // NaN, the run ends as failed.
  const std::string second = R"({device_type="cpu",experiment="unit",gpu="",model="simple_cnn",variant="cpu-two"})";
  CellRecord other = Cell("cpu-two");
  exporter.OnCellStarted(1, other);
  exporter.OnEvent(1, other, started);
  exporter.OnEvent(1, other, AfterSteps(1, 32, 7.0));
  other.status = "failed";
  other.loss_nan = true;
  exporter.OnCellFinished(1, other);
  Results results("/tmp", nlohmann::json::object(), nlohmann::json::object(), "cpu");
  results.cells() = {cell, other};
  exporter.OnRunFinished(results);
  page = Scrape(exporter);
  EXPECT_TRUE(std::isnan(Value(page, "trainbench_train_loss" + second))) << page;
  EXPECT_EQ(Value(page, "trainbench_samples_total" + first), 160) << page;  // the first cell's series stay
  EXPECT_EQ(Value(page, R"(trainbench_cells_finished_total{experiment="unit",status="failed"})"), 1) << page;
  EXPECT_EQ(Value(page, R"(trainbench_run_state{experiment="unit",state="failed"})"), 1) << page;
  EXPECT_EQ(Value(page, R"(trainbench_run_state{experiment="unit",state="running"})"), 0) << page;
  EXPECT_EQ(Value(page, R"(trainbench_run_remaining_seconds{experiment="unit"})"), 0) << page;
}

}  // namespace
}  // namespace trainbench

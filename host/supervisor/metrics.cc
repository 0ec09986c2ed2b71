#include "metrics.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "eta.h"
#include "gpu_monitor.h"
#include "metric_families.h"
#include "metrics_server.h"
#include "system_info.h"
#include "worker_client.h"

namespace trainbench {
namespace {

using prometheus::Labels;

// Seconds of CPU time used by process `pid` so far, or -1.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

struct MetricsExporter::Impl : MetricFamilies {
  MetricsSpec options;
  const RunStop* run = nullptr;
  std::unique_ptr<MetricsServer> server;

  void SetState(const std::string& state) {
    for (const char* s : {"running", "finished", "failed", "interrupted"})
      run_state.Add({{"experiment", experiment}, {"state", s}}).Set(state == s ? 1 : 0);
  }
  static double Now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  std::mutex mutex;  // guards the fields below (the sampler thread reads them)
  std::string experiment;
  Labels cell_labels;  // experiment, model, device_type, variant, gpu
  int gpu_index = -1;
  std::set<std::string> accelerators;  // device labels of accelerator plugins
  int64_t epochs_configured = 1;
  RunEta run_eta_estimate;  // the same estimate as the log's ETAs

  std::unique_ptr<GpuMonitor> gpus = GpuMonitor::Open();
  std::thread sampler;
  std::condition_variable stop_cv;
  bool stopping = false;

  void Sample() {
    double last_cpu = -1;
    int last_pid = 0;
    auto last_time = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop_cv.wait_for(lock, std::chrono::seconds(1), [this] { return stopping; })) {
      if (cell_labels.empty()) continue;
      if (gpus && gpu_index >= 0) {
        if (auto s = gpus->Sample(gpu_index)) {
          gpu_util.Add(cell_labels).Set(s->utilization_ratio);
          if (s->power_watts) gpu_power.Add(cell_labels).Set(*s->power_watts);
          if (s->temperature_celsius) gpu_temp.Add(cell_labels).Set(*s->temperature_celsius);
          if (s->memory_used_bytes) gpu_memory.Add(cell_labels).Set(*s->memory_used_bytes);
        }
      }
      const int pid = run != nullptr ? run->workers() : 0;
      const auto now = std::chrono::steady_clock::now();
      if (pid > 0) {
        const double cpu = ProcessCpuSeconds(pid);
        const double wall = std::chrono::duration<double>(now - last_time).count();
        if (pid == last_pid && cpu >= 0 && last_cpu >= 0 && wall > 0) {
          const double cores = std::max(1u, std::thread::hardware_concurrency());
          cpu_util.Add(cell_labels).Set((cpu - last_cpu) / wall / cores);
        }
        last_cpu = cpu;
        last_pid = pid;
      }
      last_time = now;
    }
  }

  Labels LabelsOf(const CellRecord& cell) {
    Labels l{{"experiment", experiment},
             {"model", cell.model},
             {"device_type", cell.device_plugin},
             {"variant", cell.device}};
    l["gpu"] =
        cell.hardware.is_object() && cell.hardware.contains("index") && cell.hardware["index"].is_number_integer()
            ? std::to_string(cell.hardware["index"].get<int>())
            : "";
    return l;
  }
};

MetricsExporter::MetricsExporter(const MetricsSpec& options, const RunStop* run) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->run = run;
  impl_->server = std::make_unique<MetricsServer>(options, impl_->registry);
  impl_->sampler = std::thread([this] { impl_->Sample(); });
}

MetricsExporter::~MetricsExporter() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->sampler.joinable()) impl_->sampler.join();
}

std::string MetricsExporter::address() const { return impl_->server->address(); }

void MetricsExporter::OnRunStarted(const Experiment& e, size_t cells) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->experiment = e.name;
  impl_->epochs_configured = e.training.epochs;
  impl_->run_eta_estimate = RunEta(e);
  for (const auto& d : e.devices) {
    if (d.accelerator) impl_->accelerators.insert(d.label);
    impl_->device_accelerator.Add({{"experiment", e.name}, {"variant", d.label}, {"device_type", d.plugin}})
        .Set(d.accelerator ? 1 : 0);
  }
  impl_->info
      .Add({{"experiment", e.name},
            {"version", TrainbenchVersion()},
            {"git_commit", TrainbenchGitCommit()},
            {"config", e.file}})
      .Set(1);
  impl_->cells.Add({{"experiment", e.name}}).Set(static_cast<double>(cells));
  impl_->SetState("running");
  impl_->run_start.Add({{"experiment", e.name}}).Set(Impl::Now());
  impl_->last_progress.Add({{"experiment", e.name}}).Set(Impl::Now());
}

void MetricsExporter::OnCellStarted(size_t index, const CellRecord& cell) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->cell_index.Add({{"experiment", impl_->experiment}}).Set(static_cast<double>(index + 1));
  impl_->cell_labels = impl_->LabelsOf(cell);
  impl_->gpu_index = -1;
  impl_->run_eta_estimate.CellStarted(index);
}

void MetricsExporter::OnEvent(size_t, const CellRecord& cell, const protocol::Event& event) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& i = *impl_;
  if (const auto* started = std::get_if<protocol::Started>(&event)) {
    i.run_eta_estimate.AttemptStarted();
    i.cell_labels = i.LabelsOf(cell);
    // An accelerator (the plugin says so) that names its index is sampled.
    if (i.accelerators.count(cell.device) && started->hardware.is_object() && started->hardware.contains("index") &&
        started->hardware["index"].is_number_integer())
      i.gpu_index = started->hardware["index"].get<int>();
    i.params.Add(i.cell_labels).Set(static_cast<double>(started->params));
    i.steps_per_epoch.Add(i.cell_labels).Set(static_cast<double>(started->steps_per_epoch));
    i.epochs.Add(i.cell_labels).Set(static_cast<double>(i.epochs_configured));
    i.progress.Add(i.cell_labels).Set(0);
    // Histogram children are created up front so a short cell still exports them.
    i.step_duration.Add(i.cell_labels, MetricFamilies::kStepBuckets);
    i.samples.Add(i.cell_labels);
    i.steps.Add(i.cell_labels);
  } else if (const auto* p = std::get_if<protocol::Progress>(&event)) {
    const Labels& l = i.cell_labels;
    auto& counter_samples = i.samples.Add(l);
    auto& counter_steps = i.steps.Add(l);
    const auto samples_done = static_cast<double>(p->samples_done);
    const auto steps_done = static_cast<double>(p->steps_done);
    if (samples_done > counter_samples.Value()) counter_samples.Increment(samples_done - counter_samples.Value());
    if (steps_done > counter_steps.Value()) counter_steps.Increment(steps_done - counter_steps.Value());
    auto& histogram = i.step_duration.Add(l, MetricFamilies::kStepBuckets);
    for (double d : p->step_seconds) histogram.Observe(d);
    if (p->samples_per_second > 0) i.throughput.Add(l).Set(p->samples_per_second);
    i.loss.Add(l).Set(p->loss);
    i.epoch.Add(l).Set(static_cast<double>(p->epoch));
    i.step.Add(l).Set(static_cast<double>(p->step));
    if (p->memory_bytes >= 0) i.memory.Add(l).Set(static_cast<double>(p->memory_bytes));
    if (p->peak_memory_bytes) i.memory_peak.Add(l).Set(static_cast<double>(*p->peak_memory_bytes));
    if (p->peak_allocated_bytes) i.memory_allocated_peak.Add(l).Set(static_cast<double>(*p->peak_allocated_bytes));
    // Progress: of the cell's epochs; remaining time: of the cell and the
    // run, as the log's progress lines have it (eta.h).
    const double total_steps = static_cast<double>(p->steps_per_epoch) * static_cast<double>(i.epochs_configured);
    i.progress.Add(l).Set(std::min(1.0, total_steps > 0 ? steps_done / total_steps : 0.0));
    i.last_progress.Add({{"experiment", i.experiment}}).Set(Impl::Now());
    if (const auto estimate = i.run_eta_estimate.OnProgress(*p)) {
      i.eta.Add(l).Set(estimate->cell_seconds);
      i.run_eta.Add({{"experiment", i.experiment}}).Set(estimate->run_seconds);
    }
  } else if (const auto* ep = std::get_if<protocol::Epoch>(&event)) {
    i.epoch_duration.Add(i.cell_labels).Set(ep->seconds);
    i.loss.Add(i.cell_labels).Set(ep->train_loss);
    i.accuracy.Add(i.cell_labels).Set(ep->test_accuracy);
  }
}

void MetricsExporter::OnCellFinished(size_t index, const CellRecord& cell) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& i = *impl_;
  i.run_eta_estimate.CellFinished(index, cell);
  i.cells_finished.Add({{"experiment", i.experiment}, {"status", cell.status}}).Increment();
  const Labels l = i.LabelsOf(cell);
  if (cell.ok() && cell.samples_per_second) i.cell_samples_per_second.Add(l).Set(*cell.samples_per_second);
  if (cell.ok() && cell.time_to_train_seconds) i.cell_time_to_train.Add(l).Set(*cell.time_to_train_seconds);
  if (cell.ok() && cell.mfu) i.cell_mfu.Add(l).Set(*cell.mfu);
  if (cell.ok() && cell.energy_joules) {
    i.energy.Add(l).Increment(*cell.energy_joules);
    if (cell.joules_per_sample) i.cell_joules_per_sample.Add(l).Set(*cell.joules_per_sample);
    if (cell.average_power_watts) i.cell_power.Add(l).Set(*cell.average_power_watts);
  }
  if (cell.speedup) i.speedup.Add(l).Set(*cell.speedup);
  if (cell.loss_nan.value_or(false)) i.loss.Add(l).Set(std::numeric_limits<double>::quiet_NaN());
  if (cell.ok() && cell.ranks.value_or(1) > 1) {
    i.ranks.Add(l).Set(static_cast<double>(*cell.ranks));
    const std::vector<double> per_rank = cell.rank_samples_per_second.value_or(std::vector<double>{});
    for (size_t r = 0; r < per_rank.size(); ++r) {
      Labels rl = l;
      rl["rank"] = std::to_string(r);
      i.rank_samples_per_second.Add(rl).Set(per_rank[r]);
    }
  }
  if (cell.status != "skipped") {
    // Finished, whatever the outcome: nothing more will come from this cell.
    i.progress.Add(l).Set(1);
    i.eta.Add(l).Set(0);
  }
}

void MetricsExporter::OnRunFinished(const Results& results) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& i = *impl_;
  for (const auto& cell : results.cells()) {
    if (cell.speedup) i.speedup.Add(i.LabelsOf(cell)).Set(*cell.speedup);
    // Known once the one-rank cell of the same model has run too.
    if (cell.scaling_efficiency) i.scaling_efficiency.Add(i.LabelsOf(cell)).Set(*cell.scaling_efficiency);
  }
  i.cell_labels.clear();  // the sampler stops attributing usage to a cell
  bool failed = false, interrupted = false;
  for (const auto& cell : results.cells()) {
    failed |= cell.status == "failed";
    interrupted |= cell.status == "interrupted";
  }
  i.SetState(interrupted ? "interrupted" : failed ? "failed" : "finished");
  i.run_eta.Add({{"experiment", i.experiment}}).Set(0);
}

void MetricsExporter::Finish() {
  if (!impl_->options.push_url.empty()) PushMetrics(impl_->options.push_url, impl_->experiment, impl_->registry);
  if (impl_->options.linger_seconds > 0 && impl_->server->serving()) {
    spdlog::info("serving final metrics on {}://{}/metrics for {:.0f} s", impl_->server->scheme(),
                 impl_->server->address(), impl_->options.linger_seconds);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(impl_->options.linger_seconds);
    while (std::chrono::steady_clock::now() < end && (impl_->run == nullptr || impl_->run->signal() == 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace trainbench

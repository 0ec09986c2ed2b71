#include "metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gateway.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
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

#include "gpu_monitor.h"
#include "net.h"
#include "system_info.h"
#include "tls_front.h"
#include "worker_client.h"

namespace trainbench {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

// Step durations from 50 us (a small model on a GPU in a CUDA graph) to 60 s
// (a large model on a slow CPU).
const Histogram::BucketBoundaries kStepBuckets = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

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

std::string NormaliseListenAddress(const std::string& address) {
  static const std::regex kPortOnly(R"(:?(\d{1,5}))");
  static const std::regex kHostPort(R"((\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(\d{1,5}))");
  std::smatch m;
  std::string host, port;
  if (std::regex_match(address, m, kPortOnly)) {
    host = "127.0.0.1";
    port = m[1];
  } else if (std::regex_match(address, m, kHostPort)) {
    host = m[1];
    port = m[2];
  } else {
    throw std::invalid_argument("metrics address '" + address +
                                "' is not HOST:PORT (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 to "
                                "listen on every interface)");
  }
  if (std::stoi(port) < 1 || std::stoi(port) > 65535)
    throw std::invalid_argument("metrics address '" + address + "': port must be 1-65535");
  return host + ":" + port;
}

struct MetricsExporter::Impl {
  MetricsSpec options;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<TlsFront> tls;  // HTTPS in front of the exposer, when asked

  Family<Gauge>& info =
      prometheus::BuildGauge().Name("trainbench_info").Help("Build and run metadata; always 1").Register(*registry);
  Family<Gauge>& cells = prometheus::BuildGauge()
                             .Name("trainbench_cells")
                             .Help("Cells (model x device) in the experiment")
                             .Register(*registry);
  // A finished run told from a crashed one: its state, when it started and
  // when it last made progress (a crashed run's series stop; its state does
  // not reach finished).
  Family<Gauge>& run_state = prometheus::BuildGauge()
                                 .Name("trainbench_run_state")
                                 .Help(
                                     "1 for the run's state: running, finished, failed (some cells failed) or "
                                     "interrupted")
                                 .Register(*registry);
  Family<Gauge>& run_start = prometheus::BuildGauge()
                                 .Name("trainbench_run_start_timestamp_seconds")
                                 .Help("When the run started (Unix time)")
                                 .Register(*registry);
  Family<Gauge>& last_progress = prometheus::BuildGauge()
                                     .Name("trainbench_last_progress_timestamp_seconds")
                                     .Help("When a worker last reported progress (Unix time)")
                                     .Register(*registry);
  void SetState(const std::string& state) {
    for (const char* s : {"running", "finished", "failed", "interrupted"})
      run_state.Add({{"experiment", experiment}, {"state", s}}).Set(state == s ? 1 : 0);
  }
  static double Now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  Family<Gauge>& cell_index = prometheus::BuildGauge()
                                  .Name("trainbench_cell_index")
                                  .Help("1-based index of the cell running now (or last run)")
                                  .Register(*registry);
  Family<Counter>& cells_finished = prometheus::BuildCounter()
                                        .Name("trainbench_cells_finished_total")
                                        .Help("Cells finished, by status")
                                        .Register(*registry);
  Family<Counter>& samples = prometheus::BuildCounter()
                                 .Name("trainbench_samples_total")
                                 .Help("Training samples processed")
                                 .Register(*registry);
  Family<Counter>& steps = prometheus::BuildCounter()
                               .Name("trainbench_steps_total")
                               .Help("Training steps (optimizer updates) processed")
                               .Register(*registry);
  Family<Histogram>& step_duration = prometheus::BuildHistogram()
                                         .Name("trainbench_step_duration_seconds")
                                         .Help("Duration of steady-state training steps (warm-up excluded)")
                                         .Register(*registry);
  Family<Gauge>& throughput = prometheus::BuildGauge()
                                  .Name("trainbench_samples_per_second")
                                  .Help("Training throughput over the last progress interval")
                                  .Register(*registry);
  Family<Gauge>& epoch_duration = prometheus::BuildGauge()
                                      .Name("trainbench_epoch_duration_seconds")
                                      .Help("Wall time of the last finished epoch (evaluation excluded)")
                                      .Register(*registry);
  Family<Gauge>& loss = prometheus::BuildGauge()
                            .Name("trainbench_train_loss")
                            .Help("Mean training loss of the current epoch so far")
                            .Register(*registry);
  Family<Gauge>& accuracy = prometheus::BuildGauge()
                                .Name("trainbench_test_accuracy_ratio")
                                .Help("Test accuracy after the last epoch, 0-1")
                                .Register(*registry);
  Family<Gauge>& epoch =
      prometheus::BuildGauge().Name("trainbench_epoch").Help("Current epoch, 1-based").Register(*registry);
  Family<Gauge>& epochs =
      prometheus::BuildGauge().Name("trainbench_epochs").Help("Epochs the cell is configured for").Register(*registry);
  Family<Gauge>& step = prometheus::BuildGauge()
                            .Name("trainbench_epoch_step")
                            .Help("Current step within the epoch, 1-based")
                            .Register(*registry);
  Family<Gauge>& steps_per_epoch =
      prometheus::BuildGauge().Name("trainbench_steps_per_epoch").Help("Steps in one epoch").Register(*registry);
  Family<Gauge>& progress = prometheus::BuildGauge()
                                .Name("trainbench_cell_progress_ratio")
                                .Help("Fraction of the cell's training done, 0-1 (budget-limited cells: of the budget)")
                                .Register(*registry);
  Family<Gauge>& eta = prometheus::BuildGauge()
                           .Name("trainbench_cell_remaining_seconds")
                           .Help("Estimated seconds of training left in the cell")
                           .Register(*registry);
  Family<Gauge>& speedup = prometheus::BuildGauge()
                               .Name("trainbench_speedup")
                               .Help("Samples/s over the baseline device's for the same model")
                               .Register(*registry);
  Family<Gauge>& cell_samples_per_second = prometheus::BuildGauge()
                                               .Name("trainbench_cell_samples_per_second")
                                               .Help("Steady-state samples/s of a finished cell")
                                               .Register(*registry);
  Family<Gauge>& cell_time_to_train = prometheus::BuildGauge()
                                          .Name("trainbench_cell_time_to_train_seconds")
                                          .Help("Time to train a finished cell: setup, epochs and evaluation")
                                          .Register(*registry);
  Family<Counter>& energy = prometheus::BuildCounter()
                                .Name("trainbench_energy_joules_total")
                                .Help(
                                    "Energy of finished cells' training (warm-up included, evaluation excluded), "
                                    "from NVML or RAPL; absent where it cannot be read")
                                .Register(*registry);
  Family<Gauge>& cell_joules_per_sample = prometheus::BuildGauge()
                                              .Name("trainbench_cell_joules_per_sample")
                                              .Help("Energy per training sample of a finished cell")
                                              .Register(*registry);
  Family<Gauge>& cell_power = prometheus::BuildGauge()
                                  .Name("trainbench_cell_average_power_watts")
                                  .Help("Average power of a finished cell's training")
                                  .Register(*registry);
  Family<Gauge>& cell_mfu = prometheus::BuildGauge()
                                .Name("trainbench_cell_mfu_ratio")
                                .Help("Model FLOPs utilisation of a finished cell: achieved over peak TFLOP/s")
                                .Register(*registry);
  Family<Gauge>& ranks = prometheus::BuildGauge()
                             .Name("trainbench_cell_ranks")
                             .Help("Worker processes (GPUs) of a finished data-parallel cell")
                             .Register(*registry);
  Family<Gauge>& rank_samples_per_second =
      prometheus::BuildGauge()
          .Name("trainbench_rank_samples_per_second")
          .Help("Steady-state samples/s of one rank (GPU) of a finished data-parallel cell")
          .Register(*registry);
  Family<Gauge>& scaling_efficiency =
      prometheus::BuildGauge()
          .Name("trainbench_scaling_efficiency_ratio")
          .Help("Samples/s of a data-parallel cell over N times the one-rank cell's, 0-1")
          .Register(*registry);
  Family<Gauge>& params = prometheus::BuildGauge()
                              .Name("trainbench_model_parameters")
                              .Help("Trainable parameters of the model")
                              .Register(*registry);
  Family<Gauge>& memory =
      prometheus::BuildGauge()
          .Name("trainbench_device_memory_bytes")
          .Help("Device memory in use by the cell (resident set on a CPU, allocator reserve on a GPU)")
          .Register(*registry);
  Family<Gauge>& gpu_util = prometheus::BuildGauge()
                                .Name("trainbench_gpu_utilization_ratio")
                                .Help("GPU busy fraction as NVML reports it, 0-1")
                                .Register(*registry);
  Family<Gauge>& gpu_power =
      prometheus::BuildGauge().Name("trainbench_gpu_power_watts").Help("GPU board power draw").Register(*registry);
  Family<Gauge>& gpu_temp = prometheus::BuildGauge()
                                .Name("trainbench_gpu_temperature_celsius")
                                .Help("GPU core temperature")
                                .Register(*registry);
  Family<Gauge>& gpu_memory = prometheus::BuildGauge()
                                  .Name("trainbench_gpu_memory_used_bytes")
                                  .Help("GPU memory used by all processes, as NVML reports it")
                                  .Register(*registry);
  Family<Gauge>& cpu_util =
      prometheus::BuildGauge()
          .Name("trainbench_worker_cpu_utilization_ratio")
          .Help("CPU time of the cell's worker process over wall time, divided by logical cores, 0-1")
          .Register(*registry);

  std::mutex mutex;  // guards the fields below (the sampler thread reads them)
  std::string experiment;
  Labels cell_labels;  // experiment, model, device_type, variant, gpu
  int gpu_index = -1;
  std::set<std::string> accelerators;  // device labels of accelerator plugins
  int64_t epochs_configured = 1;
  std::optional<double> budget_seconds;
  std::optional<int64_t> budget_steps;

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
      const int pid = g_worker_pid.load();
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

namespace {

// The first line of a password file; never logged.
std::string ReadPassword(const std::string& file) {
  std::ifstream in(file);
  std::string password;
  if (!in || !std::getline(in, password) || password.empty()) {
    throw std::runtime_error("metrics password file " + file + ": cannot read a password from its first line");
  }
  return password;
}

// Compares without an early exit, so timing does not reveal a prefix.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

}  // namespace

namespace {
// Connections served at once by /metrics, and how long one may take to send
// its request (see the constructor).
constexpr int kHttpThreads = 128;
constexpr int kRequestTimeoutMs = 5000;
}  // namespace

MetricsExporter::MetricsExporter(const MetricsSpec& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (!options.address.empty()) impl_->options.address = NormaliseListenAddress(options.address);
  std::string password;
  if (!options.basic_auth.username.empty()) password = ReadPassword(options.basic_auth.password_file);
  // With TLS, civetweb serves plain HTTP on a loopback port and TlsFront
  // holds the public address (civetweb's own TLS cannot work with OpenSSL 3:
  // see tls_front.h).
  const bool tls = !options.tls.cert_file.empty() && !impl_->options.address.empty();
  const std::string http_address = tls ? "127.0.0.1:" + std::to_string(FreeTcpPort()) : impl_->options.address;
  try {
    // No address: push only (--metrics-push), nothing served.
    // civetweb gives each connection a thread until its request is read: a
    // few clients that trickle bytes would hold them all (a slowloris). So:
    // threads to spare, and a request must arrive whole within 5 s (the
    // timeout counts from the first byte; a scraper sends it at once).
    if (!http_address.empty()) {
      impl_->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
          "listening_ports", http_address, "num_threads", std::to_string(kHttpThreads), "request_timeout_ms",
          std::to_string(kRequestTimeoutMs), "keep_alive_timeout_ms", std::to_string(kRequestTimeoutMs)});
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("metrics address " + http_address + ": cannot listen (" + e.what() +
                             "); is the port in use? choose another with --metrics-addr");
  }
  if (tls) {
    impl_->tls =
        std::make_unique<TlsFront>(impl_->options.address, http_address, options.tls.cert_file, options.tls.key_file);
  }
  if (!options.basic_auth.username.empty() && impl_->exposer) {
    impl_->exposer->RegisterAuth(
        [user = options.basic_auth.username, password](const std::string& u, const std::string& p) {
          return SameSecret(u, user) & SameSecret(p, password);
        },
        "trainbench");
  }
  if (impl_->exposer) impl_->exposer->RegisterCollectable(impl_->registry);
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

std::string MetricsExporter::address() const { return impl_->options.address; }

void MetricsExporter::OnRunStarted(const Experiment& e, size_t cells) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->experiment = e.name;
  impl_->epochs_configured = e.training.epochs;
  for (const auto& d : e.devices)
    if (d.accelerator) impl_->accelerators.insert(d.label);
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
}

void MetricsExporter::OnEvent(size_t, const CellRecord& cell, const protocol::Event& event) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& i = *impl_;
  if (const auto* started = std::get_if<protocol::Started>(&event)) {
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
    i.step_duration.Add(i.cell_labels, kStepBuckets);
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
    auto& histogram = i.step_duration.Add(l, kStepBuckets);
    for (double d : p->step_seconds) histogram.Observe(d);
    if (p->samples_per_second > 0) i.throughput.Add(l).Set(p->samples_per_second);
    i.loss.Add(l).Set(p->loss);
    i.epoch.Add(l).Set(static_cast<double>(p->epoch));
    i.step.Add(l).Set(static_cast<double>(p->step));
    if (p->memory_bytes >= 0) i.memory.Add(l).Set(static_cast<double>(p->memory_bytes));
    // Progress and remaining time: of the step or time budget when one is
    // set, else of all epochs at the current rate.
    const double total_steps = static_cast<double>(p->steps_per_epoch) * static_cast<double>(i.epochs_configured);
    const double elapsed = p->elapsed_seconds;
    double done = total_steps > 0 ? steps_done / total_steps : 0;
    double remaining = 0;
    if (steps_done > 0 && elapsed > 0) remaining = (total_steps - steps_done) * elapsed / steps_done;
    i.progress.Add(l).Set(std::min(1.0, done));
    i.last_progress.Add({{"experiment", i.experiment}}).Set(Impl::Now());
    i.eta.Add(l).Set(std::max(0.0, remaining));
  } else if (const auto* ep = std::get_if<protocol::Epoch>(&event)) {
    i.epoch_duration.Add(i.cell_labels).Set(ep->seconds);
    i.loss.Add(i.cell_labels).Set(ep->train_loss);
    i.accuracy.Add(i.cell_labels).Set(ep->test_accuracy);
  }
}

void MetricsExporter::OnCellFinished(size_t, const CellRecord& cell) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& i = *impl_;
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
}

void MetricsExporter::Finish() {
  if (!impl_->options.push_url.empty()) {
    static const std::regex kUrl(R"((https?://[^:/]+):(\d+)/?)");
    std::smatch m;
    if (!std::regex_match(impl_->options.push_url, m, kUrl)) {
      spdlog::error("metrics push URL '{}' is not http://HOST:PORT; not pushed", impl_->options.push_url);
    } else {
      prometheus::Gateway gateway(m[1], m[2], "trainbench", {{"experiment", impl_->experiment}});
      gateway.RegisterCollectable(impl_->registry);
      const int code = gateway.Push();
      if (code >= 200 && code < 300)
        spdlog::info("metrics pushed to {}", impl_->options.push_url);
      else
        spdlog::error("metrics push to {} failed (HTTP {})", impl_->options.push_url, code);
    }
  }
  if (impl_->options.linger_seconds > 0 && impl_->exposer) {
    spdlog::info("serving final metrics on {}://{}/metrics for {:.0f} s", impl_->tls ? "https" : "http",
                 impl_->options.address, impl_->options.linger_seconds);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(impl_->options.linger_seconds);
    while (std::chrono::steady_clock::now() < end && g_stop_signal.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace trainbench

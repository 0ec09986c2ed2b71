#include "run_session.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "environment.h"
#include "file_sd_target.h"
#include "logging.h"
#include "net.h"
#include "plan_impl.h"
#include "results.h"
#include "system_info.h"
#include "worker_client.h"
#ifdef TRAINBENCH_WITH_PROMETHEUS
#include "metrics.h"
#else
namespace trainbench {
class MetricsExporter {};  // a build without metrics has none
}  // namespace trainbench
#endif

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

// Turns the runner's observer calls into RunEvents for the caller.
class RunSession::EventForwarder : public RunObserver {
 public:
  explicit EventForwarder(const EventCallback& callback) : callback_(callback) {}
  void OnRunStarted(const Experiment& experiment, size_t cells) override {
    Emit({RunEvent::Type::kRunStarted, 0, json(), {{"experiment", experiment.name}, {"cells", cells}}});
  }
  void OnCellStarted(size_t index, const CellRecord& cell) override {
    Emit({RunEvent::Type::kCellStarted, index, protocol::ToJson(cell), json()});
  }
  void OnEvent(size_t index, const CellRecord& cell, const protocol::Event& event) override {
    Emit({RunEvent::Type::kWorker, index, protocol::ToJson(cell), protocol::ToJson(event)});
  }
  void OnCellFinished(size_t index, const CellRecord& cell) override {
    Emit({RunEvent::Type::kCellFinished, index, protocol::ToJson(cell), json()});
  }
  void OnRunFinished(const Results& results) override {
    Emit({RunEvent::Type::kRunFinished, 0, json(), results.doc()});
  }

 private:
  void Emit(const RunEvent& event) {
    if (callback_) callback_(event);
  }
  const EventCallback& callback_;
};

RunSession::RunSession(Experiment experiment, std::string config_file, const RunOptions& options,
                       const EventCallback& on_event)
    : experiment_(std::move(experiment)),
      config_file_(std::move(config_file)),
      options_(options),
      stop_(options.stop != nullptr ? *options.stop : own_stop_),
      forwarder_(std::make_unique<EventForwarder>(on_event)) {
  // The signal handlers and Engine::RequestStop reach the run from here on.
  try {
    live_.emplace(stop_);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  observers_.push_back(forwarder_.get());
}

RunSession::~RunSession() = default;

RunSummary RunSession::Run() {
  OpenOutputFolder();
  ApplyMetricsOptions();
  CheckSelectedCells();
  StartMetrics();
  DescribeSystem();
  TakeMachineLock();
  // Once the run is sure to start (a mistake above stays a one-line error).
  if (const std::vector<std::string> unknown = UnknownEnvironment(); !unknown.empty()) {
    std::string names;
    for (const auto& n : unknown) names += (names.empty() ? "" : ", ") + n;
    spdlog::warn(
        "set but not read by trainbench, so they change nothing: {} (docs/config-reference.md lists the "
        "variables it reads)",
        names);
  }
  std::optional<protocol::Diagnostics> diagnostics;
  if (options_.kernel_trace_steps > 0 || options_.graph_dump)
    diagnostics = protocol::Diagnostics{options_.kernel_trace_steps, options_.graph_dump, ""};
  return Finish(RunExperiment(experiment_, options_.out_dir, system_, observers_, stop_, options_.resume,
                              options_.cells, diagnostics));
}

// The output folder, writable and this run's alone (two runs into one
// folder would lose each other's cells); one that holds an earlier run's
// results is resumed or refused: starting over in it would list its
// finished cells as pending.
void RunSession::OpenOutputFolder() {
  const fs::path& out = options_.out_dir;
  if (out.empty()) throw EngineError("RunOptions::out_dir is empty: say where results go", kExitConfig);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || ::access(out.c_str(), W_OK) != 0) {
    throw EngineError(
        out.string() + ": output folder cannot be created or written" + (ec ? ": " + ec.message() : std::string()),
        kExitError);
  }
  try {
    folder_lock_ = RunLock::TryTake(out / ".trainbench.lock", "trainbench run " + config_file_);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  if (!folder_lock_.held()) {
    throw EngineError(out.string() + ": another run is writing into this folder: " + folder_lock_.holder() +
                          "; wait for it to end, or give another --out",
                      kExitError);
  }
  if (options_.resume) return;
  std::error_code exists_ec;
  if (fs::symlink_status(out / "results.json", exists_ec).type() != fs::file_type::not_found) {
    throw EngineError(out.string() +
                          " holds the results of an earlier run (results.json); pass --resume to keep its "
                          "finished cells and run the rest, or give another --out to start fresh",
                      kExitError);
  }
}

// Command-line flags override the experiment's metrics settings; the
// result must make sense on its own.
void RunSession::ApplyMetricsOptions() {
  MetricsSpec& m = experiment_.metrics;
  const RunOptions& o = options_;
  if (!o.metrics_address.empty()) m.address = o.metrics_address;
  if (o.metrics_linger_seconds) m.linger_seconds = *o.metrics_linger_seconds;
  if (!o.metrics_push_url.empty()) m.push_url = o.metrics_push_url;
  if (!o.metrics_username.empty()) m.basic_auth.username = o.metrics_username;
  if (!o.metrics_password_file.empty()) m.basic_auth.password_file = o.metrics_password_file;
  if (!o.metrics_tls_cert_file.empty()) m.tls.cert_file = o.metrics_tls_cert_file;
  if (!o.metrics_tls_key_file.empty()) m.tls.key_file = o.metrics_tls_key_file;
  if (m.tls.cert_file.empty() != m.tls.key_file.empty()) {
    throw EngineError(
        "TLS for /metrics needs both a certificate and a key file (--metrics-tls-cert, --metrics-tls-key)",
        kExitConfig);
  }
  if (!m.basic_auth.username.empty() && m.basic_auth.password_file.empty()) {
    throw EngineError("a metrics user needs a password file (passwords are never given on the command line)",
                      kExitConfig);
  }
  // Authentication is all or nothing, as in YAML: a password file alone would
  // serve /metrics to anyone.
  if (m.basic_auth.username.empty() && !m.basic_auth.password_file.empty()) {
    throw EngineError("--metrics-password-file " + m.basic_auth.password_file +
                          " needs --metrics-user too (metrics.basic_auth.username in YAML); without a user "
                          "/metrics would be served without authentication",
                      kExitConfig);
  }
}

void RunSession::CheckSelectedCells() const {
  const size_t total = CellCount();
  for (size_t c : options_.cells) {
    if (c >= total) {
      throw EngineError("cell " + std::to_string(c) + " does not exist: the experiment has " + std::to_string(total) +
                            " cells (0-" + std::to_string(total - 1) + ")",
                        kExitConfig);
    }
  }
}

// The exporter is bound before any training, so that a taken port fails
// fast; port 0 is a free port chosen here.
void RunSession::StartMetrics() {
  MetricsSpec& m = experiment_.metrics;
  if (const auto colon = m.address.rfind(':'); colon != std::string::npos && m.address.substr(colon + 1) == "0")
    m.address = m.address.substr(0, colon + 1) + std::to_string(FreeTcpPort());
#ifdef TRAINBENCH_WITH_PROMETHEUS
  if (m.address.empty() && m.push_url.empty()) return;
  try {
    metrics_ = std::make_unique<MetricsExporter>(m, &stop_);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitConfig);
  }
  observers_.push_back(metrics_.get());
  if (!metrics_->address().empty()) {
    spdlog::info("metrics on {}://{}/metrics{}", m.tls.cert_file.empty() ? "http" : "https", metrics_->address(),
                 m.basic_auth.username.empty() ? "" : " (basic authentication)");
  }
#else
  if (!m.address.empty() || !m.push_url.empty())
    throw EngineError("this trainbench was built without metrics (TRAINBENCH_WITH_PROMETHEUS=OFF)", kExitConfig);
#endif
}

// The machine, and the LibTorch the worker was built with (a worker that
// cannot start fails the run here, before any cell).
void RunSession::DescribeSystem() {
  system_ = CollectSystemInfo();
  try {
    RunWorker(WorkerLaunch{{"info"}, "", "", {}}, [&](const protocol::Event& event) {
      if (const auto* info = std::get_if<protocol::Info>(&event)) {
        system_["torch_version"] = info->torch_version;
        system_["torch_cuda_version"] = info->cuda_version;
        system_["distributed_backends"] = info->distributed_backends;
      }
    });
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  const size_t total = CellCount();
  const std::string out = options_.out_dir.string();
  LogWith(spdlog::level::info,
          {{"event", "run_started"}, {"experiment", experiment_.name}, {"cells", total}, {"out", out}},
          "experiment '{}': {} cell(s), results in {}", experiment_.name, total, out);
#ifdef TRAINBENCH_WITH_PROMETHEUS
  if (metrics_ && !options_.metrics_file_sd.empty() && !metrics_->address().empty())
    file_sd_ = std::make_unique<FileSdTarget>(options_.metrics_file_sd, metrics_->address(), experiment_.name);
#endif
}

// One benchmark per machine, unless asked otherwise or Slurm schedules;
// taken once the config, the port and the worker are known good (a mistake
// is reported at once, not after a wait), given back before any linger.
void RunSession::TakeMachineLock() {
  if (options_.concurrent || std::getenv("SLURM_JOB_ID") != nullptr) return;
  try {
    machine_lock_ = RunLock::Take(
        MachineLockFile(), "trainbench run " + config_file_,
        [](const std::string& holder) {
          spdlog::warn(
              "waiting for the machine's benchmark lock ({}), held by {}: two benchmarks at once skew each "
              "other's timings (--concurrent runs beside it)",
              MachineLockFile().string(), holder);
        },
        &stop_.requested());
  } catch (const std::exception& e) {
    throw EngineError(std::string(e.what()) + " (--concurrent runs without it)", kExitError);
  }
  if (!machine_lock_.held()) {
    // 128 + the signal, as for a stop at any other stage.
    const int sig = stop_.signal();
    throw EngineError("stopped while waiting for the machine's benchmark lock; nothing was run",
                      sig != 0 ? 128 + sig : kExitInterrupted);
  }
}

RunSummary RunSession::Finish(RunOutcome outcome) {
  machine_lock_ = RunLock();  // lingering is not benchmarking
  file_sd_.reset();
#ifdef TRAINBENCH_WITH_PROMETHEUS
  if (metrics_) metrics_->Finish();  // lingers unless the run was stopped
#endif
  RunSummary summary;
  summary.exit_code = outcome.exit_code;
  // A stop during the linger is a stop too: 128 + the signal.
  if (const int sig = stop_.signal(); sig != 0) summary.exit_code = 128 + sig;
  summary.results = std::move(outcome.results);
  summary.table = std::move(outcome.table);
  summary.results_json = options_.out_dir / "results.json";
  for (const auto& cell : CellsOf(summary.results).cells) summary.cells.push_back(ToCellResult(cell));
  return summary;
}

}  // namespace trainbench

// The engine API's Engine (include/trainbench/engine.h) over the supervisor's
// parts: plugin catalog, config loader, runner, results, metrics. The
// builder and plan are in experiment_plan.cc, the free functions in
// engine_tools.cc.

#include "trainbench/engine.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "config_loader.h"
#include "environment.h"
#include "file_sd_target.h"
#include "live_runs.h"
#include "logging.h"
#include "net.h"
#include "plan_impl.h"
#include "plugin_catalog.h"
#include "results.h"
#include "run_lock.h"
#include "runner.h"
#include "system_info.h"
#include "worker_client.h"
#ifdef TRAINBENCH_WITH_PROMETHEUS
#include "metrics.h"
#endif

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------
// Engine

struct Engine::Impl {
  PluginCatalog catalog;
  std::vector<PluginRecord> records;
  EngineOptions options;
};

namespace {

PluginRecord ToRecord(const PluginInfo& info) {
  PluginRecord r;
  r.path = info.path;
  r.sha256 = info.sha256;
  r.loaded = info.loaded;
  r.reason = info.reason;
  const json& d = info.descriptor;
  if (d.is_object()) {
    r.name = d.value("name", "");
    r.kind = d.value("kind", "");
    r.version = d.value("version", "");
    r.abi = d.value("abi", "");
    r.fingerprint = d.value("fingerprint", "");
    r.description = d.value("description", "");
    r.params = d.value("params", json::array());
  }
  r.available = info.available;
  r.unavailable_reason = info.unavailable_reason;
  if (info.descriptor.is_object() && info.descriptor.contains("device")) r.device = info.descriptor["device"];
  return r;
}

template <typename F>
ExperimentPlan MakePlan(const PluginCatalog& catalog, F&& load) {
  try {
    CheckEnvironment();
  } catch (const std::invalid_argument& e) {
    throw EngineError(e.what(), kExitConfig);
  }
  try {
    auto impl = std::make_shared<ExperimentPlan::Impl>();
    impl->experiment = load();
    ResolvePlugins(impl->experiment, catalog);
    return ExperimentPlan(std::move(impl));
  } catch (const ConfigError& e) {
    throw EngineError(e.what(), kExitConfig);
  }
}

// Turns the runner's observer calls into RunEvents for the caller.
class CallbackObserver : public RunObserver {
 public:
  explicit CallbackObserver(const EventCallback& callback) : callback_(callback) {}
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

}  // namespace

CellResult ToCellResult(const CellRecord& cell) {
  CellResult r;
  r.model = cell.model;
  r.device = cell.device;
  r.status = cell.status;
  r.reason = cell.reason.value_or("");
  r.samples_per_second = cell.samples_per_second.value_or(0.0);
  r.median_epoch_seconds = cell.median_epoch_seconds();
  r.test_accuracy = cell.final_accuracy();
  r.speedup = cell.speedup;
  r.projected = cell.projected.value_or(false);
  r.params = cell.params.value_or(0);
  r.record = protocol::ToJson(cell);
  return r;
}

Engine::Engine(EngineOptions options) : impl_(std::make_unique<Impl>()) {
  std::vector<std::string> dirs;
  for (const auto& d : options.plugin_dirs) dirs.push_back(d.string());
  try {  // (discovery reads TRAINBENCH_PLUGIN_PATH and TRAINBENCH_DESCRIBE_TIMEOUT)
    impl_->catalog = PluginCatalog::Discover(PluginSearchPath(dirs), options.allow_insecure_plugins);
  } catch (const std::invalid_argument& e) {  // a TRAINBENCH_* variable discovery reads
    throw EngineError(e.what(), kExitConfig);
  }
  for (const auto& p : impl_->catalog.plugins()) impl_->records.push_back(ToRecord(p));
  impl_->options = std::move(options);
}

const std::vector<fs::path>& Engine::plugin_dirs() const { return impl_->options.plugin_dirs; }
bool Engine::allow_insecure_plugins() const { return impl_->options.allow_insecure_plugins; }

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const std::vector<PluginRecord>& Engine::plugins() const { return impl_->records; }
const std::vector<fs::path>& Engine::search_path() const { return impl_->catalog.search_path(); }

std::string Engine::MissingPluginNote(const std::string& name) const {
  return impl_->catalog.Find(name) != nullptr ? "" : KnownOptionalPluginReason(name);
}

std::vector<std::string> Engine::MissingPluginNotes() const {
  std::vector<std::string> notes;
  for (const std::string& name : UnbuiltPlugins())
    if (std::string note = MissingPluginNote(name); !note.empty()) notes.push_back(note);
  return notes;
}

ExperimentPlan Engine::Load(const fs::path& yaml_file) const {
  return MakePlan(impl_->catalog, [&] { return LoadExperiment(yaml_file.string()); });
}

ExperimentPlan Engine::Parse(const std::string& text, const std::string& name, const fs::path& base_dir) const {
  return MakePlan(impl_->catalog, [&] {
    if (text.size() > kMaxConfigBytes) {
      throw ConfigError(name + ": " + std::to_string(text.size()) + " bytes is larger than the " +
                        std::to_string(kMaxConfigBytes) + "-byte limit for a config");
    }
    return ParseExperiment(text, name, fs::absolute(base_dir).string());
  });
}

ExperimentPlan Engine::Build(const ExperimentBuilder& builder) const {
  // One key per line, so positions in messages point somewhere useful.
  return Parse(builder.document().dump(2), "<code: " + builder.document().value("name", "") + ">");
}

RunSummary Engine::Run(const ExperimentPlan& plan, const RunOptions& options, const EventCallback& on_event) const {
  // This run's stop: the caller's, or one of its own; the signal handlers
  // and Engine::RequestStop reach it while it is live.
  RunStop own_stop;
  RunStop& stop = options.stop != nullptr ? *options.stop : own_stop;
  std::optional<LiveRun> live;
  try {
    live.emplace(stop);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  Experiment experiment = plan.impl().experiment;
  if (options.out_dir.empty()) throw EngineError("RunOptions::out_dir is empty: say where results go", kExitConfig);
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec || ::access(options.out_dir.c_str(), W_OK) != 0) {
    throw EngineError(options.out_dir.string() + ": output folder cannot be created or written" +
                          (ec ? ": " + ec.message() : std::string()),
                      kExitError);
  }
  // One run per output folder: two would lose each other's cells.
  const std::string me = "trainbench run " + plan.file();
  RunLock folder_lock;
  try {
    folder_lock = RunLock::TryTake(options.out_dir / ".trainbench.lock", me);
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  if (!folder_lock.held()) {
    throw EngineError(options.out_dir.string() + ": another run is writing into this folder: " + folder_lock.holder() +
                          "; wait for it to end, or give another --out",
                      kExitError);
  }
  // A folder that holds an earlier run's results is resumed or refused:
  // starting over in it would list its finished cells as pending.
  if (!options.resume) {
    std::error_code exists_ec;
    if (fs::symlink_status(options.out_dir / "results.json", exists_ec).type() != fs::file_type::not_found) {
      throw EngineError(options.out_dir.string() +
                            " holds the results of an earlier run (results.json); pass --resume to keep its "
                            "finished cells and run the rest, or give another --out to start fresh",
                        kExitError);
    }
  }
  // Command-line flags override the experiment's metrics settings.
  MetricsSpec& m = experiment.metrics;
  if (!options.metrics_address.empty()) m.address = options.metrics_address;
  if (options.metrics_linger_seconds) m.linger_seconds = *options.metrics_linger_seconds;
  if (!options.metrics_push_url.empty()) m.push_url = options.metrics_push_url;
  if (!options.metrics_username.empty()) m.basic_auth.username = options.metrics_username;
  if (!options.metrics_password_file.empty()) m.basic_auth.password_file = options.metrics_password_file;
  if (!options.metrics_tls_cert_file.empty()) m.tls.cert_file = options.metrics_tls_cert_file;
  if (!options.metrics_tls_key_file.empty()) m.tls.key_file = options.metrics_tls_key_file;
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
  const size_t total = experiment.models.size() * experiment.devices.size();
  for (size_t c : options.cells) {
    if (c >= total) {
      throw EngineError("cell " + std::to_string(c) + " does not exist: the experiment has " + std::to_string(total) +
                            " cells (0-" + std::to_string(total - 1) + ")",
                        kExitConfig);
    }
  }

  CallbackObserver callback(on_event);
  std::vector<RunObserver*> observers{&callback};
  if (const auto colon = experiment.metrics.address.rfind(':');
      colon != std::string::npos && experiment.metrics.address.substr(colon + 1) == "0") {
    experiment.metrics.address = experiment.metrics.address.substr(0, colon + 1) + std::to_string(FreeTcpPort());
  }
#ifdef TRAINBENCH_WITH_PROMETHEUS
  // Bound before any training, so a taken port fails fast.
  std::unique_ptr<MetricsExporter> metrics;
  if (!m.address.empty() || !m.push_url.empty()) {
    try {
      metrics = std::make_unique<MetricsExporter>(m, &stop);
    } catch (const std::exception& e) {
      throw EngineError(e.what(), kExitConfig);
    }
    observers.push_back(metrics.get());
    if (!metrics->address().empty()) {
      spdlog::info("metrics on {}://{}/metrics{}", m.tls.cert_file.empty() ? "http" : "https", metrics->address(),
                   m.basic_auth.username.empty() ? "" : " (basic authentication)");
    }
  }
#else
  if (!experiment.metrics.address.empty() || !options.metrics_push_url.empty() ||
      !experiment.metrics.push_url.empty()) {
    throw EngineError("this trainbench was built without metrics (TRAINBENCH_WITH_PROMETHEUS=OFF)", kExitConfig);
  }
#endif

  json system = CollectSystemInfo();
  try {
    RunWorker(WorkerLaunch{{"info"}, "", "", {}}, [&](const protocol::Event& event) {
      if (const auto* info = std::get_if<protocol::Info>(&event)) {
        system["torch_version"] = info->torch_version;
        system["torch_cuda_version"] = info->cuda_version;
        system["distributed_backends"] = info->distributed_backends;
      }
    });
  } catch (const std::exception& e) {
    throw EngineError(e.what(), kExitError);
  }
  LogWith(
      spdlog::level::info,
      {{"event", "run_started"}, {"experiment", experiment.name}, {"cells", total}, {"out", options.out_dir.string()}},
      "experiment '{}': {} cell(s), results in {}", experiment.name, total, options.out_dir.string());

  std::unique_ptr<FileSdTarget> target;
#ifdef TRAINBENCH_WITH_PROMETHEUS
  if (metrics && !options.metrics_file_sd.empty() && !metrics->address().empty()) {
    target = std::make_unique<FileSdTarget>(options.metrics_file_sd, metrics->address(), experiment.name);
  }
#endif
  // One benchmark per machine, unless asked otherwise or Slurm schedules;
  // taken once the config, the port and the worker are known good (a mistake
  // is reported at once, not after a wait), given back before any linger.
  RunLock machine_lock;
  if (!options.concurrent && std::getenv("SLURM_JOB_ID") == nullptr) {
    try {
      machine_lock = RunLock::Take(
          MachineLockFile(), me,
          [](const std::string& holder) {
            spdlog::warn(
                "waiting for the machine's benchmark lock ({}), held by {}: two benchmarks at once skew each "
                "other's timings (--concurrent runs beside it)",
                MachineLockFile().string(), holder);
          },
          &stop.requested());
    } catch (const std::exception& e) {
      throw EngineError(std::string(e.what()) + " (--concurrent runs without it)", kExitError);
    }
    if (!machine_lock.held()) {
      // 128 + the signal, as for a stop at any other stage.
      const int sig = stop.signal();
      throw EngineError("stopped while waiting for the machine's benchmark lock; nothing was run",
                        sig != 0 ? 128 + sig : kExitInterrupted);
    }
  }
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
  if (options.kernel_trace_steps > 0 || options.graph_dump)
    diagnostics = protocol::Diagnostics{options.kernel_trace_steps, options.graph_dump, ""};
  RunOutcome outcome =
      RunExperiment(experiment, options.out_dir, system, observers, stop, options.resume, options.cells, diagnostics);
  machine_lock = RunLock();  // lingering is not benchmarking
  target.reset();
#ifdef TRAINBENCH_WITH_PROMETHEUS
  if (metrics) metrics->Finish();  // lingers unless the run was stopped
#endif
  RunSummary summary;
  summary.exit_code = outcome.exit_code;
  // A stop during the linger is a stop too: 128 + the signal.
  if (const int sig = stop.signal(); sig != 0) summary.exit_code = 128 + sig;
  summary.results = std::move(outcome.results);
  summary.table = std::move(outcome.table);
  summary.results_json = options.out_dir / "results.json";
  for (const auto& cell : CellsOf(summary.results).cells) summary.cells.push_back(ToCellResult(cell));
  return summary;
}

void Engine::RequestStop(int signal) noexcept { RequestStopAll(signal); }
void Engine::InstallSignalHandlers() { trainbench::InstallSignalHandlers(); }

}  // namespace trainbench

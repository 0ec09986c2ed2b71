// The engine API's Engine (include/trainbench/engine.h) over the supervisor's
// parts: plugin catalog and config loader here, a run in run_session.cc. The
// builder and plan are in experiment_plan.cc, the free functions in
// engine_tools.cc.

#include "trainbench/engine.h"

#include "config_loader.h"
#include "environment.h"
#include "live_runs.h"
#include "plan_impl.h"
#include "plugin_catalog.h"
#include "run_session.h"

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
  return RunSession(plan.impl().experiment, plan.file(), options, on_event).Run();
}

void Engine::RequestStop(int signal) noexcept { RequestStopAll(signal); }
void Engine::InstallSignalHandlers() { trainbench::InstallSignalHandlers(); }

}  // namespace trainbench

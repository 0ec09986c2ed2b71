// The engine API's ExperimentBuilder and ExperimentPlan.

#include <spdlog/spdlog.h>

#include "plan_impl.h"
#include "trainbench/engine.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------
// ExperimentBuilder: a JSON document in the YAML format (YAML is a superset
// of JSON), parsed by the same loader as a file.

ExperimentBuilder::ExperimentBuilder(std::string name) {
  doc_ = {{"name", std::move(name)}, {"models", json::array()}, {"devices", json::array()}};
}

ExperimentBuilder& ExperimentBuilder::Seed(unsigned long long seed) { return Set("/seed", seed); }

ExperimentBuilder& ExperimentBuilder::Cifar10(const fs::path& folder, std::optional<long long> train_size,
                                              std::optional<long long> test_size) {
  json d = {{"kind", "cifar10"}, {"path", folder.string()}};
  if (train_size) d["train_size"] = *train_size;
  if (test_size) d["test_size"] = *test_size;
  doc_["dataset"] = d;
  return *this;
}

ExperimentBuilder& ExperimentBuilder::Synthetic(long long train_size, long long test_size) {
  doc_["dataset"] = {{"kind", "synthetic"}, {"train_size", train_size}, {"test_size", test_size}};
  return *this;
}

namespace {
json PluginEntry(const std::string& plugin, const json& options, const std::string& label) {
  json entry = {{"plugin", plugin}};
  if (!label.empty()) entry["label"] = label;
  if (!options.is_null() && !options.empty()) entry["options"] = options;
  return entry;
}
}  // namespace

ExperimentBuilder& ExperimentBuilder::Model(const std::string& plugin, const json& options, const std::string& label) {
  doc_["models"].push_back(PluginEntry(plugin, options, label));
  return *this;
}

ExperimentBuilder& ExperimentBuilder::Device(const std::string& plugin, const json& options, const std::string& label) {
  doc_["devices"].push_back(PluginEntry(plugin, options, label));
  return *this;
}

ExperimentBuilder& ExperimentBuilder::Epochs(long long epochs) { return Set("/training/epochs", epochs); }
ExperimentBuilder& ExperimentBuilder::BatchSize(long long n) { return Set("/training/batch_size", n); }
ExperimentBuilder& ExperimentBuilder::WarmupSteps(long long n) { return Set("/measurement/warmup_steps", n); }
ExperimentBuilder& ExperimentBuilder::MaxSteps(long long n) { return Set("/measurement/max_steps", n); }
ExperimentBuilder& ExperimentBuilder::TimeBudgetSeconds(double s) { return Set("/measurement/time_budget_seconds", s); }

ExperimentBuilder& ExperimentBuilder::Set(const std::string& pointer, const json& value) {
  try {
    doc_[json::json_pointer(pointer)] = value;
  } catch (const json::exception& e) {
    throw EngineError("ExperimentBuilder::Set(\"" + pointer +
                          "\"): not a JSON pointer such as "
                          "\"/training/epochs\": " +
                          e.what(),
                      kExitConfig);
  }
  return *this;
}

// ---------------------------------------------------------------------------
// ExperimentPlan

std::string ExperimentPlan::name() const { return impl_->experiment.name; }
std::string ExperimentPlan::file() const { return impl_->experiment.file; }
json ExperimentPlan::ToJson() const { return impl_->experiment.ToJson(); }

std::vector<std::string> ExperimentPlan::cells() const {
  std::vector<std::string> out;
  for (const auto& cell : impl_->experiment.Cells()) out.push_back(cell.name());
  return out;
}

std::vector<std::string> ExperimentPlan::notes() const {
  std::vector<std::string> out;
  for (const auto& d : impl_->experiment.devices) {
    if (d.path.empty()) out.push_back("cells on '" + d.label + "' will be skipped: " + d.missing_reason);
  }
  return out;
}

}  // namespace trainbench

// The experiment's plugins resolved against the catalog (ResolvePlugins,
// config_loader.h): each use's file, record, validated options and traits,
// and the dataset checked against the training settings.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cifar10.h"
#include "config_loader.h"
#include "environment.h"
#include "plugin_catalog.h"
#include "yaml_validator.h"

namespace trainbench {

namespace {

// Checks `given` against a plugin's parameter schema; returns all options
// with defaults filled in.
nlohmann::json ValidateOptions(const Validator& v, const PluginUse& use, const nlohmann::json& params,
                               const std::string& path) {
  nlohmann::json out = nlohmann::json::object();
  std::vector<std::string> names;
  for (const auto& p : params) {
    names.push_back(p.at("name").get<std::string>());
    out[names.back()] = p.at("default");
  }
  const YAML::Node& given = use.options_node;
  if (Absent(given)) return out;
  for (const auto& kv : given) {
    if (!kv.first.IsScalar()) v.Fail(kv.first, path + ".options", "an option name must be a plain name");
    const std::string key = kv.first.as<std::string>();
    const std::string key_path = path + ".options." + key;
    auto it = std::find_if(params.begin(), params.end(), [&](const nlohmann::json& p) { return p.at("name") == key; });
    if (it == params.end()) {
      const std::string hint = DidYouMean(key, names);
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      v.Fail(kv.first, key_path,
             "plugin '" + use.plugin + "' has no option '" + key + "'" +
                 (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                 (list.empty() ? " (it takes none)" : " (options: " + list + ")"));
    }
    const std::string type = it->at("type").get<std::string>();
    const double min = it->value("min", -1e300), max = it->value("max", 1e300);
    if (type == "bool") {
      out[key] = v.Bool(kv.second, key_path);
    } else if (type == "int") {
      out[key] = v.Int(kv.second, key_path, static_cast<int64_t>(std::max(min, -9e18)),
                       static_cast<int64_t>(std::min(max, 9e18)));
    } else if (type == "float") {
      out[key] = v.Float(kv.second, key_path, min, max);
    } else if (type == "enum") {
      out[key] = v.Choice(kv.second, key_path, it->at("choices").get<std::vector<std::string>>());
    } else {
      out[key] = v.String(kv.second, key_path);
    }
  }
  return out;
}

// A model plugin with an image_size or num_classes option takes the
// dataset's, unless the config sets the option itself (then the worker
// checks that the two agree).
void FollowTheDataset(const DatasetSpec& dataset, const nlohmann::json& params, PluginUse& use) {
  const std::pair<const char*, std::optional<int64_t>> follow[] = {{"image_size", dataset.image_size},
                                                                   {"num_classes", dataset.num_classes}};
  for (const auto& entry : follow) {
    const std::string key = entry.first;
    const std::optional<int64_t>& value = entry.second;
    if (!value) continue;
    const bool declared =
        std::any_of(params.begin(), params.end(), [&](const nlohmann::json& p) { return p.value("name", "") == key; });
    const YAML::Node& given = use.options_node;  // const: reading adds no key
    const bool written = !Absent(given) && given.IsMap() && given[key];
    if (declared && !written) use.options[key] = *value;
  }
}

// A use naming no loaded plugin: an optional device this build leaves out
// is skipped later with the reason (false: nothing more to resolve); any
// other is a config error naming the nearest name and the search path.
bool MissingPlugin(Validator& v, const PluginCatalog& catalog, PluginUse& use, const std::string& kind,
                   const std::string& path) {
  const std::string why = KnownOptionalPluginReason(use.plugin);
  if (kind == "device" && !why.empty()) {
    use.missing_reason = why;
    use.options = nlohmann::json::object();
    return false;
  }
  if (const PluginInfo* rejected = catalog.FindRejected(use.plugin)) {
    v.Fail(use.plugin_node, path,
           kind + " plugin '" + use.plugin + "' was found but rejected: " + rejected->reason +
               " (run 'trainbench plugins' to list every plugin and why)");
  }
  std::string hint = DidYouMean(use.plugin, catalog.Names(kind));
  std::string searched;
  for (const auto& d : catalog.search_path()) searched += (searched.empty() ? "" : ":") + d.string();
  v.Fail(use.plugin_node, path,
         "no " + kind + " plugin '" + use.plugin + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
             " (searched " + searched + "; run 'trainbench plugins' to list them)");
  return false;
}

// One use of a plugin, resolved: its file and record, its options against
// the schema, the traits the host reads of a device.
void ResolveUse(Validator& v, const Experiment& e, const PluginCatalog& catalog, PluginUse& use,
                const std::string& kind, const std::string& path) {
  const PluginInfo* info = catalog.Find(use.plugin);
  if (info == nullptr && !MissingPlugin(v, catalog, use, kind, path)) return;
  if (info->kind() != kind) {
    v.Fail(use.plugin_node, path,
           "plugin '" + use.plugin + "' is a " + info->kind() + " plugin; list it under " +
               (info->kind() == "model" ? "models" : "devices"));
  }
  use.path = info->path;
  use.record = {{"name", use.plugin},
                {"kind", kind},
                {"path", info->path},
                {"version", info->descriptor.value("version", "")},
                {"abi", info->descriptor.value("abi", "")},
                {"fingerprint", info->descriptor.value("fingerprint", "")},
                {"sha256", info->sha256}};
  use.options = ValidateOptions(v, use, info->descriptor.at("params"), path);
  if (kind == "model") FollowTheDataset(e.dataset, info->descriptor.at("params"), use);
  use.accelerator = info->accelerator();
  use.index_option = info->index_option();
  use.graph_option = info->graph_option();
  if (!use.device_indices.empty() && use.index_option.empty()) {
    throw ConfigError(e.file + ": " + path + ".gpus: device plugin '" + use.plugin +
                      "' does not say which option selects a GPU (no index option in its device traits), so "
                      "it cannot be given GPUs; use 'processes' for data parallelism on it");
  }
  if (use.ranks > 1 && !use.graph_option.empty() && use.options.value(use.graph_option, false)) {
    throw ConfigError(e.file + ": " + path + ": " + use.graph_option +
                      " is not supported with several GPUs yet; set options." + use.graph_option +
                      " to false or use one GPU");
  }
}

// CIFAR-10 files hold the images the settings ask for, every label readable.
void CheckCifar10(const Experiment& e) {
  try {
    const int64_t train = data::CountRecords(e.dataset.path, data::Split::kTrain);
    const int64_t test = data::CountRecords(e.dataset.path, data::Split::kTest);
    if (e.dataset.train_size && *e.dataset.train_size > train) {
      throw ConfigError(e.file + ": dataset.train_size: " + std::to_string(*e.dataset.train_size) + " but " +
                        e.dataset.path + " holds " + std::to_string(train) + " training images");
    }
    if (e.dataset.test_size && *e.dataset.test_size > test) {
      throw ConfigError(e.file + ": dataset.test_size: " + std::to_string(*e.dataset.test_size) + " but " +
                        e.dataset.path + " holds " + std::to_string(test) + " test images");
    }
    // Every label the run will read, checked now rather than in each cell.
    data::CheckLabels(e.dataset.path, data::Split::kTrain, e.dataset.train_size);
    data::CheckLabels(e.dataset.path, data::Split::kTest, e.dataset.test_size);
    const int64_t used = e.dataset.train_size.value_or(train);
    if (e.training.batch_size > used) {
      throw ConfigError(e.file + ": training.batch_size: " + std::to_string(e.training.batch_size) +
                        " is larger than the " + std::to_string(used) + " training images");
    }
  } catch (const data::DataError& err) {
    throw ConfigError(e.file + ": dataset.path: " + err.what());
  } catch (const std::filesystem::filesystem_error& err) {
    throw ConfigError(e.file + ": dataset.path: " + e.dataset.path + ": cannot read: " + err.code().message());
  }
}

}  // namespace

void ResolvePlugins(Experiment& e, const PluginCatalog& catalog) {
  Validator v(e.file);
  for (size_t i = 0; i < e.models.size(); ++i)
    ResolveUse(v, e, catalog, e.models[i], "model", "models[" + std::to_string(i) + "]");
  for (size_t i = 0; i < e.devices.size(); ++i)
    ResolveUse(v, e, catalog, e.devices[i], "device", "devices[" + std::to_string(i) + "]");
  if (e.dataset.kind == "cifar10") CheckCifar10(e);
}

}  // namespace trainbench

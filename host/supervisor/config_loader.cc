#include "config_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cifar10.h"
#include "data_home.h"
#include "environment.h"
#include "settings_yaml.h"
#include "yaml_validator.h"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

// Labels become parts of log file names (cell-NN-MODEL-DEVICE.log, under
// the usual 255-byte limit for a name).
constexpr size_t kMaxLabelBytes = 100;

// Names reach log lines, file names and plots: no control characters.
bool HasControlCharacter(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// A device entry's ranks: `gpus` (a list of indices, or a count of the
// first GPUs) or `processes`, not both.
void ParseRanks(const Validator& v, const YAML::Node& item, const std::string& item_path, PluginUse& use) {
  const YAML::Node gpus = item["gpus"], processes = item["processes"];
  if (!Absent(gpus) && !Absent(processes))
    v.Fail(processes, item_path + ".processes", "give either gpus or processes, not both");
  if (!Absent(gpus) && gpus.IsSequence()) {
    if (gpus.size() == 0) v.Fail(gpus, item_path + ".gpus", "expected at least one GPU index");
    std::set<int64_t> seen;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const std::string gpath = item_path + ".gpus[" + std::to_string(g) + "]";
      const int64_t index = v.Int(gpus[g], gpath, 0, 1023);
      if (!seen.insert(index).second) v.Fail(gpus[g], gpath, "GPU " + std::to_string(index) + " is listed twice");
      use.device_indices.push_back(index);
    }
    use.ranks = static_cast<int64_t>(use.device_indices.size());
  } else if (!Absent(gpus)) {
    use.ranks = v.Int(gpus, item_path + ".gpus", 1, 1024);
    for (int64_t g = 0; g < use.ranks; ++g) use.device_indices.push_back(g);
  } else if (!Absent(processes)) {
    use.ranks = v.Int(processes, item_path + ".processes", 1, 1024);
  }
}

// One entry of a list written as a mapping: plugin, label, options, and a
// device's budget and ranks.
void ParseEntry(const Validator& v, const YAML::Node& item, const std::string& item_path, bool device, PluginUse& use) {
  std::vector<std::string> keys = {"plugin", "label", "options"};
  if (device) keys.insert(keys.end(), {"max_steps", "time_budget_seconds", "gpus", "processes", "sync_batchnorm"});
  v.Keys(item, item_path, keys);
  if (!item["plugin"]) v.Fail(item, item_path, "missing key 'plugin' (the plugin's name)");
  use.plugin = v.String(item["plugin"], item_path + ".plugin");
  use.plugin_node = item["plugin"];  // assigned once: a second Node assignment would rewrite the document
  if (item["label"]) use.label = v.String(item["label"], item_path + ".label");
  use.options_node = item["options"] ? item["options"] : YAML::Node(YAML::NodeType::Map);
  if (!Absent(use.options_node) && !use.options_node.IsMap())
    v.Fail(use.options_node, item_path + ".options", "expected a mapping of option to value");
  if (!Absent(item["max_steps"]))
    use.max_steps = v.Int(item["max_steps"], item_path + ".max_steps", 1, INT64_C(1) << 40);
  if (!Absent(item["time_budget_seconds"]))
    use.time_budget_seconds = v.Float(item["time_budget_seconds"], item_path + ".time_budget_seconds", 0.001, 1e7);
  ParseRanks(v, item, item_path, use);
  if (!Absent(item["sync_batchnorm"]))
    use.sync_batchnorm = v.Bool(item["sync_batchnorm"], item_path + ".sync_batchnorm");
}

// A plugin's name is plain text; a label names log files and results rows:
// a plain name, not a path, once in its list.
void CheckNames(const Validator& v, const YAML::Node& item, const std::string& item_path, PluginUse& use,
                std::set<std::string>& labels) {
  if (HasControlCharacter(use.plugin)) {
    v.Fail(use.plugin_node, item_path + (item.IsScalar() ? "" : ".plugin"),
           "'" + use.plugin + "' holds control characters: a plugin's name is plain text (see `trainbench plugins`)");
  }
  if (use.label.empty()) use.label = use.plugin;
  const YAML::Node label_at = item.IsMap() && item["label"] ? item["label"] : use.plugin_node;
  if (use.label.size() > kMaxLabelBytes) {
    v.Fail(label_at, item_path + ".label",
           "'" + use.label.substr(0, 40) + "...' is " + std::to_string(use.label.size()) + " bytes; the limit is " +
               std::to_string(kMaxLabelBytes) + " (give a shorter 'label')");
  }
  if (use.label == "." || use.label == ".." || use.label.find('/') != std::string::npos ||
      HasControlCharacter(use.label)) {
    v.Fail(label_at, item_path + ".label",
           "'" + use.label + "' cannot name a file: no '/', control characters, '.' or '..' (give a plain 'label')");
  }
  if (!labels.insert(use.label).second) {
    v.Fail(item, item_path,
           "label '" + use.label +
               "' is used twice; give entries of the same plugin distinct "
               "'label's");
  }
}

std::vector<PluginUse> ParsePluginList(const Validator& v, const YAML::Node& list, const std::string& path,
                                       bool device) {
  if (!list.IsDefined()) v.Fail(list, path, "missing; list at least one plugin");
  if (!list.IsSequence() || list.size() == 0) v.Fail(list, path, "expected a non-empty list of plugins");
  std::vector<PluginUse> uses;
  std::set<std::string> labels;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    PluginUse use;
    if (item.IsScalar()) {
      use.plugin_node = item;
      use.plugin = item.as<std::string>();
      use.options_node = YAML::Node(YAML::NodeType::Map);
    } else {
      ParseEntry(v, item, item_path, device, use);
    }
    CheckNames(v, item, item_path, use, labels);
    uses.push_back(std::move(use));
  }
  return uses;
}

}  // namespace

std::string ConfigError::Printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      }
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

namespace {

// The first byte of `text` that does not belong to well-formed UTF-8 (no
// overlong forms, surrogates or code points past U+10FFFF), or npos.
size_t FirstInvalidUtf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
    if (c < 0x80)
      len = 1;
    else if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c == 0xe0)
      len = 3, lo = 0xa0;
    else if (c >= 0xe1 && c <= 0xec)
      len = 3;
    else if (c == 0xed)
      len = 3, hi = 0x9f;
    else if (c >= 0xee && c <= 0xef)
      len = 3;
    else if (c == 0xf0)
      len = 4, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3)
      len = 4;
    else if (c == 0xf4)
      len = 4, hi = 0x8f;
    else
      return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// Refuses a mapping that has a key twice anywhere in the document (yaml-cpp
// would silently keep the first), naming both places. An alias is the node
// it names (the same position): each is walked once, so an alias bomb costs
// what its text costs.
void CheckDuplicateKeys(const Validator& v, const YAML::Node& node, const std::string& path, std::set<int>& walked) {
  if ((node.IsMap() || node.IsSequence()) && !walked.insert(node.Mark().pos).second) return;
  if (node.IsMap()) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) continue;  // Keys() reports it where it matters
      const std::string key = kv.first.Scalar();
      const auto [it, inserted] = seen.emplace(key, kv.first.Mark());
      if (!inserted) {
        v.Fail(kv.first, Validator::Join(path, key),
               "key given twice (first at line " + std::to_string(it->second.line + 1) + ", column " +
                   std::to_string(it->second.column + 1) + "); keep one");
      }
      CheckDuplicateKeys(v, kv.second, Validator::Join(path, key), walked);
    }
  } else if (node.IsSequence()) {
    size_t i = 0;
    for (const auto& item : node) CheckDuplicateKeys(v, item, path + "[" + std::to_string(i++) + "]", walked);
  }
}

// The YAML document of `text`: UTF-8, well formed, no key given twice.
YAML::Node LoadDocument(Validator& v, const std::string& text, const std::string& file) {
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string::npos) {
    const size_t line_start = text.rfind('\n', bad == 0 ? 0 : bad - 1);
    const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n')) + 1;
    const size_t column = bad - (line_start == std::string::npos || bad == 0 ? 0 : line_start + 1) + 1;
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[bad]));
    throw ConfigError(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": byte " + byte +
                      " is not UTF-8; save the file as UTF-8");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // yaml-cpp's words for a tab are obscure; a tab in a line's indentation
    // near the error is named.
    std::string hint;
    std::istringstream lines(text);
    std::string line;
    for (int n = 0; std::getline(lines, line); ++n) {
      if (n < e.mark.line - 1 || n > e.mark.line + 1) continue;
      const size_t indent = line.find_first_not_of(" \t");
      if (line.substr(0, indent).find('\t') != std::string::npos) {
        hint = " (line " + std::to_string(n + 1) + " is indented with a tab: YAML indents with spaces only)";
        break;
      }
    }
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": YAML syntax error: " + e.msg + hint);
  }
  std::set<int> walked;
  CheckDuplicateKeys(v, root, "", walked);
  return root;
}

// `dataset:`, its folder resolved (TRAINBENCH_DATA, relative to the config).
void ParseDataset(Validator& v, const YAML::Node& root, const std::string& base_dir, Experiment& e) {
  if (!root["dataset"]) v.Fail(root, "", "missing key 'dataset'");
  {
    const YAML::Node d = root["dataset"];
    ReadSettings(v, d, "dataset", e.dataset);
    for (const char* key : {"image_size", "num_classes"})
      if (e.dataset.kind != "synthetic" && d[key])
        v.Fail(d[key], std::string("dataset.") + key,
               "applies to synthetic data only (CIFAR-10 is 32x32, 10 classes); remove it or use kind: synthetic");
    if (e.dataset.kind == "cifar10") {
      // TRAINBENCH_DATA, else the folder `trainbench data fetch cifar10`
      // installs into: what an empty path and ${TRAINBENCH_DATA} stand for.
      const std::string fallback = EnvironmentSetting("TRAINBENCH_DATA").value_or(data::DefaultCifar10Dir().string());
      const auto need_fallback = [&](const YAML::Node& at) {
        if (fallback.empty()) {
          v.Fail(at, "dataset.path",
                 "no CIFAR-10 folder: set dataset.path or TRAINBENCH_DATA (with neither HOME nor XDG_DATA_HOME "
                 "set there is no default data folder)");
        }
      };
      if (e.dataset.path.empty()) {
        need_fallback(d);
        e.dataset.path = fallback;
      } else {
        // A variable in the path, as in "${TRAINBENCH_DATA}/cifar-10-mini".
        const std::string marker = "${TRAINBENCH_DATA}";
        const auto pos = e.dataset.path.find(marker);
        if (pos != std::string::npos) {
          need_fallback(d["path"]);
          e.dataset.path.replace(pos, marker.size(), fallback);
        }
        if (fs::path(e.dataset.path).is_relative())
          e.dataset.path = (fs::path(base_dir) / e.dataset.path).lexically_normal().string();
      }
    }
  }
}

// `training:` and the optimizer's combinations.
void ParseTraining(Validator& v, const YAML::Node& root, Experiment& e) {
  if (const YAML::Node t = root["training"]) {
    ReadSettings(v, t, "training", e.training);
    if (const YAML::Node o = t["optimizer"]) {
      auto& opt = e.training.optimizer;
      // Each optimizer's own defaults, as PyTorch's: Adam lr 0.001, no weight
      // decay; AdamW lr 0.001, weight decay 0.01 (SGD's are trainbench's).
      if (opt.name != "sgd") {
        if (!o["lr"]) opt.lr = 1e-3;
        if (!o["weight_decay"]) opt.weight_decay = opt.name == "adamw" ? 1e-2 : 0.0;
      }
      if (opt.nesterov && opt.momentum <= 0) v.Fail(o["nesterov"], "training.optimizer.nesterov", "needs momentum > 0");
      for (const char* key : {"momentum", "nesterov", "overlap"})
        if (opt.name != "sgd" && o[key])
          v.Fail(o[key], std::string("training.optimizer.") + key, "applies to sgd only; remove it for " + opt.name);
      for (const char* key : {"betas", "eps"})
        if (opt.name == "sgd" && o[key])
          v.Fail(o[key], std::string("training.optimizer.") + key, "applies to adam and adamw only; remove it for sgd");
    }
  }
}

// `measurement:`, the budgets of the devices against it, and the baseline.
void ParseMeasurement(Validator& v, const YAML::Node& root, Experiment& e) {
  if (const YAML::Node m = root["measurement"]) {
    ReadSettings(v, m, "measurement", e.measurement);
    const auto& ms = e.measurement;
    if (ms.max_steps && *ms.max_steps <= ms.warmup_steps)
      v.Fail(m["max_steps"], "measurement.max_steps",
             "must be larger than warmup_steps (" + std::to_string(ms.warmup_steps) + "), or no step would be timed");
  }
  for (size_t i = 0; i < e.devices.size(); ++i) {
    const auto& d = e.devices[i];
    if (d.ranks > 1 && e.training.batch_size % d.ranks != 0) {
      const YAML::Node item = root["devices"][i];
      v.Fail(item["gpus"] ? item["gpus"] : item["processes"], "devices[" + std::to_string(i) + "]",
             "training.batch_size " + std::to_string(e.training.batch_size) + " does not split evenly over " +
                 std::to_string(d.ranks) + " ranks (the batch is the combined batch of all of them)");
    }
    if (d.max_steps && *d.max_steps <= e.measurement.warmup_steps) {
      v.Fail(root["devices"][i]["max_steps"], "devices[" + std::to_string(i) + "].max_steps",
             "must be larger than measurement.warmup_steps (" + std::to_string(e.measurement.warmup_steps) + ")");
    }
  }
  // The baseline must be one of the devices; left out, it is the cpu device,
  // or the first device where none is labelled cpu.
  const auto is_device = [&e](const std::string& label) {
    return std::any_of(e.devices.begin(), e.devices.end(), [&](const auto& d) { return d.label == label; });
  };
  const bool baseline_given = root["measurement"] && root["measurement"]["baseline"];
  if (!baseline_given && !is_device(e.measurement.baseline) && !e.devices.empty())
    e.measurement.baseline = e.devices.front().label;
  const bool baseline_found = is_device(e.measurement.baseline);
  if (!baseline_found) {
    std::vector<std::string> labels;
    for (const auto& d : e.devices) labels.push_back(d.label);
    const YAML::Node at = baseline_given ? root["measurement"]["baseline"] : root["devices"];
    const std::string hint = DidYouMean(e.measurement.baseline, labels);
    v.Fail(at, "measurement.baseline",
           "'" + e.measurement.baseline + "' is not one of the devices" +
               (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  }
}

// `metrics:`; the files it names are relative to the config's folder.
void ParseMetrics(Validator& v, const YAML::Node& root, const std::string& base_dir, Experiment& e) {
  if (const YAML::Node m = root["metrics"]) {
    ReadSettings(v, m, "metrics", e.metrics);
    if (const YAML::Node t = m["tls"]; t && (e.metrics.tls.cert_file.empty() || e.metrics.tls.key_file.empty()))
      v.Fail(t, "metrics.tls", "needs both cert_file and key_file (PEM)");
    if (const YAML::Node a = m["basic_auth"];
        a && (e.metrics.basic_auth.username.empty() || e.metrics.basic_auth.password_file.empty()))
      v.Fail(a, "metrics.basic_auth",
             "needs both username and password_file (the password itself never goes in a config)");
    // Files named here are relative to the config's folder.
    for (std::string* f : {&e.metrics.tls.cert_file, &e.metrics.tls.key_file, &e.metrics.basic_auth.password_file}) {
      if (!f->empty() && fs::path(*f).is_relative()) *f = (fs::path(base_dir) / *f).string();
    }
  }
}

Experiment ParseChecked(const std::string& text, const std::string& file, const std::string& base_dir) {
  Validator v(file);
  const YAML::Node root = LoadDocument(v, text, file);
  if (!root.IsMap()) v.Fail(root, "", "expected a mapping at the top level (name:, models:, ...)");
  v.Keys(root, "", {"name", "seed", "dataset", "models", "devices", "training", "measurement", "metrics"});

  Experiment e;
  e.file = file;
  if (!root["name"]) v.Fail(root, "", "missing key 'name' (the experiment's name)");
  e.name = v.String(root["name"], "name");
  if (e.name.empty()) v.Fail(root["name"], "name", "must not be empty");
  if (HasControlCharacter(e.name)) {
    v.Fail(root["name"], "name",
           "'" + e.name + "' holds control characters (a newline, a tab, an escape): give a plain one-line name");
  }
  if (root["seed"]) e.seed = static_cast<uint64_t>(v.Int(root["seed"], "seed", 0, INT64_MAX));
  ParseDataset(v, root, base_dir, e);
  e.models = ParsePluginList(v, root["models"], "models", false);
  e.devices = ParsePluginList(v, root["devices"], "devices", true);
  if (e.models.size() * e.devices.size() > kMaxCells) {
    v.Fail(root["devices"], "devices",
           std::to_string(e.models.size()) + " models x " + std::to_string(e.devices.size()) + " devices make " +
               std::to_string(e.models.size() * e.devices.size()) + " cells; the limit is " +
               std::to_string(kMaxCells) + " (split the experiment into several configs)");
  }

  ParseTraining(v, root, e);
  ParseMeasurement(v, root, e);
  ParseMetrics(v, root, base_dir, e);
  return e;
}
}  // namespace

Experiment ParseExperiment(const std::string& text, const std::string& file, const std::string& base_dir) {
  try {
    return ParseChecked(text, file, base_dir);
  } catch (const YAML::Exception& e) {
    // A yaml-cpp conversion the checks above did not foresee: still one line
    // with the position.
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) + ": " +
                      e.msg);
  }
}

Experiment LoadExperiment(const std::string& file) {
  std::error_code ec;
  const fs::file_status status = fs::status(file, ec);
  if (status.type() == fs::file_type::not_found) throw ConfigError(file + ": no such config file");
  if (ec) throw ConfigError(file + ": cannot read: " + ec.message());
  if (!fs::is_regular_file(status)) {
    throw ConfigError(file + ": not a regular file (a folder, a pipe or a device?); give the experiment's YAML file");
  }
  const auto size = fs::file_size(file, ec);
  if (ec) throw ConfigError(file + ": cannot read: " + ec.message());
  if (size > kMaxConfigBytes) {
    throw ConfigError(file + ": " + std::to_string(size) + " bytes is larger than the " +
                      std::to_string(kMaxConfigBytes) + "-byte limit for a config file");
  }
  std::ifstream in(file);
  if (!in) throw ConfigError(file + ": cannot open for reading: " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string base = fs::absolute(file).parent_path().string();
  return ParseExperiment(buffer.str(), file, base);
}

nlohmann::json Experiment::ToJson() const {
  auto uses = [](const std::vector<PluginUse>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& u : list) {
      nlohmann::json j{{"plugin", u.plugin}, {"label", u.label}, {"options", u.options}};
      if (u.max_steps) j["max_steps"] = *u.max_steps;
      if (u.time_budget_seconds) j["time_budget_seconds"] = *u.time_budget_seconds;
      if (u.ranks > 1 || !u.device_indices.empty()) {
        j["ranks"] = u.ranks;
        if (!u.device_indices.empty()) j["gpus"] = u.device_indices;
        if (u.ranks > 1) j["sync_batchnorm"] = u.sync_batchnorm;
      }
      out.push_back(j);
    }
    return out;
  };
  const nlohmann::json measured = SettingsToJson(measurement);
  return {{"name", name},
          {"file", file},
          {"seed", seed},
          {"dataset", protocol::ToJson(dataset)},
          {"models", uses(models)},
          {"devices", uses(devices)},
          {"training", protocol::ToJson(training)},
          {"measurement", measured}};
}

}  // namespace trainbench

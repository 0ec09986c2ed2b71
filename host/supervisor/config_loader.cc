#include "config_loader.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cifar10.h"
#include "plugin_catalog.h"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

// Walks one YAML document, remembering the file for messages.
class Validator {
 public:
  explicit Validator(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void Fail(const YAML::Node& node, const std::string& path,
                         const std::string& message) const {
    std::ostringstream out;
    out << file_;
    if (node.IsDefined() && node.Mark().line >= 0) {
      out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    }
    out << ": " << (path.empty() ? "" : path + ": ") << message;
    throw ConfigError(out.str());
  }

  // Checks that `node` is a map whose keys are all in `allowed`.
  void Keys(const YAML::Node& node, const std::string& path,
            const std::vector<std::string>& allowed) const {
    if (!node.IsMap()) Fail(node, path, "expected a mapping of keys to values");
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) Fail(kv.first, path, "a key must be a plain name, not a list or mapping");
      const std::string key = kv.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string hint = DidYouMean(key, allowed);
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        Fail(kv.first, Join(path, key),
             "unknown key" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                 " (allowed: " + list + ")");
      }
    }
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  std::string String(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) Fail(node, path, "expected a string");
    return node.as<std::string>();
  }

  std::string Choice(const YAML::Node& node, const std::string& path,
                     const std::vector<std::string>& choices) const {
    const std::string value = String(node, path);
    if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      std::string hint = DidYouMean(value, choices);
      Fail(node, path, "'" + value + "' is not one of " + list +
                           (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    }
    return value;
  }

  int64_t Int(const YAML::Node& node, const std::string& path, int64_t min, int64_t max) const {
    int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value)) {
      Fail(node, path, "expected an integer");
    }
    if (value < min || value > max) {
      Fail(node, path, std::to_string(value) + " is out of range [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
    }
    return value;
  }

  double Float(const YAML::Node& node, const std::string& path, double min, double max) const {
    double value = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value)) {
      Fail(node, path, "expected a number");
    }
    if (value < min || value > max) {
      std::ostringstream msg;
      msg << value << " is out of range [" << min << ", " << max << "]";
      Fail(node, path, msg.str());
    }
    return value;
  }

  bool Bool(const YAML::Node& node, const std::string& path) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      Fail(node, path, "expected true or false");
    }
    return value;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

bool Absent(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

// Labels become parts of log file names (cell-NN-MODEL-DEVICE.log, under
// the usual 255-byte limit for a name).
constexpr size_t kMaxLabelBytes = 100;

std::vector<PluginUse> ParsePluginList(const Validator& v, const YAML::Node& list,
                                       const std::string& path, bool device) {
  if (!list.IsDefined()) v.Fail(list, path, "missing; list at least one plugin");
  if (!list.IsSequence() || list.size() == 0)
    v.Fail(list, path, "expected a non-empty list of plugins");
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
        use.time_budget_seconds =
            v.Float(item["time_budget_seconds"], item_path + ".time_budget_seconds", 0.001, 1e7);
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
      if (!Absent(item["sync_batchnorm"]))
        use.sync_batchnorm = v.Bool(item["sync_batchnorm"], item_path + ".sync_batchnorm");
    }
    if (use.label.empty()) use.label = use.plugin;
    // Labels name log files and results rows: a plain name, not a path.
    const YAML::Node label_at = item.IsMap() && item["label"] ? item["label"] : use.plugin_node;
    if (use.label.size() > kMaxLabelBytes) {
      v.Fail(label_at, item_path + ".label",
             "'" + use.label.substr(0, 40) + "...' is " + std::to_string(use.label.size()) + " bytes; the limit is " +
                 std::to_string(kMaxLabelBytes) + " (give a shorter 'label')");
    }
    if (use.label == "." || use.label == ".." ||
        std::any_of(use.label.begin(), use.label.end(),
                    [](char c) { return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      v.Fail(label_at, item_path + ".label",
             "'" + use.label + "' cannot name a file: no '/', control characters, '.' or '..' (give a plain 'label')");
    }
    if (!labels.insert(use.label).second) {
      v.Fail(item, item_path, "label '" + use.label +
                                  "' is used twice; give entries of the same plugin distinct "
                                  "'label's");
    }
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
    if (c < 0x80) len = 1;
    else if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) len = 3, lo = 0xa0;
    else if (c >= 0xe1 && c <= 0xec) len = 3;
    else if (c == 0xed) len = 3, hi = 0x9f;
    else if (c >= 0xee && c <= 0xef) len = 3;
    else if (c == 0xf0) len = 4, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    else if (c == 0xf4) len = 4, hi = 0x8f;
    else return i;
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
void CheckDuplicateKeys(const Validator& v, const YAML::Node& node, const std::string& path,
                        std::set<int>& walked) {
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

Experiment ParseChecked(const std::string& text, const std::string& file, const std::string& base_dir) {
  Validator v(file);
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
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  std::set<int> walked;
  CheckDuplicateKeys(v, root, "", walked);
  if (!root.IsMap()) v.Fail(root, "", "expected a mapping at the top level (name:, models:, ...)");
  v.Keys(root, "", {"name", "seed", "dataset", "models", "devices", "training", "measurement", "metrics"});

  Experiment e;
  e.file = file;
  if (!root["name"]) v.Fail(root, "", "missing key 'name' (the experiment's name)");
  e.name = v.String(root["name"], "name");
  if (e.name.empty()) v.Fail(root["name"], "name", "must not be empty");
  if (root["seed"]) e.seed = static_cast<uint64_t>(v.Int(root["seed"], "seed", 0, INT64_MAX));

  if (!root["dataset"]) v.Fail(root, "", "missing key 'dataset'");
  {
    const YAML::Node d = root["dataset"];
    v.Keys(d, "dataset", {"kind", "path", "train_size", "test_size"});
    if (d["kind"]) e.dataset.kind = v.Choice(d["kind"], "dataset.kind", {"cifar10", "synthetic"});
    if (!Absent(d["path"])) e.dataset.path = v.String(d["path"], "dataset.path");
    if (!Absent(d["train_size"]))
      e.dataset.train_size = v.Int(d["train_size"], "dataset.train_size", 1, 10000000);
    if (!Absent(d["test_size"]))
      e.dataset.test_size = v.Int(d["test_size"], "dataset.test_size", 1, 10000000);
    if (e.dataset.kind == "cifar10") {
      if (e.dataset.path.empty()) {
        const char* env = std::getenv("TRAINBENCH_DATA");
        if (env == nullptr || *env == '\0') {
          v.Fail(d, "dataset.path",
                 "no CIFAR-10 folder given: set dataset.path or the TRAINBENCH_DATA environment "
                 "variable to the folder holding data_batch_1.bin ... test_batch.bin");
        }
        e.dataset.path = env;
      } else {
        // A variable in the path, as in "${TRAINBENCH_DATA}/cifar-10-mini".
        const std::string marker = "${TRAINBENCH_DATA}";
        const auto pos = e.dataset.path.find(marker);
        if (pos != std::string::npos) {
          const char* env = std::getenv("TRAINBENCH_DATA");
          if (env == nullptr || *env == '\0')
            v.Fail(d["path"], "dataset.path", "uses ${TRAINBENCH_DATA}, which is not set");
          e.dataset.path.replace(pos, marker.size(), env);
        }
        if (fs::path(e.dataset.path).is_relative())
          e.dataset.path = (fs::path(base_dir) / e.dataset.path).lexically_normal().string();
      }
    }
  }

  e.models = ParsePluginList(v, root["models"], "models", false);
  e.devices = ParsePluginList(v, root["devices"], "devices", true);
  if (e.models.size() * e.devices.size() > kMaxCells) {
    v.Fail(root["devices"], "devices",
           std::to_string(e.models.size()) + " models x " + std::to_string(e.devices.size()) + " devices make " +
               std::to_string(e.models.size() * e.devices.size()) + " cells; the limit is " +
               std::to_string(kMaxCells) + " (split the experiment into several configs)");
  }

  if (const YAML::Node t = root["training"]) {
    v.Keys(t, "training", {"epochs", "batch_size", "augment", "optimizer", "schedule"});
    if (t["epochs"]) e.training.epochs = v.Int(t["epochs"], "training.epochs", 1, 100000);
    if (t["batch_size"]) e.training.batch_size = v.Int(t["batch_size"], "training.batch_size", 1, 1 << 20);
    if (t["augment"]) e.training.augment = v.Bool(t["augment"], "training.augment");
    if (const YAML::Node o = t["optimizer"]) {
      v.Keys(o, "training.optimizer", {"name", "lr", "momentum", "weight_decay", "nesterov"});
      auto& opt = e.training.optimizer;
      if (o["name"]) opt.name = v.Choice(o["name"], "training.optimizer.name", {"sgd", "adam"});
      if (o["lr"]) opt.lr = v.Float(o["lr"], "training.optimizer.lr", 1e-12, 100);
      if (o["momentum"]) opt.momentum = v.Float(o["momentum"], "training.optimizer.momentum", 0, 0.999999);
      if (o["weight_decay"]) opt.weight_decay = v.Float(o["weight_decay"], "training.optimizer.weight_decay", 0, 1);
      if (o["nesterov"]) opt.nesterov = v.Bool(o["nesterov"], "training.optimizer.nesterov");
      if (opt.nesterov && opt.momentum <= 0)
        v.Fail(o["nesterov"], "training.optimizer.nesterov", "needs momentum > 0");
      if (opt.name == "adam" && o["momentum"])
        v.Fail(o["momentum"], "training.optimizer.momentum", "applies to sgd only; remove it for adam");
    }
    if (const YAML::Node s = t["schedule"]) {
      v.Keys(s, "training.schedule", {"name", "step_size", "gamma"});
      auto& sch = e.training.schedule;
      if (s["name"]) sch.name = v.Choice(s["name"], "training.schedule.name", {"none", "step", "cosine"});
      if (s["step_size"]) sch.step_size = v.Int(s["step_size"], "training.schedule.step_size", 1, 100000);
      if (s["gamma"]) sch.gamma = v.Float(s["gamma"], "training.schedule.gamma", 1e-6, 1);
    }
  }

  if (const YAML::Node m = root["measurement"]) {
    v.Keys(m, "measurement", {"warmup_steps", "repeats", "max_steps", "time_budget_seconds",
                              "progress_interval_seconds", "eval_batch_size", "baseline",
                              "stall_timeout_seconds", "stop_on_failure"});
    auto& ms = e.measurement;
    if (m["warmup_steps"]) ms.warmup_steps = v.Int(m["warmup_steps"], "measurement.warmup_steps", 0, 1000000);
    if (m["repeats"]) ms.repeats = v.Int(m["repeats"], "measurement.repeats", 1, 100);
    if (!Absent(m["max_steps"])) ms.max_steps = v.Int(m["max_steps"], "measurement.max_steps", 1, INT64_C(1) << 40);
    if (!Absent(m["time_budget_seconds"]))
      ms.time_budget_seconds = v.Float(m["time_budget_seconds"], "measurement.time_budget_seconds", 0.001, 1e7);
    if (m["progress_interval_seconds"])
      ms.progress_interval_seconds =
          v.Float(m["progress_interval_seconds"], "measurement.progress_interval_seconds", 0.05, 3600);
    if (m["eval_batch_size"]) ms.eval_batch_size = v.Int(m["eval_batch_size"], "measurement.eval_batch_size", 1, 1 << 20);
    if (m["baseline"]) ms.baseline = v.String(m["baseline"], "measurement.baseline");
    if (m["stop_on_failure"]) ms.stop_on_failure = v.Bool(m["stop_on_failure"], "measurement.stop_on_failure");
    if (m["stall_timeout_seconds"])
      ms.stall_timeout_seconds = v.Float(m["stall_timeout_seconds"], "measurement.stall_timeout_seconds", 1, 1e6);
    if (ms.max_steps && *ms.max_steps <= ms.warmup_steps)
      v.Fail(m["max_steps"], "measurement.max_steps",
             "must be larger than warmup_steps (" + std::to_string(ms.warmup_steps) +
                 "), or no step would be timed");
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
             "must be larger than measurement.warmup_steps (" +
                 std::to_string(e.measurement.warmup_steps) + ")");
    }
  }
  if (const YAML::Node m = root["metrics"]) {
    v.Keys(m, "metrics", {"address", "linger_seconds", "basic_auth", "tls"});
    // Files named here are relative to the config's folder.
    auto resolve = [&](const std::string& f) {
      return fs::path(f).is_relative() ? (fs::path(base_dir) / f).string() : f;
    };
    if (const YAML::Node t = m["tls"]) {
      v.Keys(t, "metrics.tls", {"cert_file", "key_file"});
      if (!t["cert_file"] || !t["key_file"]) v.Fail(t, "metrics.tls", "needs both cert_file and key_file (PEM)");
      e.metrics.tls_cert_file = resolve(v.String(t["cert_file"], "metrics.tls.cert_file"));
      e.metrics.tls_key_file = resolve(v.String(t["key_file"], "metrics.tls.key_file"));
    }
    if (!Absent(m["address"])) e.metrics.address = v.String(m["address"], "metrics.address");
    if (const YAML::Node a = m["basic_auth"]) {
      v.Keys(a, "metrics.basic_auth", {"username", "password_file"});
      if (!a["username"] || !a["password_file"])
        v.Fail(a, "metrics.basic_auth", "needs both username and password_file (the password itself never goes in a config)");
      e.metrics.username = v.String(a["username"], "metrics.basic_auth.username");
      e.metrics.password_file = resolve(v.String(a["password_file"], "metrics.basic_auth.password_file"));
    }

    if (m["linger_seconds"]) e.metrics.linger_seconds = v.Float(m["linger_seconds"], "metrics.linger_seconds", 0, 86400);
  }
  // The baseline must be one of the devices.
  bool baseline_found = false;
  for (const auto& d : e.devices) baseline_found |= d.label == e.measurement.baseline;
  if (!baseline_found) {
    std::vector<std::string> labels;
    for (const auto& d : e.devices) labels.push_back(d.label);
    const YAML::Node at = root["measurement"] && root["measurement"]["baseline"]
                              ? root["measurement"]["baseline"] : root["devices"];
    const std::string hint = DidYouMean(e.measurement.baseline, labels);
    v.Fail(at, "measurement.baseline",
           "'" + e.measurement.baseline + "' is not one of the devices" +
               (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  }
  return e;
}
}  // namespace

Experiment ParseExperiment(const std::string& text, const std::string& file,
                           const std::string& base_dir) {
  try {
    return ParseChecked(text, file, base_dir);
  } catch (const YAML::Exception& e) {
    // A yaml-cpp conversion the checks above did not foresee: still one line
    // with the position.
    throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": " + e.msg);
  }
}

Experiment LoadExperiment(const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw ConfigError(file + ": no such config file");
  const auto size = fs::file_size(file, ec);
  if (ec) throw ConfigError(file + ": cannot read: " + ec.message());
  if (size > kMaxConfigBytes) {
    throw ConfigError(file + ": " + std::to_string(size) + " bytes is larger than the " +
                      std::to_string(kMaxConfigBytes) + "-byte limit for a config file");
  }
  std::ifstream in(file);
  if (!in) throw ConfigError(file + ": cannot open for reading");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string base = fs::absolute(file).parent_path().string();
  return ParseExperiment(buffer.str(), file, base);
}

namespace {

// Checks `given` against a plugin's parameter schema; returns all options
// with defaults filled in.
nlohmann::json ValidateOptions(const Validator& v, const PluginUse& use,
                               const nlohmann::json& params, const std::string& path) {
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
    auto it = std::find_if(params.begin(), params.end(),
                           [&](const nlohmann::json& p) { return p.at("name") == key; });
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

}  // namespace

void ResolvePlugins(Experiment& e, const PluginCatalog& catalog) {
  Validator v(e.file);
  auto resolve = [&](std::vector<PluginUse>& uses, const std::string& kind, const std::string& list) {
    for (size_t i = 0; i < uses.size(); ++i) {
      PluginUse& use = uses[i];
      const std::string path = list + "[" + std::to_string(i) + "]";
      const PluginInfo* info = catalog.Find(use.plugin);
      if (info == nullptr) {
        const std::string why = KnownOptionalPluginReason(use.plugin);
        if (kind == "device" && !why.empty()) {
          use.missing_reason = why;
          use.options = nlohmann::json::object();
          continue;
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
      }
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
  };
  resolve(e.models, "model", "models");
  resolve(e.devices, "device", "devices");

  if (e.dataset.kind == "cifar10") {
    try {
      const int64_t train = data::CountRecords(e.dataset.path, data::Split::kTrain);
      const int64_t test = data::CountRecords(e.dataset.path, data::Split::kTest);
      if (e.dataset.train_size && *e.dataset.train_size > train) {
        throw ConfigError(e.file + ": dataset.train_size: " + std::to_string(*e.dataset.train_size) +
                          " but " + e.dataset.path + " holds " + std::to_string(train) +
                          " training images");
      }
      if (e.dataset.test_size && *e.dataset.test_size > test) {
        throw ConfigError(e.file + ": dataset.test_size: " + std::to_string(*e.dataset.test_size) +
                          " but " + e.dataset.path + " holds " + std::to_string(test) +
                          " test images");
      }
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
  nlohmann::json measured = protocol::ToJson(static_cast<const protocol::StepMeasurement&>(measurement));
  measured["repeats"] = measurement.repeats;
  measured["stall_timeout_seconds"] = measurement.stall_timeout_seconds;
  measured["stop_on_failure"] = measurement.stop_on_failure;
  measured["baseline"] = measurement.baseline;
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

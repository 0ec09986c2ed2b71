#pragma once
// Reading one YAML document with positions in every message: the checks
// every key of a config goes through (type, range, choices, known keys with
// a did-you-mean).

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "config_error.h"

namespace trainbench {

/// Walks one YAML document, remembering the file for messages. Every failure
/// is a ConfigError "FILE:LINE:COLUMN: PATH: message".
class Validator {
 public:
  explicit Validator(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void Fail(const YAML::Node& node, const std::string& path, const std::string& message) const {
    std::ostringstream out;
    out << file_;
    if (node.IsDefined() && node.Mark().line >= 0) {
      out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    }
    out << ": " << (path.empty() ? "" : path + ": ") << message;
    throw ConfigError(out.str());
  }

  // Checks that `node` is a map whose keys are all in `allowed`.
  void Keys(const YAML::Node& node, const std::string& path, const std::vector<std::string>& allowed) const {
    if (!node.IsMap()) Fail(node, path, "expected a mapping of keys to values");
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) Fail(kv.first, path, "a key must be a plain name, not a list or mapping");
      const std::string key = kv.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string hint = DidYouMean(key, allowed);
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        Fail(kv.first, Join(path, key),
             "unknown key" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (allowed: " + list + ")");
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

  std::string Choice(const YAML::Node& node, const std::string& path, const std::vector<std::string>& choices) const {
    const std::string value = String(node, path);
    if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      std::string hint = DidYouMean(value, choices);
      Fail(node, path,
           "'" + value + "' is not one of " + list + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    }
    return value;
  }

  int64_t Int(const YAML::Node& node, const std::string& path, int64_t min, int64_t max) const {
    int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value)) {
      Fail(node, path, "expected an integer");
    }
    if (value < min || value > max) {
      Fail(node, path,
           std::to_string(value) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
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

/// A key that is not there or is null (`key:` or `key: ~`).
inline bool Absent(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

}  // namespace trainbench

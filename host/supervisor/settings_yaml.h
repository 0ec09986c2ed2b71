#pragma once
// Settings from YAML, and their reference, driven by the declarations in
// settings_schema.h and trainbench/protocol/settings.h.

#include <yaml-cpp/yaml.h>

#include <array>
#include <string>
#include <vector>

#include "settings_schema.h"
#include "yaml_validator.h"

namespace trainbench {

/// Reads one mapping into `settings` (a struct with VisitFields): only known
/// keys (plus `extra_keys`, which the caller reads), each checked against
/// its declaration; absent or null keys keep the declared default (null
/// clears an optional one). Throws ConfigError with the position.
template <class S>
void ReadSettings(const Validator& v, const YAML::Node& node, const std::string& path, S& settings,
                  const std::vector<std::string>& extra_keys = {});

/// docs/config-reference.md: every key with its type, default, range or
/// choices and documentation, generated from the declarations (`trainbench
/// config-reference` prints it; a test keeps the file current).
std::string GenerateConfigReference();

// Implementation.
namespace settings_detail {

struct KeyCollector {
  std::vector<std::string>& keys;
  template <class T>
  void operator()(const Field& f, T&) {
    keys.emplace_back(f.key);
  }
  template <class S>
  void Section(const char* key, const char*, S&) {
    keys.emplace_back(key);
  }
};

struct YamlReader {
  const Validator& v;
  const YAML::Node& node;
  const std::string& path;

  std::string PathOf(const Field& f) const { return Validator::Join(path, f.key); }
  bool HasRange(const Field& f) const { return f.min < f.max; }

  void operator()(const Field& f, int64_t& value) {
    if (Absent(node[f.key])) return;
    value = v.Int(node[f.key], PathOf(f), HasRange(f) ? static_cast<int64_t>(f.min) : INT64_MIN,
                  HasRange(f) ? static_cast<int64_t>(f.max) : INT64_MAX);
  }
  void operator()(const Field& f, std::optional<int64_t>& value) {
    if (node[f.key] && node[f.key].IsNull()) value.reset();
    if (Absent(node[f.key])) return;
    int64_t read = 0;
    (*this)(f, read);
    value = read;
  }
  void operator()(const Field& f, double& value) {
    if (Absent(node[f.key])) return;
    value = v.Float(node[f.key], PathOf(f), HasRange(f) ? f.min : -1e300, HasRange(f) ? f.max : 1e300);
  }
  void operator()(const Field& f, std::optional<double>& value) {
    if (node[f.key] && node[f.key].IsNull()) value.reset();
    if (Absent(node[f.key])) return;
    double read = 0;
    (*this)(f, read);
    value = read;
  }
  void operator()(const Field& f, bool& value) {
    if (Absent(node[f.key])) return;
    value = v.Bool(node[f.key], PathOf(f));
  }
  void operator()(const Field& f, std::array<double, 2>& value) {
    const YAML::Node n = node[f.key];
    if (Absent(n)) return;
    if (!n.IsSequence() || n.size() != 2) v.Fail(n, PathOf(f), "takes a list of two numbers, such as [0.9, 0.999]");
    for (size_t i = 0; i < 2; ++i)
      value[i] = v.Float(n[i], PathOf(f) + "[" + std::to_string(i) + "]", HasRange(f) ? f.min : -1e300,
                         HasRange(f) ? f.max : 1e300);
  }
  void operator()(const Field& f, std::string& value) {
    if (Absent(node[f.key])) return;
    if (f.choices == nullptr) {
      value = v.String(node[f.key], PathOf(f));
      return;
    }
    std::vector<std::string> choices;
    std::string all = f.choices;
    for (size_t start = 0;;) {
      const size_t comma = all.find(',', start);
      choices.push_back(all.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    value = v.Choice(node[f.key], PathOf(f), choices);
  }
  template <class S>
  void Section(const char* key, const char*, S& sub) {
    if (Absent(node[key])) return;
    ReadSettings(v, node[key], Validator::Join(path, key), sub);
  }
};

}  // namespace settings_detail

template <class S>
void ReadSettings(const Validator& v, const YAML::Node& node, const std::string& path, S& settings,
                  const std::vector<std::string>& extra_keys) {
  std::vector<std::string> keys = extra_keys;
  settings_detail::KeyCollector collect{keys};
  VisitFields(settings, collect);
  v.Keys(node, path, keys);
  settings_detail::YamlReader reader{v, node, path};
  VisitFields(settings, reader);
}

}  // namespace trainbench

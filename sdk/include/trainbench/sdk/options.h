#pragma once
/// @file
/// Options: typed, read-only access to a plugin's validated options.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace trainbench::sdk {

/// The options a plugin receives at creation. The host has already checked
/// them against the plugin's TbParamSpec schema and filled in every default,
/// so a getter only fails (std::runtime_error, converted to a creation error
/// by the SDK) when the plugin asks for a key it did not declare.
/// Immutable after construction; safe to read from several threads.
class Options {
 public:
  /// Parses a JSON object text; throws std::runtime_error on bad JSON.
  explicit Options(const char* json_text) : values_(nlohmann::json::parse(json_text ? json_text : "{}")) {
    if (!values_.is_object()) throw std::runtime_error("options must be an object");
  }

  bool GetBool(const std::string& key) const { return At(key).get<bool>(); }
  int64_t GetInt(const std::string& key) const { return At(key).get<int64_t>(); }
  double GetFloat(const std::string& key) const { return At(key).get<double>(); }
  std::string GetString(const std::string& key) const { return At(key).get<std::string>(); }
  /// The whole object (for diagnostics).
  const nlohmann::json& json() const noexcept { return values_; }

 private:
  const nlohmann::json& At(const std::string& key) const {
    auto it = values_.find(key);
    if (it == values_.end()) throw std::runtime_error("option '" + key + "' was not declared in the plugin's schema");
    return *it;
  }
  nlohmann::json values_;
};

}  // namespace trainbench::sdk

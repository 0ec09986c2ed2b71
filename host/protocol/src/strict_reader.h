#pragma once
// Reads a JSON object field by field and refuses what it did not read: the
// protocol's two processes are built together, so a missing or an unknown
// field means they are not (or one of them is not what it claims to be).

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainbench/protocol/error.h"

namespace trainbench::protocol {

class StrictReader {
 public:
  /// `where` names the object in messages ("cell spec", "event 'progress'",
  /// "cell spec: training").
  StrictReader(const nlohmann::json& object, std::string where) : j_(object), where_(std::move(where)) {
    if (!j_.is_object()) throw ProtocolError(where_ + ": expected a JSON object, got " + std::string(j_.type_name()));
  }

  template <class T>
  T Get(const char* key) {
    const nlohmann::json& v = Field(key);
    return Convert<T>(v, key);
  }
  /// A field that must be present but may be null.
  template <class T>
  std::optional<T> GetNullable(const char* key) {
    const nlohmann::json& v = Field(key);
    if (v.is_null()) return std::nullopt;
    return Convert<T>(v, key);
  }
  /// A field that may be absent (added in a minor protocol change).
  template <class T>
  std::optional<T> GetOptional(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end()) return std::nullopt;
    seen_.insert(key);
    if (it->is_null()) return std::nullopt;
    return Convert<T>(*it, key);
  }
  /// Raw JSON (plugin-defined content such as options or a hardware description).
  const nlohmann::json& Json(const char* key) { return Field(key); }
  /// A nested object, read by its own reader.
  StrictReader Object(const char* key) { return StrictReader(Field(key), where_ + ": " + key); }
  bool Has(const char* key) const { return j_.contains(key); }

  /// Throws on a field that was not read.
  void Finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (seen_.count(it.key()) == 0) throw ProtocolError(where_ + ": unknown field '" + it.key() + "'");
    }
  }

 private:
  const nlohmann::json& Field(const char* key) {
    auto it = j_.find(key);
    if (it == j_.end()) throw ProtocolError(where_ + ": missing field '" + key + "'");
    seen_.insert(key);
    return *it;
  }
  template <class T>
  T Convert(const nlohmann::json& v, const char* key) const {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw ProtocolError(where_ + ": field '" + key + "' has the wrong type (" + v.type_name() + ")");
    }
  }

  const nlohmann::json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

}  // namespace trainbench::protocol

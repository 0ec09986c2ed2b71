#include "path_log.h"

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

namespace trainbench::plugins {
namespace {

// Keyed by the literals' addresses: a count is a lookup, never an
// allocation after its first; PathJson joins equal texts from other units.
struct Log {
  std::mutex mutex;
  std::map<std::pair<const char*, const char*>, int64_t> counts;
};

Log& GetLog() {
  static Log* log = new Log;  // counted into until exit, never destroyed
  return *log;
}

}  // namespace

void CountPath(const char* rule, const char* choice) noexcept {
  try {
    Log& log = GetLog();
    const std::lock_guard<std::mutex> lock(log.mutex);
    ++log.counts[{rule, choice}];
  } catch (...) {  // out of memory: a count lost, never a step
  }
}

std::string PathJson() {
  Log& log = GetLog();
  const std::lock_guard<std::mutex> lock(log.mutex);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, count] : log.counts) {
    nlohmann::json& entry = out[key.first][key.second];
    entry = (entry.is_number() ? entry.get<int64_t>() : 0) + count;
  }
  return out.dump();
}

void ResetPathLog() noexcept {
  Log& log = GetLog();
  const std::lock_guard<std::mutex> lock(log.mutex);
  log.counts.clear();
}

}  // namespace trainbench::plugins

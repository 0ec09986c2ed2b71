#pragma once
// `trainbench cache`: the plugins' per-machine caches, as the SDK declares
// them (trainbench/sdk/cache.h), listed and cleared without knowing any
// plugin.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace trainbench {

/// A cache file as `trainbench cache` lists it.
struct PluginCacheFile {
  std::filesystem::path file;
  std::uintmax_t bytes = 0;
  std::string format;                          ///< its "format", when it names one
  std::map<std::string, std::string> machine;  ///< what it was made for
  std::size_t entries = 0;
  std::string problem;  ///< why no run would use it ("is not valid JSON", ...); empty if readable
};

/// The cache files (NAME.json) in `directory`, by name, readable or not;
/// none when it does not exist. Not thread-safe against a concurrent clear.
std::vector<PluginCacheFile> ListPluginCaches(const std::filesystem::path& directory);

/// Removes the cache files in `directory` that read as plugin caches (a JSON
/// object with `machine` and `entries` objects, as ListPluginCaches finds no
/// problem with) with their lock and temporary files (NAME.json.lock,
/// NAME.json.tmp.DIGITS); nothing else, nothing below it, never a link's
/// target. Returns the cache files removed; `errors` gets a line per file
/// that could not be. Throws std::runtime_error, removing nothing, when
/// `directory` holds a run's results (results.json or results.csv).
std::size_t ClearPluginCaches(const std::filesystem::path& directory, std::vector<std::string>* errors);

}  // namespace trainbench

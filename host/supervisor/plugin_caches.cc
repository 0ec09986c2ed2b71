#include "plugin_caches.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "trainbench/sdk/cache.h"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// No plugin writes a cache this large (a whole ResNet50's engines: ~100 KB).
constexpr std::uintmax_t kMaxCacheBytes = 16u << 20;

bool EndsWith(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// NAME.json with a non-empty NAME.
bool IsCacheName(const std::string& name) {
  const std::string ext = sdk::kCacheFileExtension;
  return name.size() > ext.size() && EndsWith(name, ext);
}

// NAME.json.lock or NAME.json.tmp.DIGITS of a cache name.
bool IsCompanion(const std::string& name) {
  if (EndsWith(name, ".lock")) return IsCacheName(name.substr(0, name.size() - 5));
  const auto tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos || tmp + 5 == name.size()) return false;
  const std::string digits = name.substr(tmp + 5);
  return std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return c >= '0' && c <= '9'; }) &&
         IsCacheName(name.substr(0, tmp));
}

std::vector<fs::path> EntriesNamed(const fs::path& directory, const std::function<bool(const std::string&)>& keep,
                                   std::error_code& ec) {
  std::vector<fs::path> out;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (keep(it->path().filename().string())) out.push_back(it->path());
  }
  return out;
}

PluginCacheFile Summarise(const fs::path& path) {
  PluginCacheFile summary;
  summary.file = path;
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || status.type() != fs::file_type::regular) {
    summary.problem = "is not a regular file";
    return summary;
  }
  summary.bytes = fs::file_size(path, ec);
  if (ec || summary.bytes > kMaxCacheBytes) {
    summary.problem = ec ? "cannot be sized (" + ec.message() + ")" : "is larger than any plugin cache";
    return summary;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!in || j.is_discarded() || !j.is_object()) {
    summary.problem = "is not valid JSON";
    return summary;
  }
  if (!j.contains("machine") || !j["machine"].is_object() || !j.contains("entries") || !j["entries"].is_object()) {
    summary.problem = "lacks the 'machine' and 'entries' objects of a plugin cache";
    return summary;
  }
  for (const auto& [key, value] : j["machine"].items())
    summary.machine[key] = value.is_string() ? value.get<std::string>() : value.dump();
  summary.entries = j["entries"].size();
  if (j.contains("format") && j["format"].is_string()) summary.format = j["format"].get<std::string>();
  return summary;
}

}  // namespace

std::vector<PluginCacheFile> ListPluginCaches(const fs::path& directory) {
  std::vector<PluginCacheFile> out;
  std::error_code ec;
  for (const auto& path : EntriesNamed(directory, IsCacheName, ec)) out.push_back(Summarise(path));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

std::size_t ClearPluginCaches(const fs::path& directory, std::vector<std::string>* errors) {
  // A run's folder is not a cache folder, whatever its files are named.
  for (const char* results : {"results.json", "results.csv"}) {
    std::error_code exists_ec;
    if (fs::exists(fs::symlink_status(directory / results, exists_ec)))
      throw std::runtime_error(directory.string() + " holds " + results +
                               ": a run's folder, not a plugin cache folder; nothing removed (name the cache "
                               "folder with --dir)");
  }
  std::size_t removed = 0;
  std::error_code ec;
  // Only what reads as a plugin cache goes, with its lock and leftovers: a
  // file that merely ends in .json is not one.
  std::vector<std::string> caches;
  for (const auto& path : EntriesNamed(directory, IsCacheName, ec))
    if (Summarise(path).problem.empty()) caches.push_back(path.filename().string());
  const auto of_a_cache = [&](const std::string& name) {
    const std::string base =
        EndsWith(name, ".lock") ? name.substr(0, name.size() - 5) : name.substr(0, name.rfind(".tmp."));
    return std::find(caches.begin(), caches.end(), base) != caches.end();
  };
  const std::vector<fs::path> doomed = EntriesNamed(
      directory,
      [&](const std::string& name) {
        return std::find(caches.begin(), caches.end(), name) != caches.end() || (IsCompanion(name) && of_a_cache(name));
      },
      ec);
  if (ec && errors != nullptr && ec != std::errc::no_such_file_or_directory)
    errors->push_back(directory.string() + ": " + ec.message());
  for (const auto& path : doomed) {
    // Links and folders of such a name are left alone: only files plugins
    // write go.
    std::error_code type_ec;
    if (fs::symlink_status(path, type_ec).type() != fs::file_type::regular) continue;
    if (::unlink(path.c_str()) != 0) {
      if (errors != nullptr) errors->push_back(path.string() + ": " + std::generic_category().message(errno));
      continue;
    }
    removed += IsCacheName(path.filename().string()) ? 1 : 0;
  }
  return removed;
}

}  // namespace trainbench

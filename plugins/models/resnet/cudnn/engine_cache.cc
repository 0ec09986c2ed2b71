#include "engine_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

namespace trainbench::plugins {
namespace {

constexpr const char* kFormat = "trainbench-engine-cache";
constexpr int kVersion = 1;
// A cache file larger than this is not ours (a few hundred entries of about
// 300 bytes each is a whole ResNet50).
constexpr std::uintmax_t kMaxFileBytes = 16u << 20;

using nlohmann::json;

bool ParseChoice(const json& j, EngineChoice* choice) {
  if (!j.is_object() || !j.contains("engine") || !j["engine"].is_number_integer()) return false;
  choice->engine = j["engine"].get<int64_t>();
  if (choice->engine < 0) return false;
  if (j.contains("knobs")) {
    const json& knobs = j["knobs"];
    if (!knobs.is_array()) return false;
    for (const json& knob : knobs) {
      if (!knob.is_array() || knob.size() != 2 || !knob[0].is_number_integer() || !knob[1].is_number_integer())
        return false;
      const int64_t type = knob[0].get<int64_t>();
      if (type < 0 || type > 1024) return false;
      choice->knobs.emplace_back(type, knob[1].get<int64_t>());
    }
  }
  if (j.contains("ms")) {
    if (!j["ms"].is_number()) return false;
    choice->milliseconds = j["ms"].get<double>();
  }
  return true;
}

json ChoiceJson(const EngineChoice& choice) {
  json knobs = json::array();
  for (const auto& [type, value] : choice.knobs) knobs.push_back({type, value});
  return {{"engine", choice.engine}, {"knobs", knobs}, {"ms", choice.milliseconds}};
}

enum class ParseResult { kMissing, kParsed, kUnusable };

// Reads an engine-cache file: its machine description and choices, or why
// it is unusable (whatever the machine).
ParseResult ParseFile(const std::filesystem::path& file, std::map<std::string, std::string>* machine,
                      std::map<std::string, EngineChoice>* entries, std::string* why) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::exists(status)) return ParseResult::kMissing;
  if (!std::filesystem::is_regular_file(status)) {
    *why = "is not a regular file";
    return ParseResult::kUnusable;
  }
  const std::uintmax_t bytes = std::filesystem::file_size(file, ec);
  if (ec || bytes > kMaxFileBytes) {
    *why = ec ? "cannot be sized (" + ec.message() + ")" : "is larger than any cache this program writes";
    return ParseResult::kUnusable;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    *why = "cannot be opened";
    return ParseResult::kUnusable;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "is not valid JSON";
    return ParseResult::kUnusable;
  }
  if (j.value("format", "") != kFormat || !j.contains("version") || j["version"] != kVersion) {
    *why = "is not a version-" + std::to_string(kVersion) + " engine cache";
    return ParseResult::kUnusable;
  }
  if (!j.contains("machine") || !j["machine"].is_object() || !j.contains("entries") || !j["entries"].is_object()) {
    *why = "lacks its machine or entries";
    return ParseResult::kUnusable;
  }
  for (const auto& [name, value] : j["machine"].items()) {
    if (!value.is_string()) {
      *why = "has a malformed machine description";
      return ParseResult::kUnusable;
    }
    (*machine)[name] = value.get<std::string>();
  }
  for (const auto& [key, value] : j["entries"].items()) {
    EngineChoice choice;
    if (!ParseChoice(value, &choice)) {
      *why = "has a malformed entry";
      return ParseResult::kUnusable;
    }
    entries->emplace(key, std::move(choice));
  }
  return ParseResult::kParsed;
}

}  // namespace

std::string FileNameSafe(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!keep) c = '_';
  }
  return out.empty() ? "_" : out;
}

EngineCache::EngineCache(std::filesystem::path file, std::map<std::string, std::string> machine, Warn warn)
    : file_(std::move(file)), machine_(std::move(machine)), warn_(std::move(warn)) {
  if (file_.empty()) return;
  std::string why;
  if (Read(&entries_, &why) == FileState::kUnusable && warn_)
    warn_("cuDNN engine cache " + file_.string() + " " + why + ": rebuilding it (the first steps time every engine)");
}

EngineCache::FileState EngineCache::Read(std::map<std::string, EngineChoice>* entries, std::string* why) const {
  std::map<std::string, std::string> machine;
  std::map<std::string, EngineChoice> read;
  const ParseResult parsed = ParseFile(file_, &machine, &read, why);
  if (parsed == ParseResult::kMissing) return FileState::kMissing;
  if (parsed == ParseResult::kUnusable) return FileState::kUnusable;
  if (machine != machine_) {
    for (const auto& [name, value] : machine_) {
      const auto it = machine.find(name);
      if (it == machine.end() || it->second != value) {
        *why = "is stale (" + name + " was " + (it == machine.end() ? "unset" : "'" + it->second + "'") + ", is now '" +
               value + "')";
        return FileState::kUnusable;
      }
    }
    *why = "is stale (made for another machine description)";
    return FileState::kUnusable;
  }
  *entries = std::move(read);
  return FileState::kOurs;
}

std::optional<EngineChoice> EngineCache::Find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void EngineCache::Store(const std::string& key, const EngineChoice& choice) {
  std::lock_guard lock(mutex_);
  entries_[key] = choice;
  forgotten_.erase(key);
  WriteLocked();
}

void EngineCache::Forget(const std::string& key) {
  std::lock_guard lock(mutex_);
  entries_.erase(key);
  forgotten_.insert(key);
  WriteLocked();
}

std::size_t EngineCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

namespace {

// An exclusive lock on `file`.lock while it lives (none if it cannot be
// had: writes still replace the file whole, one may lose another's entries).
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& file) {
    fd_ = ::open((file.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

void EngineCache::WriteLocked() {
  if (file_.empty() || write_failed_) return;
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  const FileLock lock(file_);  // other processes' read-merge-write waits for this one's
  // What other processes stored since this one read the file stays, unless
  // this one chose otherwise or dropped it.
  std::map<std::string, EngineChoice> on_disk;
  std::string why;
  if (Read(&on_disk, &why) == FileState::kOurs) {
    for (auto& [key, choice] : on_disk) {
      if (forgotten_.count(key) == 0) entries_.emplace(key, std::move(choice));
    }
  }
  json machine = json::object();
  for (const auto& [name, value] : machine_) machine[name] = value;
  json entries = json::object();
  for (const auto& [key, choice] : entries_) entries[key] = ChoiceJson(choice);
  const json j = {{"format", kFormat}, {"version", kVersion}, {"machine", machine}, {"entries", entries}};

  const std::filesystem::path temp = file_.string() + ".tmp." + std::to_string(::getpid());
  if (!ec) {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << '\n';
    out.close();
    if (!out) ec = std::make_error_code(std::errc::io_error);
  }
  if (!ec) std::filesystem::rename(temp, file_, ec);
  if (ec) {
    std::filesystem::remove(temp, ec);
    write_failed_ = true;
    if (warn_)
      warn_("cannot write the cuDNN engine cache " + file_.string() +
            ": engine choices stay in this process only (set XDG_CACHE_HOME to a writable directory)");
  }
}

}  // namespace trainbench::plugins

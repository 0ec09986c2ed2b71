#pragma once
// A per-machine file of autotuned choices (cuDNN's convolution engines), so
// that a repeat run on the same machine does not time the candidates again.
// Plain C++ (no cuDNN, no LibTorch): the file logic is tested on any machine.
//
// The file is JSON: the machine it describes (GPU, driver, library versions)
// and one entry per operation key. A file that is unreadable, malformed or
// another machine's is rebuilt (with a warning); a file that cannot be
// written leaves the cache working in memory (with one warning). Writes go
// to a temporary file renamed over the old one, after merging what other
// processes wrote meanwhile, so readers never see half a file.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace trainbench::plugins {

/// One autotuned choice: the engine's global index and its knob settings.
struct EngineChoice {
  int64_t engine = 0;
  std::vector<std::pair<int64_t, int64_t>> knobs;  ///< (knob type, value)
  double milliseconds = 0;                         ///< its time when chosen (for people reading the file)

  bool operator==(const EngineChoice& other) const { return engine == other.engine && knobs == other.knobs; }
};

/// `name` with everything but letters, digits, '.', '-' and '_' made '_'
/// (for file names made from a GPU's name).
std::string FileNameSafe(const std::string& name);

/// How every engine-cache file's name starts (then the GPU, its compute
/// capability and multiprocessors: cudnn-engines-NVIDIA_H200-sm90-132mp.json).
inline constexpr const char* kEngineCacheFilePrefix = "cudnn-engines-";

class EngineCache {
 public:
  using Warn = std::function<void(const std::string&)>;

  /// `file`: the cache file (created with its directory on the first Store;
  /// empty: memory only). `machine`: what every choice depends on besides the
  /// operation; a file made for other values is stale. Reads the file now.
  EngineCache(std::filesystem::path file, std::map<std::string, std::string> machine, Warn warn);

  std::optional<EngineChoice> Find(const std::string& key) const;
  /// Records a choice and writes the file.
  void Store(const std::string& key, const EngineChoice& choice);
  /// Drops a choice that proved unusable, and writes the file.
  void Forget(const std::string& key);

  std::size_t size() const;
  const std::filesystem::path& file() const { return file_; }

 private:
  enum class FileState { kMissing, kOurs, kUnusable };
  // The entries of the file, if it is this machine's; `why` says what is
  // wrong with it otherwise.
  FileState Read(std::map<std::string, EngineChoice>* entries, std::string* why) const;
  void WriteLocked();

  const std::filesystem::path file_;
  const std::map<std::string, std::string> machine_;
  const Warn warn_;
  mutable std::mutex mutex_;
  std::map<std::string, EngineChoice> entries_;
  std::set<std::string> forgotten_;  // dropped here: not merged back from the file
  bool write_failed_ = false;        // warned once; memory only from then on
};

}  // namespace trainbench::plugins

#pragma once

#include <filesystem>
#include <string>

namespace trainbench {

/// A Prometheus file_sd target file naming this process's /metrics while it
/// lives: how Prometheus finds Slurm tasks (docs/slurm.md). Removed again
/// on destruction.
class FileSdTarget {
 public:
  FileSdTarget(const std::filesystem::path& dir, const std::string& address, const std::string& experiment);
  ~FileSdTarget();
  FileSdTarget(const FileSdTarget&) = delete;
  FileSdTarget& operator=(const FileSdTarget&) = delete;

 private:
  std::filesystem::path path_;
};

}  // namespace trainbench

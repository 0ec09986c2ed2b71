#pragma once
// Events from a worker to the supervising host: one JSON object per line on
// the worker's stdout (the protocol is described in docs/architecture.md).

#include <cstdio>
#include <mutex>

#include <nlohmann/json.hpp>

namespace trainbench::worker {

/// Writes events as JSON lines and flushes each, so the host sees them live.
/// Thread-safe.
class EventSink {
 public:
  explicit EventSink(std::FILE* out) : out_(out) {}
  void Emit(const nlohmann::json& event) {
    const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(mutex_);
    std::fputs(line.c_str(), out_);
    std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  std::mutex mutex_;
};

}  // namespace trainbench::worker

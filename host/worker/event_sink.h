#pragma once
// Where a worker's events go: framed on the event channel the host gave it
// (`--events-fd`), or, run by hand, as JSON lines on stdout for a reader.

#include <cstdio>
#include <mutex>

#include "trainbench/protocol/channel.h"
#include "trainbench/protocol/events.h"

namespace trainbench::worker {

/// Thread-safe.
class EventSink {
 public:
  /// Frames on `fd` (not owned), or JSON lines on stdout when `fd` < 0.
  explicit EventSink(int fd) : fd_(fd), writer_(fd) {}
  void Emit(const protocol::Event& event) {
    if (fd_ >= 0) {
      writer_.Write(event);
      return;
    }
    const std::string line = protocol::ToJson(event).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(mutex_);
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

 private:
  int fd_;
  protocol::EventWriter writer_;
  std::mutex mutex_;
};

}  // namespace trainbench::worker

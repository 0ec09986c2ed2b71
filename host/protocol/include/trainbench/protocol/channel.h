#pragma once
// The worker's event channel: a pipe of its own (never stdout or stderr,
// which plugins and LibTorch write to), carrying frames of a 4-byte
// big-endian length and that many bytes of JSON.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "trainbench/protocol/events.h"

namespace trainbench::protocol {

/// Largest frame either side accepts (a result with per-epoch lists is a few
/// KiB; a progress report's step sample at most a few hundred numbers).
inline constexpr uint32_t kMaxFrameBytes = 4u << 20;

/// Writes events to a file descriptor, one frame each, whole. Thread-safe.
class EventWriter {
 public:
  /// Does not own `fd`.
  explicit EventWriter(int fd) : fd_(fd) {}
  /// Returns false when the reader is gone (EPIPE) or the write failed.
  bool Write(const Event& event);

 private:
  int fd_;
  std::mutex mutex_;
};

/// Splits bytes read from the channel into messages. Not thread-safe.
class FrameReader {
 public:
  void Feed(const char* data, size_t size) { buffer_.append(data, size); }
  /// The next whole message, or nullopt when more bytes are needed. Throws
  /// ProtocolError on a frame over kMaxFrameBytes or that is not JSON.
  std::optional<nlohmann::json> Next();
  /// Bytes of an unfinished frame (non-zero at EOF: a torn message).
  size_t pending() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

/// The frame of `payload` (for tests and the writer).
std::string Frame(const std::string& payload);

}  // namespace trainbench::protocol

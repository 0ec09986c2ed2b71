#include "trainbench/protocol/channel.h"

#include <unistd.h>

#include <cerrno>

#include "trainbench/protocol/error.h"

namespace trainbench::protocol {

std::string Frame(const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string frame;
  frame.reserve(payload.size() + 4);
  for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((n >> shift) & 0xff));
  frame += payload;
  return frame;
}

bool EventWriter::Write(const Event& event) {
  // Strings from plugins may hold any bytes: replace what is not UTF-8.
  const std::string payload = ToJson(event).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (payload.size() > kMaxFrameBytes) return false;
  const std::string frame = Frame(payload);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t written = 0;
  while (written < frame.size()) {
    const ssize_t n = ::write(fd_, frame.data() + written, frame.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<size_t>(n);
  }
  return true;
}

std::optional<nlohmann::json> FrameReader::Next() {
  if (buffer_.size() < 4) return std::nullopt;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(buffer_[static_cast<size_t>(i)]);
  if (n > kMaxFrameBytes) {
    throw ProtocolError("event channel: a frame of " + std::to_string(n) + " bytes (the limit is " +
                        std::to_string(kMaxFrameBytes) + ")");
  }
  if (buffer_.size() < 4 + static_cast<size_t>(n)) return std::nullopt;
  nlohmann::json message = nlohmann::json::parse(buffer_.begin() + 4, buffer_.begin() + 4 + n, nullptr, false);
  buffer_.erase(0, 4 + static_cast<size_t>(n));
  if (message.is_discarded()) throw ProtocolError("event channel: a frame that is not JSON");
  return message;
}

}  // namespace trainbench::protocol

#pragma once
/// @file
/// Status: how SDK interfaces report failure without throwing across the
/// plugin boundary (in the spirit of absl::Status).

#include <string>
#include <utility>

namespace trainbench::sdk {

/// Result of an operation that can fail for a reason worth telling the user.
/// A value type; not synchronised (one thread at a time per object).
class Status {
 public:
  /// A success.
  static Status Ok() { return Status(); }
  /// A failure with a one-line, user-facing reason.
  static Status Error(std::string message) {
    Status s;
    s.ok_ = false;
    s.message_ = std::move(message);
    return s;
  }

  /// True for success.
  bool ok() const noexcept { return ok_; }
  /// The reason; empty on success.
  const std::string& message() const noexcept { return message_; }

 private:
  bool ok_ = true;
  std::string message_;
};

}  // namespace trainbench::sdk

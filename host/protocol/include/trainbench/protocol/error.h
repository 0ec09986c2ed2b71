#pragma once
// The one error type of the worker protocol.

#include <stdexcept>
#include <string>

namespace trainbench::protocol {

/// A message that does not follow the protocol: another version, a missing
/// or unknown field, a field of the wrong type, a frame too large. what() is
/// one line naming the message and the field.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainbench::protocol

#pragma once
// The error of a user's mistake in an experiment file, and its "did you
// mean" (their own header: the loader and the validator's helpers both use
// them).

#include <stdexcept>
#include <string>
#include <vector>

namespace trainbench {

/// A user's mistake in a config file; what() is the one-line message.
/// Control characters from the input (newlines, NULs) are shown escaped, so
/// the message stays one printable line whatever the file holds.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(Printable(message)) {}

 private:
  static std::string Printable(const std::string& text);
};

/// The closest of `candidates` to `word` within a small edit distance, or ""
/// (the "did you mean" of a ConfigError's message).
std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace trainbench

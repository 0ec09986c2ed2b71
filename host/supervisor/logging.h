#pragma once
// Log setup of the `trainbench` command: events to stderr, one line each,
// timestamped; colours only on a terminal; optionally JSON lines for log
// collectors (--log-format json).

#include <string>

namespace trainbench {

/// `format`: "text" or "json". Throws std::invalid_argument otherwise.
void SetUpLogging(const std::string& format);

}  // namespace trainbench

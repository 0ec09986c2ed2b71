#include "out_of_memory.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>

namespace trainbench::worker {

namespace {

std::string GiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  return std::strstr(e.what(), "out of memory") != nullptr;
}

std::string OutOfMemoryLine(const sdk::MemoryFigures& m, const MemoryAdvice& advice) {
  std::string line = "out of device memory";
  if (m.failed_request > 0) line += ": an allocation of " + GiB(m.failed_request) + " was refused";
  std::string held;
  if (m.peak_allocated >= 0) held = "its tensors held up to " + GiB(m.peak_allocated);
  if (m.peak_reserved >= 0) held += (held.empty() ? "it held up to " : ", the allocator up to ") + GiB(m.peak_reserved);
  if (!held.empty()) line += (m.failed_request > 0 ? " after " : ": ") + held;
  const bool limited = m.limit > 0 && m.total > 0 && m.limit < m.total;
  if (limited)
    line += "; its limit is " + GiB(m.limit) + " of the device's " + GiB(m.total);
  else if (m.total > 0)
    line += "; the device has " + GiB(m.total);
  if (m.free >= 0) line += " (" + GiB(m.free) + " free now)";
  line += ": lower training.batch_size (now " + std::to_string(advice.batch_size) + ")";
  if (limited) line += " or raise the " + advice.device + " device's memory_limit_gib";
  return line;
}

}  // namespace trainbench::worker

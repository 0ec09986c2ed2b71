#pragma once
// A cell that ran out of device memory fails in one line that says what it
// needed, what it had, and what to lower, instead of the allocator's
// paragraph.

#include <cstdint>
#include <exception>
#include <string>

#include "trainbench/sdk/device.h"

namespace trainbench::worker {

/// Whether `e` is a failure for want of device memory: LibTorch's
/// OutOfMemoryError, or a plugin's message that carries one (a model's
/// Forward returns LibTorch's text in its Status).
bool IsOutOfMemory(const std::exception& e);

/// What the cell was run with, for the advice.
struct MemoryAdvice {
  int64_t batch_size = 0;
  std::string device;  ///< the device's label in the experiment
};

/// "out of device memory: ..." in one line: the allocation refused (where
/// the device tells it), the most the cell's tensors and the process held,
/// its limit and the device's total and free memory, and what to lower.
std::string OutOfMemoryLine(const sdk::MemoryFigures& memory, const MemoryAdvice& advice);

}  // namespace trainbench::worker

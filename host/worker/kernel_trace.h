#pragma once
// Where a cell's step spends its device time: `trainbench run --kernel-trace`
// records a few timed steps through LibTorch's profiler (Kineto) and writes
// them as a Chrome trace (OUT/diagnostics/kernel-trace-cellN.json) that
// bench/kernel_profile.py --trace sums kernel by kernel (as it does for plain
// PyTorch's step).
// A diagnostic: the profiled steps run a little slower, so a cell traced is
// not a cell measured.

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace trainbench::worker {

class KernelTrace {
 public:
  /// The most steps a trace records.
  static constexpr int64_t kMaxSteps = 100000;
  virtual ~KernelTrace() = default;
  /// Called after each timed step: the first call starts recording (after
  /// the device finished what it had queued), the call `steps` later stops
  /// it and writes the file.
  virtual void AfterTimedStep() = 0;
  /// What follows is not a steady training step (an evaluation, an epoch's
  /// end): a recording stops here and writes the steps it has (the log line
  /// says how many); nothing is recorded after.
  virtual void Interrupt() noexcept = 0;
};

/// A trace of `steps` timed steps of a cell on `device`, written to `path`.
/// On a CUDA device it records the GPU's kernels, copies and fills (CUPTI,
/// CUDA graph replays included); on the CPU the operators. Throws
/// std::runtime_error on a step count outside 1 to kMaxSteps.
std::unique_ptr<KernelTrace> MakeKernelTrace(const c10::Device& device, const std::string& path, int64_t steps);

}  // namespace trainbench::worker

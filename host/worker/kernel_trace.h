#pragma once
// Where a cell's step spends its device time: TRAINBENCH_KERNEL_TRACE=PREFIX
// records a few timed steps through LibTorch's profiler (Kineto) and writes
// them as a Chrome trace, PREFIX-<pid>.json, that bench/kernel_profile.py
// --trace sums kernel by kernel (as it does for plain PyTorch's step).
// A diagnostic: the profiled steps run a little slower, so a cell traced is
// not a cell measured.

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

namespace trainbench::worker {

class KernelTrace {
 public:
  /// Steps recorded unless TRAINBENCH_KERNEL_TRACE_STEPS says otherwise.
  static constexpr int64_t kDefaultSteps = 10;
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

/// A trace for a cell on `device` when TRAINBENCH_KERNEL_TRACE is set, else
/// null. On a CUDA device it records the GPU's kernels, copies and fills
/// (CUPTI, CUDA graph replays included); on the CPU the operators.
/// Throws std::runtime_error on a TRAINBENCH_KERNEL_TRACE_STEPS that is not
/// a positive integer.
std::unique_ptr<KernelTrace> MakeKernelTrace(const c10::Device& device);

}  // namespace trainbench::worker

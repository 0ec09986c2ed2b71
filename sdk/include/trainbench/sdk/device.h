#pragma once
/// @file
/// The interface a device plugin's object implements.

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "trainbench/sdk/status.h"

namespace trainbench::sdk {

/// Mixed precision a device asks the training loop to use.
enum class Amp { kNone, kBf16, kFp16 };

/// How the training loop should place and run work on this device.
struct DeviceSettings {
  c10::Device device{c10::kCPU};  ///< where tensors and the module live
  bool channels_last = false;     ///< NHWC memory format for 4-D tensors
  Amp amp = Amp::kNone;           ///< autocast dtype, if any
  bool cuda_graph = false;        ///< capture the training step in a graph
};

/// A device's memory in bytes, -1 for what it cannot tell (SDK 1.6). The
/// layout is frozen: later figures come in a new struct and method.
struct MemoryFigures {
  int64_t peak_reserved = -1;   ///< what PeakMemoryBytes() says: held by the process (a GPU allocator's cache too)
  int64_t peak_allocated = -1;  ///< highest held by live tensors since ResetPeakMemory()
  int64_t limit = -1;           ///< the most this process may take (a limit the device was given, else the total)
  int64_t total = -1;           ///< the device's own memory
  int64_t free = -1;            ///< free on the device now, other processes' use counted
  int64_t failed_request = -1;  ///< the size of the last allocation refused for want of memory, if any
};

/// A place to train (TB_PLUGIN_DEVICE).
///
/// Created by the plugin's TbCreateFn and owned by the host, which keeps the
/// library loaded while it lives. Not thread-safe except where noted. No
/// method throws.
class Device {
 public:
  virtual ~Device() = default;

  /// True when this device can run here; otherwise false with a one-line
  /// reason ("no CUDA GPU visible: ..."). Must not fail hard when the
  /// hardware is absent.
  virtual bool Available(std::string* why_not) noexcept = 0;

  /// Applies process-wide settings (thread counts, cuDNN autotuning) before
  /// training starts. Called once, after Available() returned true.
  virtual Status Setup() noexcept = 0;

  /// Placement and precision for the training loop. Valid after Setup().
  virtual DeviceSettings Settings() const noexcept = 0;

  /// Hardware description as a JSON object text: for a CPU the model name,
  /// cores and threads used; for a GPU its name, memory, compute capability,
  /// driver, CUDA and cuDNN versions.
  virtual std::string DescribeJson() noexcept = 0;

  /// Waits until all work queued on the device is done, so that a host clock
  /// read afterwards covers it.
  virtual Status Synchronize() noexcept = 0;

  /// Bytes of device memory in use by this process now (resident set for a
  /// CPU), or -1 when unknown. Safe to call from any thread.
  virtual int64_t MemoryInUseBytes() noexcept = 0;

  /// Highest MemoryInUseBytes() since the last ResetPeakMemory(), or -1.
  virtual int64_t PeakMemoryBytes() noexcept = 0;

  /// Starts a new peak-memory window.
  virtual void ResetPeakMemory() noexcept = 0;

  /// The memory figures of the current peak-memory window (SDK 1.6; the
  /// host calls it only on plugins of ABI minor 6 or later). Safe to call
  /// from any thread, also after an allocation failed.
  virtual MemoryFigures Memory() noexcept { return MemoryFigures{}; }
};

/// Parses "none", "bf16", "fp16"; returns false on anything else.
inline bool ParseAmp(const std::string& text, Amp* out) {
  if (text == "none")
    *out = Amp::kNone;
  else if (text == "bf16")
    *out = Amp::kBf16;
  else if (text == "fp16")
    *out = Amp::kFp16;
  else
    return false;
  return true;
}

/// Inverse of ParseAmp.
inline const char* AmpName(Amp amp) {
  switch (amp) {
    case Amp::kBf16:
      return "bf16";
    case Amp::kFp16:
      return "fp16";
    default:
      return "none";
  }
}

}  // namespace trainbench::sdk

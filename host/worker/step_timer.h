#pragma once
// Timing training steps without stalling the device: on a GPU each step's end
// is a recorded CUDA event and the host only waits when it collects; on a CPU
// it is the host clock (the work is synchronous anyway).

#include <c10/core/Device.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/sdk/device.h"

namespace trainbench::worker {

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  /// Starts timing: the next Mark() ends the first step.
  virtual void Begin() = 0;
  /// Marks the end of one step (queued work included). An untimed step
  /// (warm-up, graph capture) is left out of what Collect() returns.
  virtual void Mark(bool timed) = 0;
  /// Waits for the marked work and returns the seconds of each timed step
  /// marked since the last call, in order.
  virtual std::vector<double> Collect() = 0;
};

/// The timer for `settings.device`; `device` synchronises for the CPU timer.
std::unique_ptr<StepTimer> MakeStepTimer(const sdk::DeviceSettings& settings, sdk::Device& device);

/// A whole training step (batch selection and augmentation, forward,
/// backward, optimizer, loss accumulation) captured once in a CUDA graph and
/// replayed: one launch per step instead of hundreds.
class GraphedStep {
 public:
  /// Steps a capturing Run() executes: warm-up steps on a side stream (so
  /// gradients, optimizer state and library workspaces exist), then the
  /// captured step's first replay.
  static constexpr int kCaptureSteps = 3;
  virtual ~GraphedStep() = default;
  /// Runs one step, capturing first when there is no graph; returns the
  /// steps executed (1, or kCaptureSteps when it captured).
  virtual int Run() = 0;
  /// Drops the graph, so the next Run() captures again (after the learning
  /// rate changed, say).
  virtual void Invalidate() = 0;
  /// What the captures did, for the cell's record.
  struct Path {
    int captures = 0;             ///< graphs captured
    int memsets_as_kernels = -1;  ///< the last capture's memset nodes rewritten as kernels (-1: not rewritten)
  };
  virtual Path path() const = 0;
};

/// Builds a graphed step around `step`, which reads and writes only tensors
/// whose storage stays put, zeroes gradients in place (not to none) and never
/// makes the host wait on the device. Throws when this worker has no CUDA.
/// `pixels_per_step` (images x height x width a step) decides whether the
/// captured graph's memsets become kernels (GraphFillWanted): for steps long
/// enough that it pays. `dump`: empty, or a prefix for each captured graph
/// as Graphviz (PREFIX-N.dot).
std::unique_ptr<GraphedStep> MakeGraphedStep(std::function<void()> step, int64_t pixels_per_step = 0,
                                             const std::string& dump = "");

/// Whether a captured step's memset nodes should become kernel nodes before
/// the graph is instantiated (step_timer.cc says why): `setting` is
/// TRAINBENCH_GRAPH_FILL's value (a test hook; null when unset), "1" yes,
/// "0" no, and otherwise yes where the step trains on at least 512 x 32 x 32
/// image pixels. Whether this worker can (CUDA, the fill kernel built, a LibTorch
/// that keeps its graphs) is another matter.
bool GraphFillWanted(const char* setting, int64_t pixels_per_step);

/// Whether this worker was built with CUDA support.
bool WorkerHasCuda();

}  // namespace trainbench::worker

#pragma once
// Timing training steps without stalling the device: on a GPU each step's end
// is a recorded CUDA event and the host only waits when it collects; on a CPU
// it is the host clock (the work is synchronous anyway).

#include <c10/core/Device.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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
  /// The steps the next Run() executes: kCaptureSteps before a capture, 1
  /// once a graph is held.
  virtual int NextRunSteps() const = 0;
  /// Drops the graph, so the next Run() captures again (after the learning
  /// rate changed, say).
  virtual void Invalidate() = 0;
  /// What the captures did, for the cell's record.
  struct Path {
    int captures = 0;                 ///< graphs captured
    int64_t replays = 0;              ///< steps run as a replay of a captured graph
    int memsets_as_kernels = -1;      ///< the last capture's memset nodes rewritten as kernels (-1: not rewritten)
    bool cross_stream_reuse = false;  ///< memory used on two streams was reusable within the capture (step_timer.cc)
  };
  virtual Path path() const = 0;
};

/// Builds a graphed step around `step`, which reads and writes only tensors
/// whose storage stays put, zeroes gradients in place (not to none) and never
/// makes the host wait on the device. Throws when this worker has no CUDA.
/// `pixels_per_step` (images x height x width a step) decides whether the
/// captured graph's memsets become kernels (GraphFillWanted): for steps long
/// enough that it pays, unless `fill` forces it on or off. `dump`: empty, or a prefix for each captured graph
/// as Graphviz (PREFIX-N.dot).
std::unique_ptr<GraphedStep> MakeGraphedStep(std::function<void()> step, int64_t pixels_per_step = 0,
                                             const std::string& dump = "", std::optional<bool> fill = std::nullopt);

/// Whether a captured step's memset nodes should become kernel nodes before
/// the graph is instantiated (step_timer.cc says why): as `forced` where it
/// is set (the device's graph_fill option, always or never), otherwise
/// where the step trains on at least 512 x 32 x 32 image pixels. Whether
/// this worker can (CUDA, the fill kernel built, a LibTorch that keeps its
/// graphs) is another matter.
bool GraphFillWanted(std::optional<bool> forced, int64_t pixels_per_step);

/// A device's graph_fill option (`auto`, `always`, `never`; a device that
/// captures steps may declare it, as the cuda device does): forced on or
/// off, or none for the worker's rule. Absent or any other value: none.
std::optional<bool> GraphFillOption(const nlohmann::json& device_options);

/// Whether this worker was built with CUDA support.
bool WorkerHasCuda();

}  // namespace trainbench::worker

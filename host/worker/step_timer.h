#pragma once
// Timing training steps without stalling the device: on a GPU each step's end
// is a recorded CUDA event and the host only waits when it collects; on a CPU
// it is the host clock (the work is synchronous anyway).

#include <functional>
#include <memory>
#include <vector>

#include <c10/core/Device.h>
#include <torch/types.h>

#include "trainbench/sdk/device.h"

namespace trainbench::worker {

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  /// Starts timing: the next Mark() ends the first step.
  virtual void Begin() = 0;
  /// Marks the end of one step (queued work included).
  virtual void Mark() = 0;
  /// Waits for the marked work and returns the seconds of each step marked
  /// since the last call, in order.
  virtual std::vector<double> Collect() = 0;
};

/// The timer for `settings.device`; `device` synchronises for the CPU timer.
std::unique_ptr<StepTimer> MakeStepTimer(const sdk::DeviceSettings& settings, sdk::Device& device);

/// A training step captured once in a CUDA graph and replayed.
class GraphedStep {
 public:
  virtual ~GraphedStep() = default;
  /// Copies the batch into the graph's static inputs and replays the step;
  /// returns the step's loss (a tensor the graph rewrites each replay).
  virtual torch::Tensor Run(const torch::Tensor& x, const torch::Tensor& y) = 0;
  /// Drops the captured graph, so the next Run() captures again (after the
  /// learning rate changed, say).
  virtual void Invalidate() = 0;
};

/// Builds a graphed step around `step(x, y) -> loss` for fixed-shape batches.
/// `step` must zero gradients in place (not to none) and must not make the
/// host wait on the device. Throws when this worker has no CUDA.
std::unique_ptr<GraphedStep> MakeGraphedStep(
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> step);

/// Whether this worker was built with CUDA support.
bool WorkerHasCuda();

}  // namespace trainbench::worker

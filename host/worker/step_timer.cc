#include "step_timer.h"

#include <chrono>
#include <deque>
#include <stdexcept>

#ifdef TRAINBENCH_WORKER_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace trainbench::worker {
namespace {

class HostClockTimer : public StepTimer {
 public:
  explicit HostClockTimer(sdk::Device& device) : device_(device) {}
  void Begin() override {
    (void)device_.Synchronize();
    last_ = Clock::now();
  }
  void Mark() override {
    (void)device_.Synchronize();
    const auto now = Clock::now();
    pending_.push_back(std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }
  std::vector<double> Collect() override {
    std::vector<double> out;
    out.swap(pending_);
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  sdk::Device& device_;
  Clock::time_point last_;
  std::vector<double> pending_;
};

#ifdef TRAINBENCH_WORKER_CUDA
class CudaEventTimer : public StepTimer {
 public:
  void Begin() override {
    marks_.clear();
    marks_.emplace_back(cudaEventDefault);
    marks_.back().record();
  }
  void Mark() override {
    if (!spare_.empty()) {
      marks_.push_back(std::move(spare_.back()));
      spare_.pop_back();
    } else {
      marks_.emplace_back(cudaEventDefault);
    }
    marks_.back().record();
  }
  std::vector<double> Collect() override {
    std::vector<double> out;
    if (marks_.size() < 2) return out;
    marks_.back().synchronize();
    for (size_t i = 1; i < marks_.size(); ++i) {
      out.push_back(static_cast<double>(marks_[i - 1].elapsed_time(marks_[i])) / 1000.0);
    }
    // Keep the last mark as the start of the next step; recycle the rest.
    while (marks_.size() > 1) {
      spare_.push_back(std::move(marks_.front()));
      marks_.pop_front();
    }
    return out;
  }

 private:
  std::deque<at::cuda::CUDAEvent> marks_;
  std::vector<at::cuda::CUDAEvent> spare_;
};

class CudaGraphedStep : public GraphedStep {
 public:
  explicit CudaGraphedStep(std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> step)
      : step_(std::move(step)) {}

  torch::Tensor Run(const torch::Tensor& x, const torch::Tensor& y) override {
    if (!graph_) Capture(x, y);
    static_x_.copy_(x);
    static_y_.copy_(y);
    graph_->replay();
    return loss_;
  }

  void Invalidate() override { graph_.reset(); }

 private:
  void Capture(const torch::Tensor& x, const torch::Tensor& y) {
    static_x_ = x.clone();
    static_y_ = y.clone();
    // As torch.cuda.graph does: warm up on a side stream (so lazily created
    // gradients, optimizer state and library workspaces exist before the
    // capture), then capture there. The warm-up steps are real training steps
    // on this batch.
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    cudaDeviceSynchronize();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (int i = 0; i < 2; ++i) loss_ = step_(static_x_, static_y_);
      side.synchronize();
      graph_ = std::make_unique<at::cuda::CUDAGraph>();
      graph_->capture_begin();
      loss_ = step_(static_x_, static_y_);
      graph_->capture_end();
    }
    cudaDeviceSynchronize();
  }

  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> step_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  torch::Tensor static_x_, static_y_, loss_;
};
#endif

}  // namespace

bool WorkerHasCuda() {
#ifdef TRAINBENCH_WORKER_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<StepTimer> MakeStepTimer(const sdk::DeviceSettings& settings, sdk::Device& device) {
#ifdef TRAINBENCH_WORKER_CUDA
  if (settings.device.is_cuda()) return std::make_unique<CudaEventTimer>();
#endif
  (void)settings;
  return std::make_unique<HostClockTimer>(device);
}

std::unique_ptr<GraphedStep> MakeGraphedStep(
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> step) {
#ifdef TRAINBENCH_WORKER_CUDA
  return std::make_unique<CudaGraphedStep>(std::move(step));
#else
  (void)step;
  throw std::runtime_error("cuda_graph needs a worker built with CUDA");
#endif
}

}  // namespace trainbench::worker

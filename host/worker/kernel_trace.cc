#include "kernel_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>

#ifdef TRAINBENCH_WORKER_CUDA
#include <cuda_runtime_api.h>
#endif

namespace trainbench::worker {
namespace {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

class KinetoTrace : public KernelTrace {
 public:
  KinetoTrace(std::string path, int64_t steps, bool cuda) : path_(std::move(path)), steps_(steps), cuda_(cuda) {}

  // A cell that ends (or fails) before the last recorded step still writes
  // what was recorded.
  ~KinetoTrace() override { Interrupt(); }

  void AfterTimedStep() override {
    if (done_) return;
    // A trace is a diagnostic: one that cannot be recorded (a LibTorch
    // without Kineto, say) is a line in the cell's log, not a failed cell.
    try {
      if (!recording_) {
        // The steps before this one (their kernels) stay out of the trace.
        Synchronize();
        const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
        const std::set<impl::ActivityType> activities{cuda_ ? impl::ActivityType::CUDA : impl::ActivityType::CPU};
        profiler::prepareProfiler(config, activities);
        profiler::enableProfiler(config, activities);
        recording_ = true;
        return;
      }
      if (++recorded_ == steps_) Stop();
    } catch (const std::exception& e) {
      Failed(e);
    }
  }

  void Interrupt() noexcept override {
    if (!recording_) return;
    try {
      Stop();
    } catch (const std::exception& e) {
      Failed(e);
    } catch (...) {
      done_ = true;
      recording_ = false;
    }
  }

 private:
  void Failed(const std::exception& e) {
    done_ = true;
    recording_ = false;
    const std::string what = e.what();
    std::fprintf(stderr, "kernel trace: not written to %s: %s\n", path_.c_str(),
                 what.substr(0, what.find('\n')).c_str());
  }
  void Synchronize() const {
#ifdef TRAINBENCH_WORKER_CUDA
    if (cuda_) cudaDeviceSynchronize();
#endif
  }
  void Stop() {
    Synchronize();
    recording_ = false;
    done_ = true;
    auto result = profiler::disableProfiler();
    result->save(path_);
    std::fprintf(stderr, "kernel trace: %lld timed steps written to %s\n", static_cast<long long>(recorded_),
                 path_.c_str());
  }

  std::string path_;
  int64_t steps_;
  bool cuda_;
  bool recording_ = false, done_ = false;
  int64_t recorded_ = 0;
};

}  // namespace

std::unique_ptr<KernelTrace> MakeKernelTrace(const c10::Device& device, const std::string& path, int64_t steps) {
  if (steps < 1 || steps > KernelTrace::kMaxSteps)
    throw std::runtime_error("kernel trace: " + std::to_string(steps) + " steps: give a whole number from 1 to " +
                             std::to_string(KernelTrace::kMaxSteps));
  bool cuda = false;
#ifdef TRAINBENCH_WORKER_CUDA
  cuda = device.is_cuda();
#else
  if (device.is_cuda()) throw std::runtime_error("a kernel trace on CUDA needs a worker built with CUDA");
#endif
  return std::make_unique<KinetoTrace>(path, steps, cuda);
}

}  // namespace trainbench::worker

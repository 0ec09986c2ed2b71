#include "side_stream.h"

#include <cstdlib>
#include <string>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainbench::plugins {

#ifdef TRAINBENCH_RESNET_KERNELS

namespace {
// Read at every call: tests and benches set it.
bool TurnedOff(Fork fork) {
  const char* value = std::getenv("TRAINBENCH_SIDE_STREAMS");
  if (value == nullptr) return false;
  const std::string setting(value);
  return setting == "0" || (setting == "grads" && fork != Fork::kGradients);
}
}  // namespace

bool SideStreamsApply(const c10::Device& device, Fork fork) {
  if (!device.is_cuda() || TurnedOff(fork)) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device.index()).stream(), &status));
  return status == cudaStreamCaptureStatusActive;
}

struct SideStream::Streams {
  explicit Streams(c10::DeviceIndex device)
      : here(c10::cuda::getCurrentCUDAStream(device)), side(c10::cuda::getStreamFromPool(false, device)) {}
  c10::cuda::CUDAStream here, side;
  at::cuda::CUDAEvent forked, joined;  // without timing
  bool open = true;
};

SideStream::SideStream(const c10::Device& device) : streams_(std::make_unique<Streams>(device.index())) {
  streams_->forked.record(streams_->here);
  streams_->forked.block(streams_->side);
}

SideStream::~SideStream() {
  // A capture left with a branch unjoined fails at its end; join instead.
  if (streams_->open) {
    try {
      Join();
    } catch (...) {
    }
  }
}

void SideStream::Run(const std::function<void()>& work) {
  TORCH_CHECK(streams_->open, "SideStream: Run after Join");
  const c10::cuda::CUDAStreamGuard guard(streams_->side);
  work();
}

void SideStream::Join() {
  if (!streams_->open) return;
  streams_->open = false;
  streams_->joined.record(streams_->side);
  streams_->joined.block(streams_->here);
}

void SideStream::HandOver(const torch::Tensor& tensor) {
  if (tensor.defined()) tensor.record_stream(streams_->here.unwrap());
}

#else

bool SideStreamsApply(const c10::Device&, Fork) { return false; }
struct SideStream::Streams {};
SideStream::SideStream(const c10::Device&) { TORCH_CHECK(false, "this build of trainbench has no CUDA side streams"); }
SideStream::~SideStream() = default;
void SideStream::Run(const std::function<void()>&) {}
void SideStream::Join() {}
void SideStream::HandOver(const torch::Tensor&) {}

#endif

}  // namespace trainbench::plugins

#include "side_stream.h"

#include <iterator>
#include <map>
#include <mutex>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#endif

namespace trainbench::plugins {

#ifdef TRAINBENCH_RESNET_KERNELS

namespace {
// The capture `stream` belongs to (0: none).
unsigned long long CaptureOf(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream.stream(), &status, &id));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

// Each device's side streams left running (SideStream::Leave), until JoinLeft,
// with the capture they were left in: one that ended without joining them
// (an error) leaves nothing a later capture would wait for.
struct Left {
  unsigned long long capture;
  int64_t group;
  std::unique_ptr<at::cuda::CUDAEvent> done;
};
std::mutex left_mutex;
std::map<c10::DeviceIndex, std::vector<Left>> left;

struct JoinGate : public torch::autograd::Function<JoinGate> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList tensors,
                                                int64_t group) {
    ctx->saved_data["device"] = static_cast<int64_t>(tensors[0].device().index());
    ctx->saved_data["group"] = group;
    ctx->set_materialize_grads(false);
    return tensors.vec();  // autograd returns them as views with this node's gradient edge
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    JoinLeft(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(ctx->saved_data["device"].toInt())),
             ctx->saved_data["group"].toInt());
    grads.emplace_back();  // the group's
    return grads;
  }
};
}  // namespace

bool SideStreamsApply(const c10::Device& device) {
  if (!device.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device.index()).stream(), &status));
  return status == cudaStreamCaptureStatusActive;
}

struct SideStream::Streams {
  // LibTorch's high-priority pool has priorities below 0, the default pool 0.
  explicit Streams(c10::DeviceIndex device)
      : here(c10::cuda::getCurrentCUDAStream(device)),
        side(c10::cuda::getStreamFromPool(here.priority() < 0, device)) {}
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

void SideStream::Leave(const std::vector<torch::Tensor>& read, int64_t group) {
  TORCH_CHECK(streams_->open, "SideStream: Leave after Join");
  streams_->open = false;
  for (const torch::Tensor& t : read)
    if (t.defined()) t.record_stream(streams_->side.unwrap());
  Left done{CaptureOf(streams_->here), group, std::make_unique<at::cuda::CUDAEvent>()};
  done.done->record(streams_->side);
  const std::lock_guard<std::mutex> lock(left_mutex);
  left[streams_->here.device_index()].push_back(std::move(done));
}

void SideStream::AfterLeft(int64_t group) {
  TORCH_CHECK(streams_->open, "SideStream: AfterLeft after Join");
  const unsigned long long capture = CaptureOf(streams_->here);
  const std::lock_guard<std::mutex> lock(left_mutex);
  const auto it = left.find(streams_->here.device_index());
  if (it == left.end()) return;
  for (const Left& l : it->second)
    if (l.group == group && l.capture == capture) l.done->block(streams_->side);
}

void JoinLeft(const c10::Device& device, int64_t group) {
  std::vector<Left> events;
  {
    const std::lock_guard<std::mutex> lock(left_mutex);
    const auto it = left.find(device.index());
    if (it == left.end()) return;
    auto& all = it->second;
    const auto others = std::stable_partition(all.begin(), all.end(), [&](const Left& l) { return l.group != group; });
    std::move(others, all.end(), std::back_inserter(events));
    all.erase(others, all.end());
  }
  const c10::cuda::CUDAStream here = c10::cuda::getCurrentCUDAStream(device.index());
  const unsigned long long capture = CaptureOf(here);
  for (const Left& event : events)
    if (event.capture == capture) event.done->block(here);
}

std::vector<torch::Tensor> JoinBeforeGradients(const std::vector<torch::Tensor>& tensors, int64_t group) {
  if (tensors.empty()) return tensors;
  for (const torch::Tensor& t : tensors)
    TORCH_CHECK(t.defined() && t.is_cuda() && t.device() == tensors[0].device(),
                "JoinBeforeGradients: every tensor on one CUDA device");
  return JoinGate::apply(at::TensorList(tensors), group);
}

#else

bool SideStreamsApply(const c10::Device&) { return false; }
struct SideStream::Streams {};
SideStream::SideStream(const c10::Device&) { TORCH_CHECK(false, "this build of trainbench has no CUDA side streams"); }
SideStream::~SideStream() = default;
void SideStream::Run(const std::function<void()>&) {}
void SideStream::Join() {}
void SideStream::HandOver(const torch::Tensor&) {}
void SideStream::Leave(const std::vector<torch::Tensor>&, int64_t) {}
void SideStream::AfterLeft(int64_t) {}
void JoinLeft(const c10::Device&, int64_t) {}
std::vector<torch::Tensor> JoinBeforeGradients(const std::vector<torch::Tensor>& tensors, int64_t) { return tensors; }

#endif

}  // namespace trainbench::plugins

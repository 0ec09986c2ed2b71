#include "fused_sgd.h"

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "kernel_dtype.h"
#include "side_stream.h"
#include "tensor_alias.h"
#include "weight_cast_kernels.h"
#endif

namespace resnet {

struct SgdWeights::State {
  struct Group {
    std::vector<torch::Tensor> weights, momentum, copies;
    std::vector<int64_t> versions;  // each weight's version when its copy was made
  };
  trainbench::sdk::SgdSettings sgd;
  c10::Device device{c10::kCPU};
  std::vector<Group> groups;
  std::optional<at::ScalarType> copy_type;  // of every group's copies, once made
  std::mutex mutex;                         // the backward's nodes run on autograd's device thread
  int pending = 0;                          // nodes of this forward whose backward has not run

  // Group g's update from the gradients of the weights this forward handed
  // out in `grad_type` (the copies' type, or fp32 for the weights); the
  // copies, where the group has them, are written either way.
  void Update(size_t g, const std::vector<torch::Tensor>& grads, at::ScalarType grad_type);
};

bool FusedSgdBuilt() {
#ifdef TRAINBENCH_RESNET_KERNELS
  return true;
#else
  return false;
#endif
}

#ifdef TRAINBENCH_RESNET_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The side streams of the updates are joined under this group
// (side_stream.h), apart from the late joins' (one per stage index).
constexpr int64_t kJoinGroup = int64_t{1} << 40;

// The state as a node keeps it: a backward that runs after the model was
// destroyed still updates live tensors.
struct StateRef : torch::CustomClassHolder {
  explicit StateRef(std::shared_ptr<SgdWeights::State> s) : state(std::move(s)) {}
  std::shared_ptr<SgdWeights::State> state;
};

// One group's weights for the convolutions: forward hands out the copies
// (or the weights) under this node, whose backward is the group's update.
struct UpdateNode : public torch::autograd::Function<UpdateNode> {
  // `copies`: whether the convolutions read the group's copies.
  static variable_list forward(AutogradContext* ctx, at::TensorList weights,
                               const std::shared_ptr<SgdWeights::State>& state, int64_t group, bool copies) {
    const SgdWeights::State::Group& kept = state->groups[static_cast<size_t>(group)];
    variable_list out;
    for (size_t i = 0; i < weights.size(); ++i) out.push_back(Alias(copies ? kept.copies[i] : weights[i]));
    ctx->saved_data["state"] = c10::IValue::make_capsule(c10::make_intrusive<StateRef>(state));
    ctx->saved_data["group"] = group;
    ctx->saved_data["type"] = static_cast<int64_t>(copies ? *state->copy_type : at::kFloat);
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto ref = c10::static_intrusive_pointer_cast<StateRef>(ctx->saved_data["state"].toCapsule());
    const auto group = static_cast<size_t>(ctx->saved_data["group"].toInt());
    ref->state->Update(group, grads, static_cast<at::ScalarType>(ctx->saved_data["type"].toInt()));
    return variable_list(grads.size() + 3);  // none for the weights, the state, the group or `copies`
  }
};

}  // namespace

void SgdWeights::State::Update(size_t g, const std::vector<torch::Tensor>& grads, at::ScalarType grad_type) {
  const Group& group = groups[g];
  const c10::cuda::CUDAGuard guard(device);
  const bool copies = !group.copies.empty();
  std::vector<kernels::SgdJob> jobs;
  std::vector<torch::Tensor> read;
  for (size_t i = 0; i < grads.size() && i < group.weights.size(); ++i) {
    if (!grads[i].defined()) continue;  // no gradient, no update (torch.optim.SGD's rule)
    const torch::Tensor& w = group.weights[i];
    torch::Tensor grad = grads[i];
    // In the weight's memory order (what the convolutions' backward writes).
    if (grad.scalar_type() != grad_type || grad.device() != w.device() || grad.strides() != w.strides() ||
        !grad.is_non_overlapping_and_dense())
      grad = torch::empty_strided(w.sizes(), w.strides(), w.options().dtype(grad_type)).copy_(grads[i]);
    read.push_back(grad);
    jobs.push_back({w.data_ptr<float>(), sgd.momentum != 0 ? group.momentum[i].data_ptr<float>() : nullptr,
                    grad.data_ptr(), copies ? group.copies[i].data_ptr() : nullptr, w.numel()});
  }
  if (!jobs.empty()) {
    const kernels::SgdArgs args{sgd.lr, sgd.momentum, sgd.weight_decay, sgd.nesterov};
    const kernels::DType copy = copies ? kernels::DTypeOf(*copy_type) : kernels::DType::kFloat;
    auto launch = [&] {
      C10_CUDA_CHECK(kernels::SgdTensors(jobs.data(), static_cast<int>(jobs.size()), kernels::DTypeOf(grad_type), copy,
                                         args, c10::cuda::getCurrentCUDAStream(device.index())));
    };
    if (trainbench::plugins::SideStreamsApply(device)) {
      // Below a step on a high-priority stream: the update fills the
      // multiprocessors the backward leaves.
      trainbench::plugins::SideStream side(device, trainbench::plugins::SidePriority::kDefault);
      side.Run(launch);
      side.Leave(read, kJoinGroup);
    } else {
      launch();
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  // The backward's last update: the current stream waits for all of them.
  if (pending > 0 && --pending == 0) trainbench::plugins::JoinLeft(device, kJoinGroup);
}
#else
void SgdWeights::State::Update(size_t, const std::vector<torch::Tensor>&, at::ScalarType) {}
#endif

SgdWeights::SgdWeights(const trainbench::sdk::SgdSettings& sgd, std::vector<std::vector<torch::Tensor>> groups)
    : state_(std::make_shared<State>()) {
  if (!FusedSgdBuilt()) throw std::invalid_argument("this build has no CUDA kernels for SGD updates");
  state_->sgd = sgd;
  torch::NoGradGuard no_grad;
  for (auto& weights : groups) {
    State::Group group;
    for (torch::Tensor& w : weights) {
      if (!w.defined() || !w.is_cuda() || w.scalar_type() != at::kFloat || !w.is_non_overlapping_and_dense())
        throw std::invalid_argument("SGD updates need dense fp32 weights on a CUDA device");
      if (state_->groups.empty() && group.weights.empty()) state_->device = w.device();
      if (w.device() != state_->device) throw std::invalid_argument("SGD updates need every weight on one device");
      if (sgd.momentum != 0) group.momentum.push_back(torch::zeros_like(w));
      group.weights.push_back(std::move(w));
    }
    state_->groups.push_back(std::move(group));
  }
}

SgdWeights::~SgdWeights() = default;

void SgdWeights::SetLearningRate(double lr) { state_->sgd.lr = lr; }

void SgdWeights::BeginForward() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->pending = 0;
}

std::vector<torch::Tensor> SgdWeights::Weights(size_t g, std::optional<at::ScalarType> cast) {
  State::Group& group = state_->groups.at(g);
  if (group.weights.empty()) return {};
#ifdef TRAINBENCH_RESNET_KERNELS
  const c10::cuda::CUDAGuard guard(state_->device);
  for (const torch::Tensor& w : group.weights) {
    // Moved or converted since taken: the buffers no longer match.
    TORCH_CHECK(w.is_cuda() && w.device() == state_->device && w.scalar_type() == at::kFloat &&
                    w.is_non_overlapping_and_dense(),
                "SGD updates: a weight the model took changed device, type or layout; take the updates again");
  }
  if (cast && cast != state_->copy_type) {
    // Another type: every group's copies are made again (the updates keep
    // the copies current once made, with or without autocast).
    for (State::Group& each : state_->groups) {
      each.copies.clear();
      each.versions.clear();
    }
    state_->copy_type = cast;
  }
  if (cast) {
    std::vector<kernels::CastJob> stale;
    if (group.copies.empty()) {
      for (const torch::Tensor& w : group.weights) {
        group.copies.push_back(torch::empty_strided(w.sizes(), w.strides(), w.options().dtype(*cast)));
        group.versions.push_back(-1);
      }
    }
    for (size_t i = 0; i < group.weights.size(); ++i) {
      const int64_t version = static_cast<int64_t>(group.weights[i]._version());
      if (group.versions[i] == version) continue;
      stale.push_back({group.weights[i].data_ptr(), group.copies[i].data_ptr(), group.weights[i].numel()});
      group.versions[i] = version;
    }
    if (!stale.empty())
      C10_CUDA_CHECK(kernels::CastTensors(stale.data(), static_cast<int>(stale.size()), kernels::DType::kFloat,
                                          kernels::DTypeOf(*cast), c10::cuda::getCurrentCUDAStream()));
  }
  if (!torch::GradMode::is_enabled()) return cast ? group.copies : group.weights;
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->pending;
  }
  return UpdateNode::apply(at::TensorList(group.weights), state_, static_cast<int64_t>(g), cast.has_value());
#else
  (void)cast;
  return group.weights;
#endif
}

std::vector<torch::Tensor> SgdWeights::All() const {
  std::vector<torch::Tensor> all;
  for (const State::Group& group : state_->groups) all.insert(all.end(), group.weights.begin(), group.weights.end());
  return all;
}

}  // namespace resnet

#include "mixed_precision.h"

#include <torch/autograd.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "mixed_precision_kernels.h"
#include "stream_capture.h"
#endif

namespace trainbench::worker {

struct MixedPrecision::State {
  struct Group {
    std::vector<torch::Tensor> params, momentum, copies;
    std::vector<int64_t> versions;  // each parameter's version when its copy was made
  };
  std::shared_ptr<const SgdArithmetic> sgd;  // the optimizer's; null: the groups are cast only
  c10::Device device{c10::kCPU};
  std::vector<Group> groups;
  std::optional<at::ScalarType> copy_type;  // of every group's copies, once made
  std::mutex mutex;                         // the backward's nodes run on autograd's device thread
  int pending = 0;                          // update nodes of this forward whose backward has not run
#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> beside;  // updates left running on side streams
#endif

  // Group g's update from the gradients of the tensors this forward handed
  // out in `grad_type` (the copies' type, or fp32 for the parameters); the
  // copies, where the group has them, are written either way.
  void Update(size_t g, const std::vector<torch::Tensor>& grads, at::ScalarType grad_type);
};

#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::DType DTypeOf(at::ScalarType type) {
  return type == at::kFloat      ? kernels::DType::kFloat
         : type == at::kBFloat16 ? kernels::DType::kBFloat16
                                 : kernels::DType::kHalf;
}

// A new tensor on `t`'s memory, not a view: autograd treats it as a tensor of
// its own (a kept copy handed to this step's graph without the last's history).
torch::Tensor Alias(const torch::Tensor& t) {
  return torch::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

void Cast(const std::vector<kernels::CastJob>& jobs, at::ScalarType from, at::ScalarType to) {
  C10_CUDA_CHECK(kernels::CastTensors(jobs.data(), static_cast<int>(jobs.size()), DTypeOf(from), DTypeOf(to),
                                      c10::cuda::getCurrentCUDAStream()));
}

// A group's copies in `type`, made where there are none, cast again (one
// kernel for them all) where their parameter changed since.
void RefreshCopies(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& copies,
                   std::vector<int64_t>& versions, at::ScalarType type) {
  if (copies.empty()) {
    for (const torch::Tensor& p : params) {
      copies.push_back(torch::empty_strided(p.sizes(), p.strides(), p.options().dtype(type)));
      versions.push_back(-1);
    }
  }
  std::vector<kernels::CastJob> stale;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto version = static_cast<int64_t>(params[i]._version());
    if (versions[i] == version) continue;
    stale.push_back({params[i].data_ptr(), copies[i].data_ptr(), params[i].numel()});
    versions[i] = version;
  }
  if (!stale.empty()) Cast(stale, at::kFloat, type);
}

bool CastApplies(const std::vector<torch::Tensor>& params, at::ScalarType type) {
  if (params.empty() || (type != at::kBFloat16 && type != at::kHalf)) return false;
  for (const torch::Tensor& p : params) {
    if (!p.defined() || !p.is_cuda() || p.device() != params[0].device() || p.scalar_type() != at::kFloat ||
        !p.is_non_overlapping_and_dense())
      return false;
  }
  return true;
}

// A group cast for one forward: one kernel for every parameter, one for
// every gradient back to fp32 (in the parameter's strides).
struct CastAll : public torch::autograd::Function<CastAll> {
  static variable_list forward(AutogradContext* ctx, at::TensorList params, int64_t type) {
    const c10::cuda::CUDAGuard guard(params[0].device());
    const auto to = static_cast<at::ScalarType>(type);
    variable_list out;
    std::vector<kernels::CastJob> jobs;
    for (const torch::Tensor& p : params) {
      out.push_back(torch::empty_strided(p.sizes(), p.strides(), p.options().dtype(to)));
      jobs.push_back({p.data_ptr(), out.back().data_ptr(), p.numel()});
    }
    Cast(jobs, at::kFloat, to);
    // The parameters themselves (references, not copies): the backward's
    // gradients take their sizes, strides and device. An output nobody used
    // gets no gradient (not a zero one), as with LibTorch's cast.
    ctx->save_for_backward(params.vec());
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list params = ctx->get_saved_variables();
    variable_list result(params.size() + 1);  // and none for `type`
    const c10::cuda::CUDAGuard guard(params[0].device());
    std::vector<kernels::CastJob> jobs;
    at::ScalarType from = at::kFloat;
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& g = grads[i];
      if (!g.defined()) continue;
      const torch::Tensor& p = params[i];
      torch::Tensor dp = torch::empty_strided(p.sizes(), p.strides(), p.options());
      // In memory order where the gradient has the parameter's strides (what
      // a convolution's backward writes); else LibTorch's copy.
      if (g.device() == p.device() && g.strides() == p.strides() && g.is_non_overlapping_and_dense() &&
          (jobs.empty() || g.scalar_type() == from) &&
          (g.scalar_type() == at::kBFloat16 || g.scalar_type() == at::kHalf)) {
        from = g.scalar_type();
        jobs.push_back({g.data_ptr(), dp.data_ptr(), g.numel()});
      } else {
        dp.copy_(g);
      }
      result[i] = dp;
    }
    if (!jobs.empty()) Cast(jobs, from, at::kFloat);
    return result;
  }
};

// The state as a node keeps it: a backward that runs after the object was
// destroyed still updates live tensors.
struct StateRef : torch::CustomClassHolder {
  explicit StateRef(std::shared_ptr<MixedPrecision::State> s) : state(std::move(s)) {}
  std::shared_ptr<MixedPrecision::State> state;
};

// One group's tensors for a forward in SGD's way: the copies (or the
// parameters) under this node, whose backward is the group's update.
struct UpdateNode : public torch::autograd::Function<UpdateNode> {
  // `copies`: whether the forward reads the group's copies.
  static variable_list forward(AutogradContext* ctx, at::TensorList params,
                               const std::shared_ptr<MixedPrecision::State>& state, int64_t group, bool copies) {
    const MixedPrecision::State::Group& kept = state->groups[static_cast<size_t>(group)];
    variable_list out;
    for (size_t i = 0; i < params.size(); ++i) out.push_back(Alias(copies ? kept.copies[i] : params[i]));
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
    return variable_list(grads.size() + 3);  // none for the parameters, the state, the group or `copies`
  }
};

}  // namespace

void MixedPrecision::State::Update(size_t g, const std::vector<torch::Tensor>& grads, at::ScalarType grad_type) {
  const Group& group = groups[g];
  const c10::cuda::CUDAGuard guard(device);
  const bool with_copies = !group.copies.empty();
  std::vector<kernels::SgdJob> jobs;
  std::vector<torch::Tensor> read;
  for (size_t i = 0; i < grads.size() && i < group.params.size(); ++i) {
    if (!grads[i].defined()) continue;  // no gradient, no update (torch.optim.SGD's rule)
    const torch::Tensor& p = group.params[i];
    torch::Tensor grad = grads[i];
    // In the parameter's memory order (what a convolution's backward writes).
    if (grad.scalar_type() != grad_type || grad.device() != p.device() || grad.strides() != p.strides() ||
        !grad.is_non_overlapping_and_dense())
      grad = torch::empty_strided(p.sizes(), p.strides(), p.options().dtype(grad_type)).copy_(grads[i]);
    read.push_back(grad);
    jobs.push_back({p.data_ptr<float>(), sgd->momentum != 0 ? group.momentum[i].data_ptr<float>() : nullptr,
                    grad.data_ptr(), with_copies ? group.copies[i].data_ptr() : nullptr, p.numel()});
  }
  const c10::cuda::CUDAStream here = c10::cuda::getCurrentCUDAStream(device.index());
  const std::lock_guard<std::mutex> lock(mutex);
  if (!jobs.empty()) {
    const kernels::SgdArgs args{sgd->lr, sgd->momentum, sgd->weight_decay, sgd->nesterov};
    const kernels::DType copy = with_copies ? DTypeOf(*copy_type) : kernels::DType::kFloat;
    auto launch = [&](const c10::cuda::CUDAStream& stream) {
      C10_CUDA_CHECK(kernels::SgdTensors(jobs.data(), static_cast<int>(jobs.size()), DTypeOf(grad_type), copy, args,
                                         stream.stream()));
    };
    if (Capturing(here)) {
      // Beside the rest of the backward, on a default-priority stream of
      // LibTorch's pool: below a step on a high-priority stream, the update
      // takes the multiprocessors the backward leaves. The gradients' memory
      // goes back to the backward's stream only behind the update.
      const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
      at::cuda::CUDAEvent forked;
      forked.record(here);
      forked.block(side);
      launch(side);
      for (const torch::Tensor& t : read) t.record_stream(side.unwrap());
      beside.push_back(std::make_unique<at::cuda::CUDAEvent>());
      beside.back()->record(side);
    } else {
      launch(here);
    }
  }
  // The backward's last update: its stream waits for every update beside it.
  if (pending > 0 && --pending == 0) {
    for (const auto& done : beside) done->block(here);
    beside.clear();
  }
}

bool MixedPrecision::KernelsBuilt() { return true; }
#else
void MixedPrecision::State::Update(size_t, const std::vector<torch::Tensor>&, at::ScalarType) {}

bool MixedPrecision::KernelsBuilt() { return false; }
#endif

bool MixedPrecision::UpdatesApply(const std::vector<std::vector<torch::Tensor>>& groups) {
  if (!KernelsBuilt()) return false;
  const torch::Tensor* first = nullptr;
  for (const auto& group : groups) {
    for (const torch::Tensor& p : group) {
      if (!p.defined() || !p.is_cuda() || p.scalar_type() != at::kFloat || !p.is_non_overlapping_and_dense())
        return false;
      if (first == nullptr) first = &p;
      if (p.device() != first->device()) return false;
    }
  }
  return first != nullptr;
}

MixedPrecision::MixedPrecision() : state_(std::make_shared<State>()) {}

void MixedPrecision::Adopt(std::vector<std::vector<torch::Tensor>> groups) {
  auto state = std::make_shared<State>();
  for (auto& params : groups) {
    State::Group group;
    group.params = std::move(params);
    state->groups.push_back(std::move(group));
  }
  state_ = std::move(state);
}

bool MixedPrecision::CanUpdate() const {
  std::vector<std::vector<torch::Tensor>> groups;
  for (const State::Group& group : state_->groups) groups.push_back(group.params);
  return UpdatesApply(groups);
}

void MixedPrecision::UpdateWith(std::shared_ptr<const SgdArithmetic> sgd) {
  if (!sgd || !CanUpdate())
    throw std::invalid_argument(
        "SGD updates of working copies need this build's CUDA kernels and dense fp32 parameters on one CUDA device");
  torch::NoGradGuard no_grad;
  for (State::Group& group : state_->groups) {
    group.momentum.clear();
    for (const torch::Tensor& p : group.params) {
      state_->device = p.device();
      if (sgd->momentum != 0) group.momentum.push_back(torch::zeros_like(p));
    }
  }
  state_->sgd = std::move(sgd);
}

MixedPrecision::~MixedPrecision() = default;

bool MixedPrecision::Updates() const { return state_->sgd != nullptr; }

void MixedPrecision::BeginForward() {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->pending = 0;
#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
  state_->beside.clear();  // a backward that never ran (a failed capture) leaves nothing to wait for
#endif
}

std::vector<torch::Tensor> MixedPrecision::Group(size_t g, std::optional<c10::ScalarType> type) {
  if (g >= state_->groups.size())
    throw std::out_of_range("working copies: group " + std::to_string(g) + " of " +
                            std::to_string(state_->groups.size()) + " the model listed");
  State::Group& group = state_->groups[g];
  if (group.params.empty()) return {};
  if (type && *type != at::kBFloat16 && *type != at::kHalf)
    throw std::invalid_argument("working copies are bf16 or half, not " + std::string(c10::toString(*type)));
  if (!state_->sgd) {
    if (!type) return group.params;
#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
    if (CastApplies(group.params, *type))
      return CastAll::apply(at::TensorList(group.params), static_cast<int64_t>(*type));
#endif
    std::vector<torch::Tensor> out;
    out.reserve(group.params.size());
    for (const torch::Tensor& p : group.params) out.push_back(p.to(*type));
    return out;
  }
#ifdef TRAINBENCH_MIXED_PRECISION_KERNELS
  const c10::cuda::CUDAGuard guard(state_->device);
  for (const torch::Tensor& p : group.params) {
    // Moved or converted since: the buffers no longer match.
    TORCH_CHECK(p.is_cuda() && p.device() == state_->device && p.scalar_type() == at::kFloat &&
                    p.is_non_overlapping_and_dense(),
                "working copies: a parameter changed device, type or layout after training began");
  }
  if (type && type != state_->copy_type) {
    // Another type: every group's copies are made again (the updates keep
    // the copies current once made, with or without autocast).
    for (State::Group& each : state_->groups) {
      each.copies.clear();
      each.versions.clear();
    }
    state_->copy_type = type;
  }
  if (type) RefreshCopies(group.params, group.copies, group.versions, *type);
  if (!torch::GradMode::is_enabled()) return type ? group.copies : group.params;
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->pending;
  }
  return UpdateNode::apply(at::TensorList(group.params), state_, static_cast<int64_t>(g), type.has_value());
#else
  return group.params;  // not reached: no SGD updates without the kernels
#endif
}

size_t MixedPrecision::Groups() const { return state_->groups.size(); }

std::vector<torch::Tensor> MixedPrecision::Parameters() const {
  std::vector<torch::Tensor> all;
  for (const State::Group& group : state_->groups) all.insert(all.end(), group.params.begin(), group.params.end());
  return all;
}

}  // namespace trainbench::worker

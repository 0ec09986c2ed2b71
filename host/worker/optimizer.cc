#include "optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>
#include <torch/version.h>

// Updates during the backward need SGD's fused kernel (LibTorch 2.x) and
// CUDA streams.
#if defined(TRAINBENCH_WORKER_CUDA) && TORCH_VERSION_MAJOR >= 2
#define TRAINBENCH_EARLY_UPDATES 1
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "stream_capture.h"
#endif

#include <memory>
#include <mutex>
#include <set>

namespace trainbench::worker {
namespace {

// torch.optim.SGD's multi-tensor algorithm, same arithmetic; its fused
// variant on CUDA with LibTorch 2.x.
//
// With `overlap`, inside a captured step (BeginBackward), the fused updates
// start during the backward: a hook on each parameter notes its gradient's
// arrival (autograd calls it just before storing the gradient, so the
// update waits for a later arrival); once the parameters arrived and not yet
// updated hold kLaunchElements, the next arrival queues their update on a
// side stream behind everything queued so far (the gradients, and every
// kernel of the backward that reads those parameters: autograd stores a
// parameter's gradient only after the last node that contributes to it).
// Step() updates the rest on the current stream and joins the side stream.
// Each parameter's arithmetic is the fused kernel's either way (momentum
// buffers start at zero: momentum * 0 + g is g, as the first step's copy).
// With the ResNets' stage-by-stage weight gradients (resnet.cc, StepWeights)
// the large stages' updates run beside the smaller stages' backward.
//
// With `overlap` and working copies that can (UpdateInBackward), their
// parameters' updates run inside the backward by the copies' kernel, with
// this object's arithmetic and learning rate; the rest stay with Step().
class ForeachSgd : public Optimizer {
 public:
  ForeachSgd(std::vector<torch::Tensor> params, const SgdArithmetic& arithmetic, bool overlap)
      : params_(std::move(params)), sgd_(std::make_shared<SgdArithmetic>(arithmetic)), overlap_(overlap) {
    Watch();
  }
  ~ForeachSgd() override { Unwatch(); }
  ForeachSgd(const ForeachSgd&) = delete;
  ForeachSgd& operator=(const ForeachSgd&) = delete;

  bool BeginBackward() override {
#ifdef TRAINBENCH_EARLY_UPDATES
    if (!early_) return false;
    // In a capture, with the momentum buffers made by an update before it
    // (its pool would hold them). Reset either way: a capture that failed
    // before its Step() leaves nothing for the next step.
    const bool start =
        Capturing(c10::cuda::getCurrentCUDAStream(early_->device)) && (sgd_->momentum == 0 || !buffers_.empty());
    const std::lock_guard<std::mutex> lock(early_->mutex);
    early_->on = start;
    early_->arrived.clear();
    early_->arrived_elements = 0;
    early_->updated.assign(params_.size(), false);
    early_->forked = false;
    return start;
#else
    return false;
#endif
  }

  void Step() override {
    torch::NoGradGuard no_grad;
#ifdef TRAINBENCH_EARLY_UPDATES
    if (early_) {
      const std::lock_guard<std::mutex> lock(early_->mutex);
      if (early_->on) {
        early_->on = false;
        std::vector<size_t> rest;
        for (size_t i = 0; i < params_.size(); ++i)
          if (!early_->updated[i] && params_[i].grad().defined()) rest.push_back(i);
        FusedUpdate(rest);
        // Only a side stream that forked from this capture joins it: one
        // that ran nothing here is not part of the capture, and waiting on
        // it fails the capture (cudaErrorStreamCaptureIsolation; the
        // parameters left to the host may all be below the launch size).
        if (early_->forked) {
          at::cuda::CUDAEvent joined;
          joined.record(early_->side);
          joined.block(c10::cuda::getCurrentCUDAStream(early_->device));
        }
        return;
      }
    }
#endif
    std::vector<size_t> with_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].grad().defined()) with_grad.push_back(i);
    if (with_grad.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
    if (fusable_) {
      FusedUpdate(with_grad);
      return;
    }
#endif
    std::vector<torch::Tensor> params, grads;
    for (const size_t i : with_grad) {
      params.push_back(params_[i]);
      grads.push_back(params_[i].grad());
    }
    const SgdArithmetic& s = *sgd_;
    if (s.weight_decay != 0) grads = at::_foreach_add(grads, params, s.weight_decay);
    if (s.momentum != 0) {
      if (foreach_buffers_.size() != grads.size()) {
        foreach_buffers_.clear();
        for (const auto& g : grads) foreach_buffers_.push_back(g.detach().clone());
      } else {
        at::_foreach_mul_(foreach_buffers_, s.momentum);
        at::_foreach_add_(foreach_buffers_, grads);
      }
      grads = s.nesterov ? at::_foreach_add(grads, foreach_buffers_, s.momentum) : foreach_buffers_;
    }
    at::_foreach_add_(params, grads, -s.lr);
  }

  void SetLearningRate(double lr) override { sgd_->lr = lr; }

  bool UpdateInBackward(MixedPrecision& copies) override {
    if (!overlap_ || !copies.CanUpdate()) return false;
    copies.UpdateWith(sgd_);
    std::set<const void*> taken;
    for (const torch::Tensor& p : copies.Parameters()) taken.insert(p.unsafeGetTensorImpl());
    Unwatch();
    std::vector<torch::Tensor> left;
    for (torch::Tensor& p : params_)
      if (taken.count(p.unsafeGetTensorImpl()) == 0) left.push_back(std::move(p));
    params_ = std::move(left);
    Watch();
    return true;
  }

  int64_t UpdatedDuringBackward() const override {
#ifdef TRAINBENCH_EARLY_UPDATES
    if (early_) {
      const std::lock_guard<std::mutex> lock(early_->mutex);
      return early_->updated_total;
    }
#endif
    return 0;
  }

 private:
  // Hooks on params_ for the updates during a captured backward (`overlap`),
  // where they can run; Unwatch() takes them off.
  void Watch() {
    fusable_ = Fusable(params_);
#ifdef TRAINBENCH_EARLY_UPDATES
    if (overlap_ && !params_.empty() && fusable_) {
      early_ = std::make_unique<Early>(params_[0].device().index(), params_.size());
      for (size_t i = 0; i < params_.size(); ++i) {
        if (!params_[i].requires_grad()) continue;
        hooks_.emplace_back(i, params_[i].register_hook([this, i](const at::TensorBase&) { Arrived(i); }));
      }
    }
#endif
  }
  void Unwatch() {
    for (const auto& [i, hook] : hooks_) params_[i].remove_hook(hook);
    hooks_.clear();
#ifdef TRAINBENCH_EARLY_UPDATES
    early_.reset();
#endif
  }

  // The fused kernel: CUDA, one device and dtype (LibTorch 2.x). Asked once:
  // a parameter keeps its device and dtype for the optimizer's life.
  static bool Fusable(const std::vector<torch::Tensor>& params) {
    for (const auto& p : params) {
      if (!p.is_cuda() || p.device() != params[0].device() || p.scalar_type() != params[0].scalar_type()) return false;
    }
    return true;
  }

  // torch.optim.SGD(fused=True) on params_[which] (each with a gradient), on
  // the current stream: one multi-tensor kernel reads each parameter,
  // gradient and momentum buffer once (the three foreach passes of the
  // other path read and write the buffers twice).
  void FusedUpdate(const std::vector<size_t>& which) {
#if TORCH_VERSION_MAJOR >= 2
    if (which.empty()) return;
    std::vector<torch::Tensor> params, grads, buffers;
    if (buffers_.size() != params_.size()) buffers_.resize(params_.size());
    for (const size_t i : which) {
      params.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      if (sgd_->momentum == 0) continue;
      if (!buffers_[i].defined()) buffers_[i] = torch::zeros_like(params_[i]);
      buffers.push_back(buffers_[i]);
    }
    const SgdArithmetic& s = *sgd_;
    at::_fused_sgd_(params, grads, buffers, s.weight_decay, s.momentum, s.lr, /*dampening=*/0.0, s.nesterov,
                    /*maximize=*/false, /*is_first_step=*/false);
#else
    (void)which;
#endif
  }

#ifdef TRAINBENCH_EARLY_UPDATES
  // Parameters of at least this many elements between launches (4 MiB of
  // float): a few launches per ResNet stage, not one per parameter.
  static constexpr int64_t kLaunchElements = int64_t{1} << 20;

  struct Early {
    Early(c10::DeviceIndex index, size_t params)
        : device(index), side(c10::cuda::getStreamFromPool(false, index)), updated(params, false) {}
    c10::DeviceIndex device;
    c10::cuda::CUDAStream side;
    mutable std::mutex mutex;  // hooks run on autograd's device thread
    bool on = false;
    bool forked = false;          // the side stream joined this capture (LaunchArrived)
    std::vector<size_t> arrived;  // gradients stored, not yet updated
    int64_t arrived_elements = 0;
    std::vector<bool> updated;  // this step
    int64_t updated_total = 0;
  };

  // Autograd's hook on params_[i], just before its gradient is stored.
  void Arrived(size_t i) {
    const std::lock_guard<std::mutex> lock(early_->mutex);
    if (!early_->on) return;
    if (early_->arrived_elements >= kLaunchElements) LaunchArrived();
    early_->arrived.push_back(i);
    early_->arrived_elements += params_[i].numel();
  }

  // The arrived parameters' update on the side stream, behind everything
  // queued on this thread's current stream (autograd's stream for the
  // gradient just arriving); left for Step() where that stream is not the
  // capture's.
  void LaunchArrived() {
    const c10::cuda::CUDAStream here = c10::cuda::getCurrentCUDAStream(early_->device);
    if (!Capturing(here)) return;
    std::vector<size_t> which;
    for (const size_t i : early_->arrived)
      if (params_[i].grad().defined() && !early_->updated[i]) which.push_back(i);
    early_->arrived.clear();
    early_->arrived_elements = 0;
    if (which.empty()) return;
    at::cuda::CUDAEvent ready;
    ready.record(here);
    ready.block(early_->side);
    early_->forked = true;
    {
      const c10::cuda::CUDAStreamGuard guard(early_->side);
      torch::NoGradGuard no_grad;
      FusedUpdate(which);
    }
    for (const size_t i : which) early_->updated[i] = true;
    early_->updated_total += static_cast<int64_t>(which.size());
  }

  std::unique_ptr<Early> early_;
#endif

  std::vector<torch::Tensor> params_;   // but those handed to working copies (UpdateInBackward)
  std::shared_ptr<SgdArithmetic> sgd_;  // shared with the working copies' updates
  bool overlap_;
  bool fusable_ = false;                        // Fusable(params_)
  std::vector<torch::Tensor> buffers_;          // fused: one per parameter (undefined until its first update)
  std::vector<torch::Tensor> foreach_buffers_;  // foreach: one per parameter with a gradient
  std::vector<std::pair<size_t, unsigned>> hooks_;
};

// LibTorch's Adam or AdamW (torch.optim's arithmetic): `Options` is
// AdamOptions or AdamWOptions, `Impl` the optimizer.
template <class Impl, class Options>
class AdamFamily : public Optimizer {
 public:
  AdamFamily(std::vector<torch::Tensor> params, const protocol::OptimizerSettings& o)
      : impl_(std::move(params),
              Options(o.lr).betas(std::make_tuple(o.betas[0], o.betas[1])).eps(o.eps).weight_decay(o.weight_decay)) {}
  void Step() override { impl_.step(); }
  void SetLearningRate(double lr) override {
    for (auto& group : impl_.param_groups()) group.options().set_lr(lr);
  }

 private:
  Impl impl_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const protocol::OptimizerSettings& o, std::vector<torch::Tensor> params) {
  if (o.name == "adam")
    return std::make_unique<AdamFamily<torch::optim::Adam, torch::optim::AdamOptions>>(std::move(params), o);
  if (o.name == "adamw")
    return std::make_unique<AdamFamily<torch::optim::AdamW, torch::optim::AdamWOptions>>(std::move(params), o);
  return std::make_unique<ForeachSgd>(std::move(params), SgdArithmetic{o.lr, o.momentum, o.weight_decay, o.nesterov},
                                      o.overlap);
}

}  // namespace trainbench::worker

#include "optimizer.h"

#include <torch/optim/adam.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace trainbench::worker {
namespace {

// torch.optim.SGD's multi-tensor algorithm, same arithmetic; its fused
// variant on CUDA with LibTorch 2.x.
class ForeachSgd : public Optimizer {
 public:
  ForeachSgd(std::vector<torch::Tensor> params, double lr, double momentum, double weight_decay, bool nesterov)
      : params_(std::move(params)), lr_(lr), momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {}

  void Step() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params, grads;
    for (auto& p : params_) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
    if (Fusable(params)) {
      // torch.optim.SGD(fused=True): one multi-tensor kernel reads each
      // parameter, gradient and momentum buffer once (the three foreach
      // passes below read and write the buffers twice).
      const bool first = momentum_ != 0 && buffers_.size() != params.size();
      if (first) {
        buffers_.clear();
        for (const auto& p : params) buffers_.push_back(torch::empty_like(p));
      }
      at::_fused_sgd_(params, grads, momentum_ != 0 ? buffers_ : std::vector<torch::Tensor>{}, weight_decay_, momentum_,
                      lr_, /*dampening=*/0.0, nesterov_, /*maximize=*/false, /*is_first_step=*/first);
      return;
    }
#endif
    if (weight_decay_ != 0) grads = at::_foreach_add(grads, params, weight_decay_);
    if (momentum_ != 0) {
      if (buffers_.size() != grads.size()) {
        buffers_.clear();
        for (const auto& g : grads) buffers_.push_back(g.detach().clone());
      } else {
        at::_foreach_mul_(buffers_, momentum_);
        at::_foreach_add_(buffers_, grads);
      }
      grads = nesterov_ ? at::_foreach_add(grads, buffers_, momentum_) : buffers_;
    }
    at::_foreach_add_(params, grads, -lr_);
  }

  void SetLearningRate(double lr) override { lr_ = lr; }

 private:
  // The fused kernel: CUDA, one device and dtype (LibTorch 2.x).
  static bool Fusable(const std::vector<torch::Tensor>& params) {
    for (const auto& p : params) {
      if (!p.is_cuda() || p.device() != params[0].device() || p.scalar_type() != params[0].scalar_type()) return false;
    }
    return true;
  }

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  double lr_, momentum_, weight_decay_;
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<torch::Tensor> params, double lr, double weight_decay)
      : adam_(std::move(params), torch::optim::AdamOptions(lr).weight_decay(weight_decay)) {}
  void Step() override { adam_.step(); }
  void SetLearningRate(double lr) override {
    for (auto& group : adam_.param_groups()) group.options().set_lr(lr);
  }

 private:
  torch::optim::Adam adam_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const protocol::OptimizerSettings& o, std::vector<torch::Tensor> params) {
  if (o.name == "adam") return std::make_unique<Adam>(std::move(params), o.lr, o.weight_decay);
  return std::make_unique<ForeachSgd>(std::move(params), o.lr, o.momentum, o.weight_decay, o.nesterov);
}

}  // namespace trainbench::worker

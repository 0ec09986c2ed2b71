#pragma once
/// @file
/// Measuring a model's training FLOPs by counting per layer.
///
/// LibTorch's C++ modules have no forward hooks, so a model that wants its
/// FLOPs measured builds its convolutions and linear layers from the counted
/// layers below (drop-in subclasses of torch::nn::Conv2dImpl / LinearImpl:
/// same parameter names and shapes). MeasureTrainingFlops() runs one forward
/// pass with a counter active; each counted layer adds what it did, from the
/// real tensor shapes, using the conventions of PyTorch's
/// torch.utils.flop_counter: 2 FLOPs per multiply-accumulate of convolutions
/// and matrix products, element-wise work not counted; backward costs one
/// forward for the weight gradient plus one more when the layer's input needs
/// a gradient (not so for the first layer).

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <exception>

#include "trainbench/sdk/status.h"

namespace trainbench::sdk {

/// Accumulates FLOPs while active on the current thread.
struct FlopCounter {
  int64_t forward = 0;   ///< forward-pass FLOPs
  int64_t training = 0;  ///< forward + backward FLOPs
};

namespace detail {
inline FlopCounter*& ActiveFlopCounter() {
  static thread_local FlopCounter* counter = nullptr;
  return counter;
}
inline void AddFlops(int64_t forward, bool input_needs_grad) {
  FlopCounter* c = ActiveFlopCounter();
  if (c == nullptr) return;
  c->forward += forward;
  c->training += forward * (input_needs_grad ? 3 : 2);
}
}  // namespace detail

/// torch::nn::Conv2d that reports its FLOPs to an active FlopCounter.
class CountedConv2dImpl : public torch::nn::Conv2dImpl {
 public:
  using torch::nn::Conv2dImpl::Conv2dImpl;
  torch::Tensor forward(const torch::Tensor& input) {
    torch::Tensor out = torch::nn::Conv2dImpl::forward(input);
    if (detail::ActiveFlopCounter() != nullptr) {
      // Per output element: one MAC per weight element of one output channel.
      const int64_t macs = out.numel() * (weight.numel() / weight.size(0));
      detail::AddFlops(2 * macs, input.requires_grad());
    }
    return out;
  }
};
TORCH_MODULE(CountedConv2d);

/// torch::nn::Linear that reports its FLOPs to an active FlopCounter.
class CountedLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input) {
    torch::Tensor out = torch::nn::LinearImpl::forward(input);
    if (detail::ActiveFlopCounter() != nullptr) {
      const int64_t macs = out.numel() * weight.size(1);
      detail::AddFlops(2 * macs, input.requires_grad());
    }
    return out;
  }
};
TORCH_MODULE(CountedLinear);

/// Runs `forward` once on a batch of 2 random samples of `sample_shape` on the
/// CPU, in eval mode (so batch statistics play no part), with gradients
/// recorded, and stores the training FLOPs per sample in `flops`. The module
/// must be on the CPU; its train/eval mode is restored. Never throws.
template <class ForwardFn>
Status MeasureTrainingFlops(torch::nn::Module& module, ForwardFn&& forward, const std::array<int64_t, 3>& sample_shape,
                            int64_t* flops) noexcept {
  const bool was_training = module.is_training();
  FlopCounter counter;
  try {
    // Gradients stay on: requires_grad tells which inputs need one.
    torch::AutoGradMode grad_on(true);
    module.eval();
    torch::Tensor x = torch::randn({2, sample_shape[0], sample_shape[1], sample_shape[2]});
    detail::ActiveFlopCounter() = &counter;
    forward(x);
    detail::ActiveFlopCounter() = nullptr;
    module.train(was_training);
  } catch (const std::exception& e) {
    detail::ActiveFlopCounter() = nullptr;
    module.train(was_training);
    return Status::Error(std::string("FLOP measurement failed: ") + e.what());
  }
  if (counter.training <= 0)
    return Status::Error("FLOP measurement counted nothing: build the model from CountedConv2d/CountedLinear");
  *flops = counter.training / 2;
  return Status::Ok();
}

}  // namespace trainbench::sdk

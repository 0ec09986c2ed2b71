#include "bias_relu_pool.h"

#include <torch/nn/functional/pooling.h>

#include <string>

#include "path_log.h"

#ifdef TRAINBENCH_SIMPLE_CNN_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "bias_relu_pool_kernels.h"
#endif

namespace simple_cnn {
namespace {

torch::Tensor Composite(const torch::Tensor& y, const torch::Tensor& bias) {
  // As an eager convolution with its bias would: the bias in y's type.
  const torch::Tensor biased = y + bias.to(y.scalar_type()).view({1, -1, 1, 1});
  return torch::nn::functional::max_pool2d(torch::relu(biased), torch::nn::functional::MaxPool2dFuncOptions(2));
}

#ifdef TRAINBENCH_SIMPLE_CNN_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool FusedApplies(const torch::Tensor& y, const torch::Tensor& bias) {
  const auto type = y.scalar_type();
  return y.is_cuda() && bias.defined() && bias.device() == y.device() && y.dim() == 4 && y.size(2) % 2 == 0 &&
         y.size(3) % 2 == 0 && bias.dim() == 1 && bias.size(0) == y.size(1) &&
         (type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf);
}

kernels::PoolProblem Problem(const torch::Tensor& y, bool nhwc) {
  const auto type = y.scalar_type();
  return kernels::PoolProblem{type == torch::kFloat      ? kernels::DType::kFloat
                              : type == torch::kBFloat16 ? kernels::DType::kBFloat16
                                                         : kernels::DType::kHalf,
                              nhwc ? kernels::Layout::kNhwc : kernels::Layout::kNchw,
                              y.size(0),
                              y.size(1),
                              y.size(2),
                              y.size(3)};
}

c10::MemoryFormat Format(bool nhwc) { return nhwc ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous; }

// channels_last when y is in it (a cuDNN output of channels_last input); a
// tensor both layouts describe takes the NCHW kernel.
bool IsNhwc(const torch::Tensor& y) { return !y.is_contiguous() && y.is_contiguous(c10::MemoryFormat::ChannelsLast); }

// The forward kernel; with `offsets`, also the window offsets (p's shape, int8).
torch::Tensor Forward(const torch::Tensor& y_in, const torch::Tensor& bias, torch::Tensor* offsets) {
  const c10::cuda::CUDAGuard guard(y_in.device());
  const bool nhwc = IsNhwc(y_in);
  const torch::Tensor y = y_in.contiguous(Format(nhwc));
  const torch::Tensor b = bias.to(torch::kFloat).contiguous();
  const auto options = y.options().memory_format(Format(nhwc));
  const std::vector<int64_t> pooled{y.size(0), y.size(1), y.size(2) / 2, y.size(3) / 2};
  torch::Tensor p = torch::empty(pooled, options);
  if (offsets != nullptr) *offsets = torch::empty(pooled, options.dtype(torch::kChar));
  C10_CUDA_CHECK(kernels::BiasReluMaxPoolForward(Problem(y, nhwc), y.data_ptr(), b.data_ptr<float>(), p.data_ptr(),
                                                 offsets != nullptr ? offsets->data_ptr<int8_t>() : nullptr,
                                                 c10::cuda::getCurrentCUDAStream()));
  return p;
}

struct FusedBiasReluMaxPool : public torch::autograd::Function<FusedBiasReluMaxPool> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& y_in, const torch::Tensor& bias) {
    const bool nhwc = IsNhwc(y_in);
    torch::Tensor offsets;
    torch::Tensor p = Forward(y_in, bias, &offsets);
    ctx->save_for_backward({offsets});
    ctx->saved_data["nhwc"] = nhwc;
    ctx->saved_data["y_sizes"] = y_in.sizes().vec();
    ctx->saved_data["bias_type"] = static_cast<int64_t>(bias.scalar_type());
    return p;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool nhwc = ctx->saved_data["nhwc"].toBool();
    const std::vector<int64_t> y_sizes = ctx->saved_data["y_sizes"].toIntVector();
    const auto bias_type = static_cast<c10::ScalarType>(ctx->saved_data["bias_type"].toInt());
    const torch::Tensor offsets = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(offsets.device());
    const torch::Tensor grad_p = grads[0].contiguous(Format(nhwc));
    torch::Tensor grad_y = torch::empty(y_sizes, grad_p.options().memory_format(Format(nhwc)));
    torch::Tensor masked = torch::empty(grad_p.sizes(), grad_p.options().memory_format(Format(nhwc)));
    C10_CUDA_CHECK(kernels::BiasReluMaxPoolBackward(Problem(grad_y, nhwc), grad_p.data_ptr(),
                                                    offsets.data_ptr<int8_t>(), grad_y.data_ptr(), masked.data_ptr(),
                                                    c10::cuda::getCurrentCUDAStream()));
    // The bias gradient: every pooled gradient that passed ReLU, summed per
    // channel in fp32 (a reduction over a quarter of grad_y).
    torch::Tensor grad_bias = masked.sum({0, 2, 3}, /*keepdim=*/false, torch::kFloat).to(bias_type);
    return {grad_y, grad_bias};
  }
};
#endif

}  // namespace

bool FusedKernelsBuilt() noexcept {
#ifdef TRAINBENCH_SIMPLE_CNN_KERNELS
  return true;
#else
  return false;
#endif
}

torch::Tensor BiasReluMaxPool(const torch::Tensor& y, const torch::Tensor& bias) {
#ifdef TRAINBENCH_SIMPLE_CNN_KERNELS
  if (FusedApplies(y, bias)) {
    trainbench::plugins::CountPath("epilogue", "fused_kernel");
    // Without a backward to come (evaluation), no window offsets are kept.
    if (!torch::GradMode::is_enabled() || !(y.requires_grad() || bias.requires_grad()))
      return Forward(y, bias, /*offsets=*/nullptr);
    return FusedBiasReluMaxPool::apply(y, bias);
  }
#endif
  trainbench::plugins::CountPath("epilogue", "composite");
  return Composite(y, bias);
}

}  // namespace simple_cnn

#include "max_pool.h"

#include <torch/nn/functional/pooling.h>

#include "path_log.h"

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "kernel_dtype.h"
#include "max_pool_kernels.h"
#endif

namespace resnet {
namespace {

#ifdef TRAINBENCH_RESNET_KERNELS
using kernels::Format;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// LibTorch's choice of layout for the output (a map of 1x1, or one channel,
// is both layouts at once: its strides decide, as in torch::max_pool2d).
bool IsNhwc(const torch::Tensor& x) {
  return x.suggest_memory_format() == c10::MemoryFormat::ChannelsLast &&
         x.is_contiguous(c10::MemoryFormat::ChannelsLast);
}

kernels::PoolProblem Problem(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return kernels::PoolProblem{kernels::DTypeOf(x.scalar_type()),
                              IsNhwc(x) ? kernels::Layout::kNhwc : kernels::Layout::kNchw,
                              x.size(0),
                              x.size(1),
                              x.size(2),
                              x.size(3),
                              static_cast<int>(kernel),
                              static_cast<int>(stride),
                              static_cast<int>(padding)};
}

bool Applies(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (!x.is_cuda() || x.dim() != 4 || !kernels::Takes(x.scalar_type())) return false;
  if (!IsNhwc(x) && !x.is_contiguous()) return false;
  // Within int before PoolProblem takes them; PoolSupported has the real bounds.
  if (kernel < 1 || kernel > 1024 || stride < 1 || stride > 1024 || padding < 0 || padding > 1024) return false;
  return kernels::PoolSupported(Problem(x, kernel, stride, padding));
}

// y (N, C, OH, OW) in x's layout; `argmax` null: no backward.
torch::Tensor Forward(const torch::Tensor& x, const kernels::PoolProblem& problem, torch::Tensor* argmax) {
  const c10::cuda::CUDAGuard guard(x.device());
  const std::vector<int64_t> shape{problem.n, problem.c, kernels::PoolOutHeight(problem),
                                   kernels::PoolOutWidth(problem)};
  const auto format = Format(problem.layout == kernels::Layout::kNhwc);
  torch::Tensor y = torch::empty(shape, x.options().memory_format(format));
  if (argmax != nullptr) *argmax = torch::empty(shape, x.options().dtype(torch::kUInt8).memory_format(format));
  C10_CUDA_CHECK(kernels::MaxPoolForward(problem, x.data_ptr(), y.data_ptr(),
                                         argmax != nullptr ? argmax->data_ptr<uint8_t>() : nullptr,
                                         c10::cuda::getCurrentCUDAStream()));
  return y;
}

struct FusedMaxPool : public torch::autograd::Function<FusedMaxPool> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel, int64_t stride,
                               int64_t padding) {
    torch::Tensor argmax;
    const torch::Tensor y = Forward(x, Problem(x, kernel, stride, padding), &argmax);
    ctx->save_for_backward({argmax});
    ctx->saved_data["shape"] = x.sizes();
    ctx->saved_data["nhwc"] = IsNhwc(x);
    ctx->saved_data["type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["geometry"] = std::vector<int64_t>{kernel, stride, padding};
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor argmax = ctx->get_saved_variables()[0];
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const std::vector<int64_t> geometry = ctx->saved_data["geometry"].toIntVector();
    const bool nhwc = ctx->saved_data["nhwc"].toBool();
    const auto type = static_cast<c10::ScalarType>(ctx->saved_data["type"].toInt());
    const c10::cuda::CUDAGuard guard(argmax.device());
    const torch::Tensor dy = grads[0].to(type).contiguous(Format(nhwc));
    torch::Tensor dx = torch::empty(shape, dy.options().memory_format(Format(nhwc)));
    // The problem as the forward saw it (x's layout: argmax has it too).
    const kernels::PoolProblem problem{kernels::DTypeOf(type),
                                       nhwc ? kernels::Layout::kNhwc : kernels::Layout::kNchw,
                                       shape[0],
                                       shape[1],
                                       shape[2],
                                       shape[3],
                                       static_cast<int>(geometry[0]),
                                       static_cast<int>(geometry[1]),
                                       static_cast<int>(geometry[2])};
    C10_CUDA_CHECK(kernels::MaxPoolBackward(problem, dy.data_ptr(), argmax.data_ptr<uint8_t>(), dx.data_ptr(),
                                            c10::cuda::getCurrentCUDAStream()));
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

torch::Tensor MaxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding, bool fused) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (fused && Applies(x, kernel, stride, padding)) {
    trainbench::plugins::CountPath("max_pool", "kernels");
    if (torch::GradMode::is_enabled() && x.requires_grad()) return FusedMaxPool::apply(x, kernel, stride, padding);
    return Forward(x, Problem(x, kernel, stride, padding), nullptr);
  }
#else
  (void)fused;
#endif
  trainbench::plugins::CountPath("max_pool", "libtorch");
  return torch::max_pool2d(x, kernel, stride, padding);
}

}  // namespace resnet

#include "weight_cast.h"

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "kernel_dtype.h"
#include "weight_cast_kernels.h"
#endif

namespace resnet {
namespace {

#ifdef TRAINBENCH_RESNET_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool Applies(const std::vector<torch::Tensor>& weights, at::ScalarType type) {
  if (weights.empty() || (type != at::kBFloat16 && type != at::kHalf)) return false;
  for (const torch::Tensor& w : weights) {
    if (!w.defined() || !w.is_cuda() || w.device() != weights[0].device() || w.scalar_type() != at::kFloat ||
        !w.is_non_overlapping_and_dense())
      return false;
  }
  return true;
}

void Cast(const std::vector<kernels::CastJob>& jobs, at::ScalarType from, at::ScalarType to) {
  C10_CUDA_CHECK(kernels::CastTensors(jobs.data(), static_cast<int>(jobs.size()), kernels::DTypeOf(from),
                                      kernels::DTypeOf(to), c10::cuda::getCurrentCUDAStream()));
}

struct CastAll : public torch::autograd::Function<CastAll> {
  static variable_list forward(AutogradContext* ctx, at::TensorList weights, int64_t type) {
    const c10::cuda::CUDAGuard guard(weights[0].device());
    const auto to = static_cast<at::ScalarType>(type);
    variable_list out;
    std::vector<kernels::CastJob> jobs;
    for (const torch::Tensor& w : weights) {
      out.push_back(torch::empty_strided(w.sizes(), w.strides(), w.options().dtype(to)));
      jobs.push_back({w.data_ptr(), out.back().data_ptr(), w.numel()});
    }
    Cast(jobs, at::kFloat, to);
    // The weights themselves (references, not copies): the backward's
    // gradients take their sizes, strides and device. An output nobody used
    // gets no gradient (not a zero one), as with LibTorch's cast.
    ctx->save_for_backward(weights.vec());
    ctx->set_materialize_grads(false);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list weights = ctx->get_saved_variables();
    variable_list result(weights.size() + 1);  // and none for `type`
    const c10::cuda::CUDAGuard guard(weights[0].device());
    std::vector<kernels::CastJob> jobs;
    at::ScalarType from = at::kFloat;
    for (size_t i = 0; i < weights.size(); ++i) {
      const torch::Tensor& g = grads[i];
      if (!g.defined()) continue;
      const torch::Tensor& w = weights[i];
      torch::Tensor dw = torch::empty_strided(w.sizes(), w.strides(), w.options());
      // In memory order where the gradient has the weight's strides (what the
      // convolutions' backward writes); else LibTorch's copy.
      if (g.device() == w.device() && g.strides() == w.strides() && g.is_non_overlapping_and_dense() &&
          (jobs.empty() || g.scalar_type() == from) &&
          (g.scalar_type() == at::kBFloat16 || g.scalar_type() == at::kHalf)) {
        from = g.scalar_type();
        jobs.push_back({g.data_ptr(), dw.data_ptr(), g.numel()});
      } else {
        dw.copy_(g);
      }
      result[i] = dw;
    }
    if (!jobs.empty()) Cast(jobs, from, at::kFloat);
    return result;
  }
};
#endif

}  // namespace

std::vector<torch::Tensor> CastWeights(const std::vector<torch::Tensor>& weights, at::ScalarType type) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (Applies(weights, type)) return CastAll::apply(at::TensorList(weights), static_cast<int64_t>(type));
#endif
  std::vector<torch::Tensor> out;
  out.reserve(weights.size());
  for (const torch::Tensor& w : weights) out.push_back(w.to(type));
  return out;
}

}  // namespace resnet

#include "stem.h"

#include <stdexcept>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "kernel_dtype.h"
#include "stem_kernels.h"
#include "trainbench/sdk/support/autocast.h"
#endif

namespace resnet {
namespace cudnn_conv = trainbench::plugins::cudnn_conv;
namespace {

#ifdef TRAINBENCH_RESNET_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// w's layout for the kernels: contiguous NCHW or channels_last (a weight of
// other strides is made contiguous first).
kernels::Layout WeightLayout(const torch::Tensor& w) {
  return !w.is_contiguous() && w.is_contiguous(c10::MemoryFormat::ChannelsLast) ? kernels::Layout::kNhwc
                                                                                : kernels::Layout::kNchw;
}

// w (K, C, 7, 7) -> w' (K, SC, 4, 4) channels_last; the backward gathers w's
// gradient back in w's layout.
struct StemWeight : public torch::autograd::Function<StemWeight> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& weight) {
    const kernels::Layout layout = WeightLayout(weight);
    const torch::Tensor w = weight.contiguous(kernels::Format(layout == kernels::Layout::kNhwc));
    const c10::cuda::CUDAGuard guard(w.device());
    const int64_t k = w.size(0), c = w.size(1);
    torch::Tensor blocks =
        torch::empty({k, kernels::StemChannels(c), 4, 4}, w.options().memory_format(c10::MemoryFormat::ChannelsLast));
    C10_CUDA_CHECK(kernels::StemWeight(kernels::DTypeOf(w.scalar_type()), layout, k, c, w.data_ptr(), blocks.data_ptr(),
                                       c10::cuda::getCurrentCUDAStream()));
    ctx->saved_data["shape"] = w.sizes();
    ctx->saved_data["nhwc"] = layout == kernels::Layout::kNhwc;
    return blocks;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const bool nhwc = ctx->saved_data["nhwc"].toBool();
    const torch::Tensor g = grads[0].contiguous(c10::MemoryFormat::ChannelsLast);
    const c10::cuda::CUDAGuard guard(g.device());
    torch::Tensor dw = torch::empty(shape, g.options().memory_format(kernels::Format(nhwc)));
    C10_CUDA_CHECK(kernels::StemWeightGrad(kernels::DTypeOf(g.scalar_type()),
                                           nhwc ? kernels::Layout::kNhwc : kernels::Layout::kNchw, shape[0], shape[1],
                                           g.data_ptr(), dw.data_ptr(), c10::cuda::getCurrentCUDAStream()));
    return {dw};
  }
};

// The convolution's element type: autocast's under CUDA autocast, else x's.
c10::ScalarType ConvType(const torch::Tensor& x) {
  return trainbench::sdk::autocast::Enabled(c10::kCUDA) ? trainbench::sdk::autocast::Type(c10::kCUDA) : x.scalar_type();
}

// The kernels' problem for a channels_last image x whose types they take.
kernels::StemProblem ProblemOf(const torch::Tensor& x) {
  return {kernels::DTypeOf(x.scalar_type()),
          kernels::DTypeOf(ConvType(x)),
          kernels::Layout::kNhwc,
          x.size(0),
          x.size(1),
          x.size(2),
          x.size(3)};
}
#endif

}  // namespace

bool StemApplies(const torch::Tensor& x, const torch::Tensor& w, int64_t stride, int64_t padding) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (stride != 2 || padding != 3 || !cudnn_conv::Supports(x, w) || x.size(1) < 2) return false;
  if (x.requires_grad() && torch::GradMode::is_enabled()) return false;
  if (w.size(2) != 7 || w.size(3) != 7 || !kernels::Takes(x.scalar_type()) || !kernels::Takes(ConvType(x)))
    return false;
  if (x.suggest_memory_format() != c10::MemoryFormat::ChannelsLast || !x.is_contiguous(c10::MemoryFormat::ChannelsLast))
    return false;
  return kernels::StemSupported(ProblemOf(x));
#else
  (void)x, (void)w, (void)stride, (void)padding;
  return false;
#endif
}

torch::Tensor StemConv(const torch::Tensor& x, const torch::Tensor& w, const cudnn_conv::Settings& settings) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (!StemApplies(x, w, 2, 3)) throw std::invalid_argument("resnet::StemConv: a convolution it does not take");
  const c10::ScalarType type = ConvType(x);
  const c10::cuda::CUDAGuard guard(x.device());
  const kernels::StemProblem problem = ProblemOf(x);
  const torch::Tensor blocks = torch::empty(
      {x.size(0), kernels::StemChannels(x.size(1)), kernels::StemBlocksHigh(problem), kernels::StemBlocksWide(problem)},
      x.options().dtype(type).memory_format(c10::MemoryFormat::ChannelsLast));
  C10_CUDA_CHECK(kernels::StemBlocks(problem, x.data_ptr(), blocks.data_ptr(), c10::cuda::getCurrentCUDAStream()));
  const torch::Tensor w_blocks = StemWeight::apply(w.to(type));  // w itself when already of that type
  return cudnn_conv::Conv2d(blocks, w_blocks, {1, 1}, {0, 0}, settings);
#else
  (void)x, (void)w, (void)settings;
  throw std::invalid_argument("resnet::StemConv: this build has no CUDA kernels");
#endif
}

}  // namespace resnet

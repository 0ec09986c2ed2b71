#include "whole_map.h"

#include <torch/autograd.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "side_stream.h"

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernel_dtype.h"
#include "whole_map_kernels.h"
#endif

namespace resnet {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using trainbench::plugins::SideStream;

// t's elements as (rows, the rest, 1, 1) with channels_last strides (a view
// where t is contiguous): what LibTorch and the cuDNN path take for a
// channels_last tensor of 1x1 maps, as the rest of the ResNets' are.
torch::Tensor AsChannelsLastPixel(const torch::Tensor& t, int64_t rows) {
  return t.reshape({rows, 1, 1, t.numel() / rows}).permute({0, 3, 1, 2});
}

// Output pixel p's window onto the taps (K, r, s, C): the h x w taps that
// join it to the map's pixels, in the map's pixel order. The forward's
// blocks and the fold's adds both take it.
torch::Tensor Window(const torch::Tensor& taps, const WholeMap& map, int64_t p) {
  const int64_t py = p / map.wo, px = p % map.wo;
  return taps.narrow(1, map.padding - py * map.stride, map.h).narrow(2, map.padding - px * map.stride, map.w);
}

// Taps (K, r, s, C, contiguous) for a filter of `w_shape` (K, C, r, s), in
// g's type and device, uninitialised.
torch::Tensor EmptyTaps(const torch::Tensor& g, c10::IntArrayRef w_shape) {
  return torch::empty({w_shape[0], w_shape[2], w_shape[3], w_shape[1]}, g.options());
}

// The taps as the filter (K, C, r, s): channels_last strides, a view.
torch::Tensor TapsAsFilter(const torch::Tensor& taps) { return taps.permute({0, 3, 1, 2}); }

// FoldWholeMapGrad into `dtaps` (K, r, s, C, contiguous, g's type and
// device), every element written.
void FoldInto(const torch::Tensor& g, const WholeMap& map, bool kernel, const torch::Tensor& dtaps) {
  const int64_t k = dtaps.size(0), c = dtaps.size(3), pixels = map.ho * map.wo;
  const torch::Tensor blocks = g.reshape({pixels, k, map.h, map.w, c});
#ifdef TRAINBENCH_RESNET_KERNELS
  if (kernel && g.is_cuda() && kernels::Takes(g.scalar_type())) {
    const c10::cuda::CUDAGuard guard(g.device());
    const torch::Tensor in = blocks.contiguous();
    const kernels::WholeMapShape shape{k,     c,      dtaps.size(1), dtaps.size(2), map.h,
                                       map.w, map.ho, map.wo,        map.stride,    map.padding};
    C10_CUDA_CHECK(kernels::FoldWholeMapGrad(in.data_ptr(), dtaps.data_ptr(), shape, kernels::DTypeOf(g.scalar_type()),
                                             c10::cuda::getCurrentCUDAStream()));
    return;
  }
#else
  (void)kernel;
#endif
  dtaps.zero_();
  for (int64_t p = 0; p < pixels; ++p) Window(dtaps, map, p).add_(blocks[p]);
}

// w as the whole map's filter: output pixel p's row block is w's taps over
// p's window onto the map (K, h, w, C: the taps in the map's pixel order,
// each tap's C channels), the blocks stacked p-major. The backward folds the
// blocks' gradients back onto the taps (FoldWholeMapGrad), p in order:
// deterministic, unlike autograd's own sum of the windows' narrow backwards
// (one zero filter each).
struct WholeMapFunction : public torch::autograd::Function<WholeMapFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& w, int64_t h, int64_t wm, int64_t ho,
                               int64_t wo, int64_t stride, int64_t padding, int64_t late_join_group) {
    const c10::MemoryFormat format = w.suggest_memory_format();
    ctx->saved_data["shape"] = w.sizes();
    ctx->saved_data["channels_last"] = format == c10::MemoryFormat::ChannelsLast;
    ctx->saved_data["map"] = std::vector<int64_t>{h, wm, ho, wo, stride, padding};
    ctx->saved_data["late_join_group"] = late_join_group;
    const torch::Tensor taps = w.permute({0, 2, 3, 1});  // K, r, s, C: a view where w is channels_last
    const WholeMap map{h, wm, ho, wo, stride, padding};
    std::vector<torch::Tensor> blocks;
    for (int64_t p = 0; p < ho * wo; ++p) blocks.push_back(Window(taps, map, p));
    return AsChannelsLastPixel(torch::stack(blocks), ho * wo * w.size(0));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const std::vector<int64_t> m = ctx->saved_data["map"].toIntVector();
    const WholeMap map{m[0], m[1], m[2], m[3], m[4], m[5]};
    const torch::Tensor& g = grads[0];
    const bool channels_last = ctx->saved_data["channels_last"].toBool();
    const int64_t group = ctx->saved_data["late_join_group"].toInt();
    torch::Tensor dw;
    if (group >= 0 && channels_last && trainbench::plugins::SideStreamsApply(g.device())) {
      // g is still being written on the side stream its convolution left
      // with `group` (cudnn_conv.h's late_join_group, the same condition):
      // fold it on a side stream behind that one, left with the group too,
      // so that nothing here waits for either before JoinBeforeGradients'
      // backward. Allocated here, as SideStream asks.
      const torch::Tensor dtaps = EmptyTaps(g, shape);
      SideStream side(g.device());
      side.AfterLeft(group);
      side.Run([&] { FoldInto(g, map, /*kernel=*/true, dtaps); });
      side.Leave({g, dtaps}, group);
      dw = TapsAsFilter(dtaps);
    } else {
      dw = FoldWholeMapGrad(g, shape, map, /*kernel=*/true);
      if (!channels_last) dw = dw.contiguous();
    }
    variable_list result(8);  // w's, and none for the map's seven integers
    result[0] = dw;
    return result;
  }
};

}  // namespace

std::optional<WholeMap> WholeMapPlan(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, int64_t padding) {
  if (h < 1 || w < 1 || r < 1 || s < 1 || stride < 1 || padding < 0) return std::nullopt;
  if (h + 2 * padding < r || w + 2 * padding < s) return std::nullopt;  // no output
  if (h * w >= r * s) return std::nullopt;                              // no fewer blocks than the filter's taps
  // Output row y's window is input rows [y * stride - padding, y * stride -
  // padding + r). The first ends at or after row h where padding + h <= r;
  // then the last starts at or before row 0, (ho - 1) * stride <=
  // h + 2 * padding - r <= padding, and every window holds rows [0, h).
  if (padding + h > r || padding + w > s) return std::nullopt;
  return WholeMap{h, w, (h + 2 * padding - r) / stride + 1, (w + 2 * padding - s) / stride + 1, stride, padding};
}

torch::Tensor WholeMapFilter(const torch::Tensor& w, const WholeMap& map, int64_t late_join_group) {
  return WholeMapFunction::apply(w, map.h, map.w, map.ho, map.wo, map.stride, map.padding, late_join_group);
}

torch::Tensor FoldWholeMapGrad(const torch::Tensor& g, c10::IntArrayRef w_shape, const WholeMap& map, bool kernel) {
  const torch::Tensor dtaps = EmptyTaps(g, w_shape);
  FoldInto(g, map, kernel, dtaps);
  return TapsAsFilter(dtaps);
}

bool WholeMapKernelBuilt() {
#ifdef TRAINBENCH_RESNET_KERNELS
  return true;
#else
  return false;
#endif
}

bool WholeMapJoinsLate(int64_t rows, c10::ScalarType filter_type, c10::ScalarType compute_type) {
  return rows < kWholeMapLateBelowRows && filter_type == compute_type;
}

torch::Tensor MapAsChannels(const torch::Tensor& x) { return AsChannelsLastPixel(x.permute({0, 2, 3, 1}), x.size(0)); }

torch::Tensor ChannelsAsMap(const torch::Tensor& y, const WholeMap& map) {
  const int64_t k = y.size(1) / (map.ho * map.wo);
  return y.reshape({y.size(0), map.ho, map.wo, k}).permute({0, 3, 1, 2});
}

bool WholeMapApplies(std::optional<bool> forced, int64_t rows, c10::ScalarType type) {
  if (forced) return *forced;
  return type == c10::ScalarType::Float || rows >= kWholeMapMinRows;
}

}  // namespace resnet

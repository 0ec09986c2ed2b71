#include "trim_taps.h"

#include <torch/autograd.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "env_switch.h"

namespace resnet {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// w's taps as a filter of their own; the gradient back into a zero filter of
// w's shape and memory format (autograd's own narrow would give it in the
// default format, which the weights' consumers would then copy).
struct TrimFunction : public torch::autograd::Function<TrimFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& w, int64_t top, int64_t left, int64_t height,
                               int64_t width) {
    const c10::MemoryFormat format = w.suggest_memory_format();
    ctx->saved_data["shape"] = w.sizes();
    ctx->saved_data["channels_last"] = format == c10::MemoryFormat::ChannelsLast;
    ctx->saved_data["taps"] = std::vector<int64_t>{top, left, height, width};
    return w.narrow(2, top, height).narrow(3, left, width).contiguous(format);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const std::vector<int64_t> taps = ctx->saved_data["taps"].toIntVector();
    const c10::MemoryFormat format =
        ctx->saved_data["channels_last"].toBool() ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
    torch::Tensor dw = torch::zeros(shape, grads[0].options().memory_format(format));
    dw.narrow(2, taps[0], taps[2]).narrow(3, taps[1], taps[3]).copy_(grads[0]);
    return {dw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// t's elements as (rows, the rest, 1, 1) with channels_last strides (a view
// where t is contiguous): what LibTorch and the cuDNN path take for a
// channels_last tensor of 1x1 maps, as the rest of the ResNets' are.
torch::Tensor AsChannelsLastPixel(const torch::Tensor& t, int64_t rows) {
  return t.reshape({rows, 1, 1, t.numel() / rows}).permute({0, 3, 1, 2});
}

// w as the whole map's filter: output pixel p's row block is w's taps over
// p's window onto the map (K, h, w, C: the taps in the map's pixel order,
// each tap's C channels), the blocks stacked p-major. The backward adds each
// block's gradient into that window of a zero filter gradient, p in order:
// deterministic, unlike autograd's own sum of the windows' narrow backwards
// (one zero filter each).
struct WholeMapFunction : public torch::autograd::Function<WholeMapFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& w, int64_t h, int64_t wm, int64_t ho,
                               int64_t wo, int64_t stride, int64_t padding) {
    const c10::MemoryFormat format = w.suggest_memory_format();
    ctx->saved_data["shape"] = w.sizes();
    ctx->saved_data["channels_last"] = format == c10::MemoryFormat::ChannelsLast;
    ctx->saved_data["map"] = std::vector<int64_t>{h, wm, ho, wo, stride, padding};
    const torch::Tensor taps = w.permute({0, 2, 3, 1});  // K, r, s, C: a view where w is channels_last
    std::vector<torch::Tensor> blocks;
    for (int64_t py = 0; py < ho; ++py)
      for (int64_t px = 0; px < wo; ++px)
        blocks.push_back(taps.narrow(1, padding - py * stride, h).narrow(2, padding - px * stride, wm));
    return AsChannelsLastPixel(torch::stack(blocks), ho * wo * w.size(0));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const std::vector<int64_t> m = ctx->saved_data["map"].toIntVector();
    const int64_t h = m[0], wm = m[1], ho = m[2], wo = m[3], stride = m[4], padding = m[5];
    const int64_t k = shape[0], c = shape[1];
    const torch::Tensor blocks = grads[0].reshape({ho * wo, k, h, wm, c});
    torch::Tensor dtaps = torch::zeros({k, shape[2], shape[3], c}, grads[0].options());  // K, r, s, C
    for (int64_t py = 0; py < ho; ++py)
      for (int64_t px = 0; px < wo; ++px)
        dtaps.narrow(1, padding - py * stride, h).narrow(2, padding - px * stride, wm).add_(blocks[py * wo + px]);
    torch::Tensor dw = dtaps.permute({0, 3, 1, 2});  // channels_last strides
    if (!ctx->saved_data["channels_last"].toBool()) dw = dw.contiguous();
    return {dw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::optional<Taps> LiveTaps(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, int64_t padding) {
  // The whole-map form's one-pixel outputs: its window starts at -padding,
  // taps [padding, padding + h) read input rows [0, h), the rest padding
  // (where the map fits the filter, h * w < r * s is h x w != r x s).
  const auto map = WholeMapPlan(h, w, r, s, stride, padding);
  if (!map || map->ho != 1 || map->wo != 1) return std::nullopt;
  return Taps{padding, padding, h, w};
}

torch::Tensor TrimTaps(const torch::Tensor& w, const Taps& taps) {
  return TrimFunction::apply(w, taps.top, taps.left, taps.height, taps.width);
}

bool TrimTapsSetting() {
  static const bool value = trainbench::plugins::OnIfOne("TRAINBENCH_CONV_TRIM");
  return value;
}

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

torch::Tensor WholeMapFilter(const torch::Tensor& w, const WholeMap& map) {
  return WholeMapFunction::apply(w, map.h, map.w, map.ho, map.wo, map.stride, map.padding);
}

torch::Tensor MapAsChannels(const torch::Tensor& x) { return AsChannelsLastPixel(x.permute({0, 2, 3, 1}), x.size(0)); }

torch::Tensor ChannelsAsMap(const torch::Tensor& y, const WholeMap& map) {
  const int64_t k = y.size(1) / (map.ho * map.wo);
  return y.reshape({y.size(0), map.ho, map.wo, k}).permute({0, 3, 1, 2});
}

WholeMapMode WholeMapSetting() {
  static const WholeMapMode value = [] {
    const char* v = std::getenv("TRAINBENCH_CONV_WHOLE_MAP");
    if (v != nullptr && std::string_view(v) == "1") return WholeMapMode::kAlways;
    if (v != nullptr && std::string_view(v) == "0") return WholeMapMode::kNever;
    return WholeMapMode::kByRule;
  }();
  return value;
}

bool WholeMapApplies(WholeMapMode mode, int64_t rows, c10::ScalarType type) {
  switch (mode) {
    case WholeMapMode::kAlways:
      return true;
    case WholeMapMode::kNever:
      return false;
    case WholeMapMode::kByRule:
      break;
  }
  return type == c10::ScalarType::Float || rows >= kWholeMapMinRows;
}

}  // namespace resnet

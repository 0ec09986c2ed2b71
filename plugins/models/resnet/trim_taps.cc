#include "trim_taps.h"

#include <torch/autograd.h>

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

}  // namespace

std::optional<Taps> LiveTaps(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, int64_t padding) {
  if (h < 1 || w < 1 || r < 1 || s < 1 || stride < 1 || padding < 0) return std::nullopt;
  if (h + 2 * padding < r || w + 2 * padding < s) return std::nullopt;  // no output
  // One output pixel: its window starts at -padding and no second window fits.
  if ((h + 2 * padding - r) / stride != 0 || (w + 2 * padding - s) / stride != 0) return std::nullopt;
  // Taps [padding, padding + h) read input rows [0, h); the rest read padding.
  if (padding + h > r || padding + w > s) return std::nullopt;
  if (h == r && w == s) return std::nullopt;  // every tap reaches the input
  return Taps{padding, padding, h, w};
}

torch::Tensor TrimTaps(const torch::Tensor& w, const Taps& taps) {
  return TrimFunction::apply(w, taps.top, taps.left, taps.height, taps.width);
}

bool TrimTapsSetting() {
  static const bool value = trainbench::plugins::OnIfOne("TRAINBENCH_CONV_TRIM");
  return value;
}

}  // namespace resnet

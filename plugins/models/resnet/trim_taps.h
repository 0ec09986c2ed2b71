#pragma once
// A convolution whose output is one pixel reads only some of its filter's
// taps: the others fall on the zero padding around the input (a 3x3
// convolution with padding 1 over a 1x1 map, the ResNets' layer 4 at 32 px,
// reads its centre tap alone; over a 2x2 map with stride 2, a 2x2 corner).
// The same convolution over the taps that reach the input, without padding,
// gives the same output and the same gradients (those of the other taps are
// exactly zero): a ninth or four ninths of the work. Off unless
// TRAINBENCH_CONV_TRIM=1 (prepared in session 29, not yet measured).
//
// The same holds where the output is more than one pixel but the input map
// is smaller than the filter (h * w < r * s): a 3x3 convolution with padding
// 1 over a 2x2 map (the ResNets' layer 3 at 32 px) computes 9 taps for each
// of its 4 output pixels, of which only 4 each reach the input. Taken as one
// matrix product over the whole map (the map's pixels as the channels of one
// pixel, the filter as the matrix whose block (p, q) is the tap that joins
// output pixel p to input pixel q), it does 16 blocks of work instead of 36,
// and its three products (output, input gradient, filter gradient) are
// square-ish matrices of the batch's size instead of long thin ones. On by
// default since session 31 by a rule of type and batch (WholeMapApplies);
// TRAINBENCH_CONV_WHOLE_MAP=1 or 0 forces it on or off. It takes the
// one-pixel outputs too (the same products as the trim's, which it beat at
// both batches measured).

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace resnet {

/// The filter's taps that reach the input: rows [top, top + height),
/// columns [left, left + width).
struct Taps {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

/// For conv2d over an h x w map with an r x s filter, `stride` and
/// `padding` (both ways): the taps that reach the input, where the output is
/// one pixel and they are fewer than the filter's (the input's h x w,
/// from tap (padding, padding)); else nothing.
std::optional<Taps> LiveTaps(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, int64_t padding);

/// w's `taps` as a filter of their own (K, C, height, width), in w's memory
/// format, with autograd: the backward puts their gradient into a zero
/// gradient of w's shape and memory format. Then conv2d(x, w, stride,
/// padding) == conv2d(x, TrimTaps(w, taps), 1, 0) where LiveTaps gave `taps`.
torch::Tensor TrimTaps(const torch::Tensor& w, const Taps& taps);

/// Whether the ResNets' convolutions on the cuDNN path run over their live
/// taps alone: TRAINBENCH_CONV_TRIM=1 (read once a process).
bool TrimTapsSetting();

/// A convolution over an h x w map, its output ho x wo, taken as one matrix
/// product over the whole map (WholeMapPlan).
struct WholeMap {
  int64_t h = 0, w = 0, ho = 0, wo = 0, stride = 1, padding = 0;
};

/// For conv2d over an h x w map with an r x s filter, `stride` and
/// `padding` (both ways): the whole-map form, where the map is smaller than
/// the filter (h * w < r * s) and every output pixel's window holds the
/// whole map (each input pixel reaches each output pixel through a tap, none
/// through padding alone); else nothing.
std::optional<WholeMap> WholeMapPlan(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, int64_t padding);

/// w (K, C, r, s) as the whole map's filter (ho * wo * K, h * w * C, 1, 1),
/// channels_last (for 1x1 maps the same memory as contiguous): row block p
/// (an output pixel, row-major), column block q (an input pixel), the tap
/// between them. With autograd: the backward adds each tap's blocks, in a
/// fixed order, into a filter gradient of w's shape and memory format.
torch::Tensor WholeMapFilter(const torch::Tensor& w, const WholeMap& map);

/// x (N, C, h, w) as (N, h * w * C, 1, 1), pixel-major, channels_last (so
/// that the cuDNN path takes the NHWC layout it takes for x): a view where x
/// is channels_last (a copy otherwise).
torch::Tensor MapAsChannels(const torch::Tensor& x);

/// y (N, ho * wo * K, 1, 1), pixel-major, as (N, K, ho, wo) in
/// channels_last: a view. Then conv2d(x, w, stride, padding) ==
/// ChannelsAsMap(conv2d(MapAsChannels(x), WholeMapFilter(w, map)), map)
/// where WholeMapPlan gave `map`.
torch::Tensor ChannelsAsMap(const torch::Tensor& y, const WholeMap& map);

/// TRAINBENCH_CONV_WHOLE_MAP: 1 always, 0 never, unset (or any other value)
/// by the measured rule of WholeMapApplies.
enum class WholeMapMode { kByRule, kAlways, kNever };
WholeMapMode WholeMapSetting();  // read once a process

/// From this many images a step the whole-map form runs in bf16 and half as
/// well as in fp32 (session 31, H200, 32 px: at batch 1024 it gained 1.2-4.7%
/// in bf16 and 2.3-7.5% in fp32; at batch 128 it lost 0.8-2.9% in bf16, and
/// in fp32 gained 4.2% for ResNet18 and kept ResNet50's rate; between the two
/// unmeasured).
constexpr int64_t kWholeMapMinRows = 512;

/// Whether a convolution the whole-map rule takes (WholeMapPlan) runs in that
/// form, for `rows` images of x's type `type`: kByRule, in fp32 always and
/// in other types from kWholeMapMinRows images.
bool WholeMapApplies(WholeMapMode mode, int64_t rows, c10::ScalarType type);

}  // namespace resnet

#pragma once
// A convolution whose output is one pixel reads only some of its filter's
// taps: the others fall on the zero padding around the input (a 3x3
// convolution with padding 1 over a 1x1 map, the ResNets' layer 4 at 32 px,
// reads its centre tap alone; over a 2x2 map with stride 2, a 2x2 corner).
// The same convolution over the taps that reach the input, without padding,
// gives the same output and the same gradients (those of the other taps are
// exactly zero): a ninth or four ninths of the work. Off unless
// TRAINBENCH_CONV_TRIM=1 (prepared in session 29, not yet measured).

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

}  // namespace resnet

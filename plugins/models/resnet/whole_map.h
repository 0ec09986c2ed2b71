#pragma once
// A convolution over a map smaller than its filter (h * w < r * s) computes
// taps that fall on the zero padding: a 3x3 convolution with padding 1 over
// a 2x2 map (the ResNets' layer 3 at 32 px) computes 9 taps for each of its 4
// output pixels, of which only 4 each reach the input; over a 1x1 map (layer
// 4) it reads its centre tap alone. Taken as one matrix product over the
// whole map (the map's pixels as the channels of one pixel, the filter as
// the matrix whose block (p, q) is the tap that joins output pixel p to
// input pixel q), it does 16 blocks of work instead of 36 (1 of 9 over a 1x1
// map), and its three products (output, input gradient, filter gradient)
// are square-ish matrices of the batch's size instead of long thin ones.
// Taken by a rule of type and batch (WholeMapApplies); the ResNets' option
// whole_map_conv (always, never) forces it on or off. (A trim of the
// one-pixel outputs to their live taps alone was dropped: the whole map
// takes those too and beat it in every cell at batch 1024; at 128 only
// ResNet50 fp32 favoured the trim, +0.42% against -0.09%, within the runs'
// spread.)

#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace resnet {

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
/// between them. With autograd: the backward folds the blocks' gradients
/// back onto the taps (FoldWholeMapGrad, in one kernel where built), in
/// w's memory format. `late_join_group` (0 or more; -1: none): the group of
/// the JoinBeforeGradients that w came through, as the convolution of the
/// whole map's filter was given it in cudnn_conv::Settings (the two go
/// together): inside a captured step with late joins, the fold runs on a
/// side stream behind that convolution's filter gradient and is left for
/// the group's join too (channels_last w only; otherwise it runs here).
torch::Tensor WholeMapFilter(const torch::Tensor& w, const WholeMap& map, int64_t late_join_group = -1);

/// The whole map filter's gradient g (ho * wo * K, h * w * C, 1, 1) folded
/// back onto the taps of a filter of `w_shape` (K, C, r, s), channels_last:
/// each tap's the sum over the output pixels p, in row-major order, of the
/// block that p's window puts on it; zero where none does. With `kernel`
/// and g on CUDA (in a build with the ResNets' kernels): one kernel,
/// whole_map_kernels.h, adding in fp32 and rounding once; else LibTorch's
/// ops, a zero gradient and one add per output pixel in g's type (the same
/// values in fp32; in bf16 and half each add rounds).
torch::Tensor FoldWholeMapGrad(const torch::Tensor& g, c10::IntArrayRef w_shape, const WholeMap& map, bool kernel);

/// Whether this build has FoldWholeMapGrad's kernel (the ResNets' CUDA
/// kernels).
bool WholeMapKernelBuilt();

/// Below this many images a step, the whole map's convolution and its fold
/// take their stage's late join group (WholeMapFilter), so that its filter
/// gradient and the fold run beside the rest of the backward as the other
/// convolutions' do; from it on they join at once. Measured on an H200 at
/// 32 px, side by side, the fold kernel on: at batch 128 in fp32 late gained
/// 3.0% (ResNet18) and 1.5% (ResNet50); at batch 1024 it lost 1.0% and 0.4%
/// in bf16 and 0.3% for ResNet50 in fp32 (ResNet18 fp32 +0.1%).
constexpr int64_t kWholeMapLateBelowRows = 512;

/// Whether the whole map's convolution for `rows` images joins late: below
/// kWholeMapLateBelowRows, and only where its filter (of `filter_type`)
/// reaches it uncast in `compute_type` (an autocast cast's backward would
/// read the gradient before the join).
bool WholeMapJoinsLate(int64_t rows, c10::ScalarType filter_type, c10::ScalarType compute_type);

/// x (N, C, h, w) as (N, h * w * C, 1, 1), pixel-major, channels_last (so
/// that the cuDNN path takes the NHWC layout it takes for x): a view where x
/// is channels_last (a copy otherwise).
torch::Tensor MapAsChannels(const torch::Tensor& x);

/// y (N, ho * wo * K, 1, 1), pixel-major, as (N, K, ho, wo) in
/// channels_last: a view. Then conv2d(x, w, stride, padding) ==
/// ChannelsAsMap(conv2d(MapAsChannels(x), WholeMapFilter(w, map)), map)
/// where WholeMapPlan gave `map`.
torch::Tensor ChannelsAsMap(const torch::Tensor& y, const WholeMap& map);

/// From this many images a step the whole-map form runs in bf16 and half as
/// well as in fp32 (H200, 32 px: at batch 1024 it gained 1.2-4.7%
/// in bf16 and 2.3-7.5% in fp32; at batch 128 it lost 0.8-2.9% in bf16, and
/// in fp32 gained 4.2% for ResNet18 and kept ResNet50's rate; between the two
/// unmeasured).
constexpr int64_t kWholeMapMinRows = 512;

/// Whether a convolution the whole-map rule takes (WholeMapPlan) runs in that
/// form, for `rows` images computed in `type` (the cuDNN path's: autocast's
/// under autocast): as `forced` where it is set, else in fp32 always and in
/// other types from kWholeMapMinRows images.
bool WholeMapApplies(std::optional<bool> forced, int64_t rows, c10::ScalarType type);

}  // namespace resnet

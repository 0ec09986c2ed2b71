#pragma once
// The ResNet stem's convolution (7x7, stride 2, padding 3, 1-4 input
// channels) in space-to-depth form on CUDA (stem_kernels.h: the image's 2x2
// blocks as channels, the filter as a 4x4 stride-1 one over them, through
// the cuDNN path of plugins/models/resnet/cudnn/cudnn_conv.h): the same output and weight
// gradient, at the H200's measure 2x (32x32 images) to 2.6x (224x224) faster
// than cuDNN's own kernels for the 7x7 one.

#include <torch/types.h>

#include "cudnn_conv.h"

namespace resnet {

/// Whether StemConv takes conv2d(x, w, stride, padding): this build has the
/// kernels and the cuDNN path; x (N, C, H, W) is a channels_last CUDA image
/// that needs no gradient (the stem's input; C 2-4: with one channel
/// channels_last cannot be told from NCHW); w (K, C, 7, 7) on its
/// device; stride 2, padding 3; cudnn_conv::Supports(x, w).
bool StemApplies(const torch::Tensor& x, const torch::Tensor& w, int64_t stride, int64_t padding);

/// conv2d(x, w, 2, 3) in space-to-depth form, with w's gradient (x gets none),
/// in channels_last, in autocast's type under CUDA autocast (else x's, which
/// must be w's). Only where StemApplies.
torch::Tensor StemConv(const torch::Tensor& x, const torch::Tensor& w,
                       const trainbench::plugins::cudnn_conv::Settings& settings);

}  // namespace resnet

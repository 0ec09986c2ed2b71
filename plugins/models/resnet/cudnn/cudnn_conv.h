#pragma once
// 2-D convolution (no bias, one group) through cuDNN's backend API, with a
// warm start: the engine for each shape is chosen as LibTorch chooses it
// (cuDNN's candidates timed when at::globalContext().benchmarkCuDNN(), at most
// benchmarkLimitCuDNN() of them; else cuDNN's first heuristic choice), and an
// autotuned choice is kept per machine in an EngineCache file under
// sdk::CacheDirectory() (trainbench/sdk/cache.h), so a repeat run on the same machine times nothing.
// Built where this build has CUDA and cuDNN's headers (TRAINBENCH_CUDNN_CONV);
// Built() says whether it was.

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>

namespace trainbench::plugins::cudnn_conv {

/// Whether this build has the cuDNN path.
bool Built() noexcept;

/// Whether Conv2d takes these: this build has the path, and x (N, C, H, W)
/// and w (K, C, R, S) are CUDA tensors of one floating type (float,
/// bfloat16, half; under CUDA autocast, any: both are cast to its type).
bool Supports(const torch::Tensor& x, const torch::Tensor& w) noexcept;

/// The type Conv2d computes x's convolution in: autocast's where CUDA
/// autocast is on (both operands are cast to it), else x's.
at::ScalarType ComputeType(const torch::Tensor& x);

/// How the engines are chosen, besides LibTorch's global cuDNN settings.
struct Settings {
  /// Whether cuDNN's runtime-compiled engines are candidates. They are in
  /// LibTorch's autotuning; here they are not by default: each takes 0.1-0.4 s
  /// to build (NVRTC) in every process that times it, and on an H200 (cuDNN
  /// 9.19) one won for 2 of 288 tuned ResNet convolutions, by 0.036 ms
  /// (docs/results/raw/h200-resnets-log.md, section 4).
  bool runtime_compiled = false;
  /// The most workspace bytes an engine may need to be a candidate, in
  /// autotuning and in cuDNN's heuristic choice alike (0: no limit). Part of
  /// the engine choice: a cache entry tuned under one limit is not used
  /// under another.
  int64_t workspace_limit = 0;
  /// Inside a captured step, whether the backward may leave the filter's
  /// gradient running on its side stream (SideStream::Leave) for a later
  /// join: -1, no; else the group (0 or more) of the JoinBeforeGradients
  /// (side_stream.h) that `w` reached the convolution through, whose backward
  /// joins it before anything reads the gradient. Not part of the engine
  /// choice.
  int64_t late_join_group = -1;
  /// One line on stderr (the cell's log) per autotuned operation: its
  /// candidates, their times, the engine chosen (bench/tuning_log.py sums the
  /// lines up). Not part of the engine choice.
  bool tune_log = false;
};

/// conv2d(x, w, stride, padding) with autograd (gradients of x and w), in x's
/// memory format (channels_last or contiguous). Throws c10::Error when cuDNN
/// has no engine for it. While a CUDA graph is being captured, the backward
/// runs the filter's gradient on a side stream beside the data's (see
/// side_stream.h), joined before it returns or, with
/// `settings.late_join_group`, later.
torch::Tensor Conv2d(const torch::Tensor& x, const torch::Tensor& w, std::array<int64_t, 2> stride,
                     std::array<int64_t, 2> padding, const Settings& settings = {});

/// How this process's plans got their engines.
struct Counts {
  int64_t tuned = 0;              ///< candidates timed (cuDNN autotuning), then stored in the file
  int64_t cached = 0;             ///< read from the file: nothing timed
  int64_t heuristic = 0;          ///< cuDNN's first heuristic choice (no autotuning asked, or inside a graph capture)
  int64_t timed = 0;              ///< candidate engines timed in all
  int64_t gathered_ahead = 0;     ///< tunings whose candidates a helper thread had gathered
  int64_t side_stream_grads = 0;  ///< backward passes that ran the filter's gradient beside the data's (see Conv2d)
  int64_t late_filter_grads = 0;  ///< of those, how many left it running for a later join (late_join_group)
};
Counts GetCounts();

/// The cache file this process uses (empty when it has none).
std::string CacheFile();

/// Forgets this process's plans and reopens the cache file: the next call
/// behaves as in a fresh process (tests of the warm start).
void ResetForTesting();

}  // namespace trainbench::plugins::cudnn_conv

#pragma once
// GPU time of a step as a training step runs it: `repeats` calls captured in
// one CUDA graph (the host's launch rate left out), the graph replayed 7
// times, the median replay over `repeats` in microseconds (CUDA events). The
// step runs 3 times first, outside the capture (its kernels' first-use
// set-up). For the micro-benchmarks under bench/.
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace bench {

inline double MedianMicros(const std::function<void()>& step, int repeats = 20) {
  for (int i = 0; i < 3; ++i) step();
  torch::cuda::synchronize();
  at::cuda::CUDAGraph graph;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    graph.capture_begin();
    for (int i = 0; i < repeats; ++i) step();
    graph.capture_end();
  }
  graph.replay();
  std::vector<double> times;
  for (int t = 0; t < 7; ++t) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    graph.replay();
    stop.record();
    stop.synchronize();
    times.push_back(start.elapsed_time(stop) * 1000.0 / repeats);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace bench

#pragma once
// The GPU tests' captured step, taken as the trainer (and torch.cuda.graph)
// takes one: `step` once on a side stream (the warm-up, after which
// `after_warm_up` can keep what it computed), then `step` again captured into
// `graph` on that stream.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace trainbench::testing {

template <class Step, class AfterWarmUp>
void WarmUpAndCapture(at::cuda::CUDAGraph& graph, Step&& step, AfterWarmUp&& after_warm_up) {
  auto stream = c10::cuda::getStreamFromPool();
  const c10::cuda::CUDAStreamGuard guard(stream);
  step();
  after_warm_up();
  stream.synchronize();
  graph.capture_begin();
  step();
  graph.capture_end();
}

template <class Step>
void WarmUpAndCapture(at::cuda::CUDAGraph& graph, Step&& step) {
  WarmUpAndCapture(graph, step, [] {});
}

}  // namespace trainbench::testing

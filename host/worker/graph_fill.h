#pragma once
// Memset nodes of a CUDA graph rewritten as kernel nodes that write the same
// bytes: the host worker's captured training step (the cuda device's graph_fill option,
// host/worker/step_timer.cc). Inside a captured step, a memset node between
// two kernels (cuDNN zeroing its workspace before its kernel) left the GPU
// idle about 4.4 us before it and 3-4 us after it on an H200, against about
// 0.85 us between two kernels (kernel traces; bench/graph_node_gaps.cu
// measures the two alone). Host code; the kernel is in graph_fill.cu.
#include <cuda_runtime_api.h>

namespace trainbench::worker::graph_fill {

/// Replaces every memset node of `graph` (not of its child graphs) by a
/// kernel node with the same dependencies and dependents that writes the same
/// bytes; `replaced` (if given) gets how many. On an error the graph may be
/// half rewritten: the caller drops it.
cudaError_t MemsetsAsKernels(cudaGraph_t graph, int* replaced) noexcept;

}  // namespace trainbench::worker::graph_fill

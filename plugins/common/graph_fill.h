#pragma once
// Memset nodes of a CUDA graph rewritten as kernel nodes that write the same
// bytes. Inside a captured training step, a memset node between two kernels
// (cuDNN zeroing its workspace before its kernel) left the GPU idle about
// 4.4 us before it and 3-4 us after it on an H200, against about 0.85 us
// between two kernels (session 27's traces; bench/graph_node_gaps.cu measures
// the two alone). Host code; the kernel is in graph_fill.cu.
#include <cuda_runtime_api.h>

namespace trainbench::plugins::graph_fill {

/// Replaces every memset node of `graph` (not of its child graphs) by a
/// kernel node with the same dependencies and dependents that writes the same
/// bytes; `replaced` (if given) gets how many. On an error the graph may be
/// half rewritten: the caller drops it.
cudaError_t MemsetsAsKernels(cudaGraph_t graph, int* replaced) noexcept;

/// What JoinCapture did.
enum class Join {
  kJoined,     ///< `child` is a node of the capture; the stream's next node follows it
  kNotJoined,  ///< nothing changed (the capture's state could not be read, or the node not added)
  kBroken,     ///< added, but the stream's next node could not be made to follow it: fail the capture
};

/// Adds a copy of `child` to the capture in progress on `stream` as one child
/// graph node, after what the stream's next node would have followed, and
/// makes the stream's next node follow it (CUDA 12's and 13's signatures).
Join JoinCapture(cudaStream_t stream, cudaGraph_t child) noexcept;

}  // namespace trainbench::plugins::graph_fill

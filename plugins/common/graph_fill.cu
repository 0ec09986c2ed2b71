// See graph_fill.h.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph_fill.h"

namespace trainbench::plugins::graph_fill {
namespace {

constexpr int kThreads = 256;

// What cudaMemset2DAsync does: `height` rows of `width` elements of
// `element_size` bytes (1, 2 or 4), rows `pitch` bytes apart, each set to
// `value` (its low bytes).
__global__ void __launch_bounds__(kThreads)
    FillKernel(char* dst, size_t pitch, unsigned value, unsigned element_size, size_t width, size_t height) {
  const size_t total = width * height;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < total; i += size_t{gridDim.x} * kThreads) {
    char* p = dst + (i / width) * pitch + (i % width) * element_size;
    if (element_size == 4)
      *reinterpret_cast<uint32_t*>(p) = value;
    else if (element_size == 2)
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(value);
    else
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(value);
  }
}

// A memset's parameters as 4-byte words where its rows are whole words on
// word boundaries (the value repeated): a quarter or half of the stores.
cudaMemsetParams Widened(cudaMemsetParams m) {
  const size_t row_bytes = m.width * m.elementSize;
  const auto address = reinterpret_cast<uintptr_t>(m.dst);
  if (m.elementSize < 4 && row_bytes % 4 == 0 && address % 4 == 0 && (m.height <= 1 || m.pitch % 4 == 0)) {
    const unsigned byte = m.value & 0xffu, half = m.value & 0xffffu;
    m.value = m.elementSize == 1 ? byte * 0x01010101u : half | (half << 16);
    m.elementSize = 4;
    m.width = row_bytes / 4;
  }
  return m;
}

cudaError_t GetDependencies(cudaGraphNode_t node, std::vector<cudaGraphNode_t>* out, bool dependents) {
  size_t count = 0;
#if CUDART_VERSION >= 13000
  cudaError_t e = dependents ? cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &count)
                             : cudaGraphNodeGetDependencies(node, nullptr, nullptr, &count);
  if (e != cudaSuccess) return e;
  out->resize(count);
  return count == 0   ? cudaSuccess
         : dependents ? cudaGraphNodeGetDependentNodes(node, out->data(), nullptr, &count)
                      : cudaGraphNodeGetDependencies(node, out->data(), nullptr, &count);
#else
  cudaError_t e = dependents ? cudaGraphNodeGetDependentNodes(node, nullptr, &count)
                             : cudaGraphNodeGetDependencies(node, nullptr, &count);
  if (e != cudaSuccess) return e;
  out->resize(count);
  return count == 0   ? cudaSuccess
         : dependents ? cudaGraphNodeGetDependentNodes(node, out->data(), &count)
                      : cudaGraphNodeGetDependencies(node, out->data(), &count);
#endif
}

cudaError_t AddEdge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
  return cudaGraphAddDependencies(graph, &from, &to, nullptr, 1);
#else
  return cudaGraphAddDependencies(graph, &from, &to, 1);
#endif
}

}  // namespace

cudaError_t MemsetsAsKernels(cudaGraph_t graph, int* replaced) noexcept {
  if (replaced != nullptr) *replaced = 0;
  size_t count = 0;
  if (cudaError_t e = cudaGraphGetNodes(graph, nullptr, &count); e != cudaSuccess) return e;
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0)
    if (cudaError_t e = cudaGraphGetNodes(graph, nodes.data(), &count); e != cudaSuccess) return e;
  for (const cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (cudaError_t e = cudaGraphNodeGetType(node, &type); e != cudaSuccess) return e;
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams m{};
    if (cudaError_t e = cudaGraphMemsetNodeGetParams(node, &m); e != cudaSuccess) return e;
    m = Widened(m);
    std::vector<cudaGraphNode_t> before, after;
    if (cudaError_t e = GetDependencies(node, &before, false); e != cudaSuccess) return e;
    if (cudaError_t e = GetDependencies(node, &after, true); e != cudaSuccess) return e;
    char* dst = static_cast<char*>(m.dst);
    size_t pitch = m.pitch, width = m.width, height = m.height < 1 ? 1 : m.height;
    unsigned value = m.value, element_size = m.elementSize;
    void* args[] = {&dst, &pitch, &value, &element_size, &width, &height};
    cudaKernelNodeParams k{};
    k.func = reinterpret_cast<void*>(&FillKernel);
    const size_t blocks = (width * height + kThreads - 1) / kThreads;
    k.gridDim = dim3(static_cast<unsigned>(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks));
    k.blockDim = dim3(kThreads);
    k.kernelParams = args;
    cudaGraphNode_t fill = nullptr;
    if (cudaError_t e = cudaGraphAddKernelNode(&fill, graph, before.data(), before.size(), &k); e != cudaSuccess)
      return e;
    for (const cudaGraphNode_t next : after)
      if (cudaError_t e = AddEdge(graph, fill, next); e != cudaSuccess) return e;
    if (cudaError_t e = cudaGraphDestroyNode(node); e != cudaSuccess) return e;
    if (replaced != nullptr) ++*replaced;
  }
  return cudaSuccess;
}

Join JoinCapture(cudaStream_t stream, cudaGraph_t child) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* dependencies = nullptr;
  size_t count = 0;
#if CUDART_VERSION >= 13000
  // Fails (cudaErrorLossyQuery) where an edge is of a kind this form cannot
  // report: then nothing joins.
  const cudaError_t queried =
      cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &dependencies, nullptr, &count);
#else
  const cudaError_t queried = cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &dependencies, &count);
#endif
  cudaGraphNode_t node = nullptr;
  if (queried != cudaSuccess || status != cudaStreamCaptureStatusActive ||
      cudaGraphAddChildGraphNode(&node, graph, dependencies, count, child) != cudaSuccess)
    return Join::kNotJoined;
#if CUDART_VERSION >= 13000
  const cudaError_t set =
      cudaStreamUpdateCaptureDependencies(stream, &node, nullptr, 1, cudaStreamSetCaptureDependencies);
#else
  const cudaError_t set = cudaStreamUpdateCaptureDependencies(stream, &node, 1, cudaStreamSetCaptureDependencies);
#endif
  return set == cudaSuccess ? Join::kJoined : Join::kBroken;
}

}  // namespace trainbench::plugins::graph_fill

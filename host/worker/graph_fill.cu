// See graph_fill.h.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph_fill.h"

namespace trainbench::worker::graph_fill {
namespace {

constexpr int kThreads = 256;

// What cudaMemset2DAsync does: `height` rows of `width` stores of T each,
// rows `pitch` bytes apart, each set to `value`.
template <typename T>
__global__ void __launch_bounds__(kThreads) FillKernel(char* dst, size_t pitch, T value, size_t width, size_t height) {
  const size_t total = width * height;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < total; i += size_t{gridDim.x} * kThreads)
    // (one row: no 64-bit division a store)
    *reinterpret_cast<T*>(height == 1 ? dst + i * sizeof(T) : dst + (i / width) * pitch + (i % width) * sizeof(T)) =
        value;
}

// A memset as stores as wide as its rows' alignment allows: 16 bytes (the
// value repeated) where its rows are whole 16-byte words on 16-byte
// boundaries (cuDNN's workspaces are), else 4, else its own element size.
// With 4-byte stores at most, a fill node of 4 MiB added 3.06
// us to a graph against a memset node's 1.91 (bench/graph_node_gaps.cu).
struct Stores {
  unsigned bytes;  // 16, 4, 2 or 1
  uint32_t word;   // the value repeated over 4 bytes (its low bytes for 2 and 1)
  size_t width;    // stores a row
};

Stores Widest(const cudaMemsetParams& m) {
  const size_t row_bytes = m.width * m.elementSize;
  const auto address = reinterpret_cast<uintptr_t>(m.dst);
  const unsigned byte = m.value & 0xffu, half = m.value & 0xffffu;
  const uint32_t word = m.elementSize == 1 ? byte * 0x01010101u : m.elementSize == 2 ? half | (half << 16) : m.value;
  for (const unsigned bytes : {16u, 4u})
    if (bytes > m.elementSize && row_bytes % bytes == 0 && address % bytes == 0 &&
        (m.height <= 1 || m.pitch % bytes == 0))
      return {bytes, word, row_bytes / bytes};
  return {m.elementSize, word, m.width};
}

// The kernel node's function and its value argument for `s`.
void* FillFunction(const Stores& s) {
  switch (s.bytes) {
    case 16:
      return reinterpret_cast<void*>(&FillKernel<uint4>);
    case 4:
      return reinterpret_cast<void*>(&FillKernel<uint32_t>);
    case 2:
      return reinterpret_cast<void*>(&FillKernel<uint16_t>);
    default:
      return reinterpret_cast<void*>(&FillKernel<uint8_t>);
  }
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
    const Stores stores = Widest(m);
    std::vector<cudaGraphNode_t> before, after;
    if (cudaError_t e = GetDependencies(node, &before, false); e != cudaSuccess) return e;
    if (cudaError_t e = GetDependencies(node, &after, true); e != cudaSuccess) return e;
    char* dst = static_cast<char*>(m.dst);
    size_t pitch = m.pitch, width = stores.width, height = m.height < 1 ? 1 : m.height;
    // The value as the kernel's T: its bytes are the word's, repeated.
    const uint4 value = make_uint4(stores.word, stores.word, stores.word, stores.word);
    void* args[] = {&dst, &pitch, const_cast<uint4*>(&value), &width, &height};
    cudaKernelNodeParams k{};
    k.func = FillFunction(stores);
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

}  // namespace trainbench::worker::graph_fill

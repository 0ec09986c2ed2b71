// Memset nodes of a CUDA graph rewritten as kernel nodes (host/worker/
// graph_fill.h): the same bytes written, at the same place in the graph
// (a copy after the memset reads what it wrote; one before it does not), for
// 1-d and 2-d memsets, aligned or not. CUDA builds; skipped without a GPU.
#include "graph_fill.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace {

namespace graph_fill = trainbench::worker::graph_fill;

struct GraphOwner {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphOwner() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

int CountNodes(cudaGraph_t graph, cudaGraphNodeType type) {
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) {
    EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
  }
  int n = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t{};
    EXPECT_EQ(cudaGraphNodeGetType(node, &t), cudaSuccess);
    n += t == type;
  }
  return n;
}

// A buffer of 0x5a bytes; a captured graph of: a copy of it (before), memsets
// of [offset, offset + bytes) to `value` as 1-d and of a 2-d block, a copy
// after; rewritten, replayed, checked byte by byte against the same
// operations done by the host.
void Check(size_t offset, size_t bytes, int value) {
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8);
  const int64_t size = 4096;
  torch::Tensor buf = torch::full({size}, 0x5a, opts);
  torch::Tensor before = torch::empty({size}, opts), after = torch::empty({size}, opts);
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  // buf's fill ran on the current stream, the graph runs on a pool stream
  // that does not wait for it (once, on an H200, a copy before the memset
  // read buf before the fill had written all of it).
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GraphOwner g;
  auto* base = static_cast<uint8_t*>(buf.data_ptr());
  ASSERT_EQ(cudaStreamBeginCapture(stream.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    before.copy_(buf);
    ASSERT_EQ(cudaMemsetAsync(base + offset, value, bytes, stream.stream()), cudaSuccess);
    // 3 rows of 40 bytes, 100 bytes apart, from 2000 on
    ASSERT_EQ(cudaMemset2DAsync(base + 2000, 100, value ^ 0xff, 40, 3, stream.stream()), cudaSuccess);
    after.copy_(buf);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream.stream(), &g.graph), cudaSuccess);
  const int memsets = CountNodes(g.graph, cudaGraphNodeTypeMemset);
  ASSERT_EQ(memsets, 2);
  int replaced = -1;
  ASSERT_EQ(graph_fill::MemsetsAsKernels(g.graph, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, 2);
  EXPECT_EQ(CountNodes(g.graph, cudaGraphNodeTypeMemset), 0);
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(g.exec, stream.stream()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.stream()), cudaSuccess);

  std::vector<uint8_t> expected(size, 0x5a);
  for (size_t i = offset; i < offset + bytes; ++i) expected[i] = static_cast<uint8_t>(value);
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 40; ++c) expected[2000 + r * 100 + c] = static_cast<uint8_t>(value ^ 0xff);
  const torch::Tensor want = torch::from_blob(expected.data(), {size}, torch::kUInt8).to(torch::kCUDA);
  EXPECT_TRUE(torch::equal(after, want)) << "offset " << offset << ", " << bytes << " bytes";
  EXPECT_TRUE(torch::equal(buf, want));
  EXPECT_TRUE(torch::equal(before, torch::full({size}, 0x5a, opts))) << "the copy before saw the memset";
}

TEST(GraphFill, WritesWhatTheMemsetsWroteWhereTheyWere) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Check(0, 1024, 0);       // aligned: 16-byte stores
  Check(512, 1536, 0x33);  // 16-byte stores of a value other than 0
  Check(64, 1000, 0x7f);   // aligned start, whole 4-byte words, not 16-byte ones
  Check(3, 17, 0xab);      // neither aligned nor whole words: bytes
  Check(1, 1, 0x01);       // one byte
}

TEST(GraphFill, LeavesAGraphWithoutMemsetsAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  torch::Tensor x = torch::ones({256}, torch::kCUDA);
  GraphOwner g;
  ASSERT_EQ(cudaStreamBeginCapture(stream.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    x.mul_(2);
  }
  ASSERT_EQ(cudaStreamEndCapture(stream.stream(), &g.graph), cudaSuccess);
  const int kernels = CountNodes(g.graph, cudaGraphNodeTypeKernel);
  int replaced = -1;
  ASSERT_EQ(graph_fill::MemsetsAsKernels(g.graph, &replaced), cudaSuccess);
  EXPECT_EQ(replaced, 0);
  EXPECT_EQ(CountNodes(g.graph, cudaGraphNodeTypeKernel), kernels);
}

}  // namespace

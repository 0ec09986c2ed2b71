// What a CUDA graph adds between two kernels, per kind of node between them.
//
// Kernel traces of the ResNets' captured steps on an H200 showed the
// GPU idle about 4.4 us before and 3-4 us after each memset node that a cuDNN
// engine puts before its kernel (between a batch norm and a convolution),
// against about 0.85 us between two kernels (docs/results/raw/h200-resnets-log.md,
// section 22). This program measures that alone, and the two ways around it:
// the same bytes written by a kernel node (host/worker/graph_fill.h's
// rewrite of the whole graph: the host worker's graph fill).
// Child graphs were measured too (a cuDNN execution captured into a graph of
// its own, its memset rewritten): no cost here, but about 0.2 us a node in
// the ResNets' steps; that form is gone.
//
// Each graph is R rounds of [work kernel, then the node(s) under test], all
// on one stream; the work kernel fills the device for a few microseconds. The
// graphs are replayed, timed with events, the median of the replays taken;
// "added" is (the graph's time - the plain graph's) / R: what one such node
// costs on the step's critical path.
//
//   graph_node_gaps [rounds] [replays]     (default 64 and 25)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph_fill.h"

namespace {

namespace graph_fill = trainbench::worker::graph_fill;

#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    const cudaError_t e = (call);                                                                          \
    if (e != cudaSuccess) {                                                                                \
      std::fprintf(stderr, "graph_node_gaps: %s: %s (line %d)\n", #call, cudaGetErrorString(e), __LINE__); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

constexpr int kThreads = 256;

// A few microseconds of work over the whole device: each thread updates one
// float `iters` times.
__global__ void Work(float* buf, int n, int iters) {
  const int i = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (i >= n) return;
  float v = buf[i];
  for (int k = 0; k < iters; ++k) v = v * 0.999f + 0.001f;
  buf[i] = v;
}

enum class Between { kNothing, kMemset, kFill };
const char* Name(Between b) {
  switch (b) {
    case Between::kNothing:
      return "nothing (kernel to kernel)";
    case Between::kMemset:
      return "a memset node";
    case Between::kFill:
      return "a memset rewritten as a fill kernel (graph_fill.h)";
  }
  return "?";
}

struct Setup {
  float* work = nullptr;
  int work_n = 0, work_iters = 0, work_blocks = 0;
  uint32_t* scratch = nullptr;
  size_t scratch_bytes = 0;
};

void LaunchWork(const Setup& s, cudaStream_t stream) {
  Work<<<s.work_blocks, kThreads, 0, stream>>>(s.work, s.work_n, s.work_iters);
}
void Memset(const Setup& s, cudaStream_t stream) { CHECK(cudaMemsetAsync(s.scratch, 0, s.scratch_bytes, stream)); }

cudaGraphExec_t Build(const Setup& s, Between between, int rounds, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < rounds; ++r) {
    LaunchWork(s, stream);
    switch (between) {
      case Between::kMemset:
      case Between::kFill:  // rewritten below
        Memset(s, stream);
        break;
      default:
        break;
    }
  }
  LaunchWork(s, stream);  // every node under test between two work kernels
  CHECK(cudaStreamEndCapture(stream, &graph));
  // The whole captured graph's memsets as kernels (the host's rewrite of a
  // captured step).
  if (between == Between::kFill) CHECK(graph_fill::MemsetsAsKernels(graph, nullptr));
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  return exec;
}

// The median of `replays` timed replays, us.
double Time(cudaGraphExec_t exec, int replays, cudaStream_t stream) {
  cudaEvent_t a = nullptr, b = nullptr;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
  std::vector<double> us;
  for (int i = 0; i < replays; ++i) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 64;
  const int replays = argc > 2 ? std::max(1, std::atoi(argv[2])) : 25;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Setup s;
  s.work_blocks = prop.multiProcessorCount * 4;
  s.work_n = s.work_blocks * kThreads;
  s.work_iters = 2000;
  CHECK(cudaMalloc(&s.work, s.work_n * sizeof(float)));
  CHECK(cudaMemset(s.work, 0, s.work_n * sizeof(float)));
  std::printf("# What a CUDA graph adds between two kernels (%s, %d rounds, median of %d replays)\n\n", prop.name,
              rounds, replays);
  for (const size_t bytes : {size_t{64} << 10, size_t{4} << 20}) {
    s.scratch_bytes = bytes;
    CHECK(cudaMalloc(&s.scratch, bytes));
    std::printf(
        "## %zu KiB written between the work kernels\n\n| between | graph us | added us per node |\n|---|---|---|\n",
        bytes >> 10);
    double plain = 0;
    for (const Between b : {Between::kNothing, Between::kMemset, Between::kFill}) {
      const cudaGraphExec_t exec = Build(s, b, rounds, stream);
      const double us = Time(exec, replays, stream);
      CHECK(cudaGraphExecDestroy(exec));
      if (b == Between::kNothing) plain = us;
      std::printf("| %s | %.1f | %+.2f |\n", Name(b), us, (us - plain) / rounds);
    }
    std::printf("\n");
    CHECK(cudaFree(s.scratch));
  }
  CHECK(cudaFree(s.work));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}

// The convolutions through cuDNN's backend API with a warm start
// (plugins/models/resnet/cudnn/cudnn_conv.h) against LibTorch's: outputs and both
// gradients for every dtype and layout the ResNets use, the shapes of their
// layers (7x7/2 stem, 3x3, 1x1, strided, 1x1 maps); a repeat run reads its
// engines from the file and times nothing; runtime-compiled engines only
// when asked; a corrupt or tampered file is rebuilt; heuristics alone store
// nothing; the path replays in a CUDA graph and follows autocast; the
// tuning's stream gate holds a stream and lets go; the backward problems'
// candidates can be gathered ahead. Built where the path is (CUDA and cuDNN
// headers); skipped without a GPU.
#include "cudnn_conv.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <ucontext.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "autocast_scope.h"
#include "cuda_graph.h"
#include "mixed_precision.h"
#include "optimizer.h"
#include "relative_error.h"
#include "remove_tree.h"
#include "resnet.h"
#include "step_timer.h"
#include "stream_gate.h"
#include "whole_map.h"

namespace {

namespace cudnn_conv = trainbench::plugins::cudnn_conv;
namespace sdk = trainbench::sdk;
using trainbench::plugins::MakeResNet;
using trainbench::plugins::ResNetSpec;

// Where a crash happened, for a test program on a machine without a
// debugger: the faulting address, then every word near the top of the stack
// that points into a loaded library (a call through a null pointer leaves
// no frame to unwind, but its return address is on the stack). Not
// async-signal-safe; the program is going down anyway.
void ReportCrash(int signal, siginfo_t* info, void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto* sp = reinterpret_cast<const uintptr_t*>(uc->uc_mcontext.gregs[REG_RSP]);
  std::fprintf(stderr, "crash: signal %d at pc %#lx, address %p; code addresses on the stack:\n", signal,
               static_cast<unsigned long>(pc), info->si_addr);
  for (int i = 0; i < 256; ++i) {
    Dl_info where{};
    const uintptr_t word = sp[i];
    if (word < 4096 || dladdr(reinterpret_cast<void*>(word), &where) == 0 || where.dli_fname == nullptr) continue;
    std::fprintf(stderr, "  [sp+%d] %s+%#lx (%s)\n", i * 8, where.dli_fname,
                 static_cast<unsigned long>(word - reinterpret_cast<uintptr_t>(where.dli_fbase)),
                 where.dli_sname != nullptr ? where.dli_sname : "?");
  }
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

const bool kCrashReport = [] {
  struct sigaction action {};
  action.sa_sigaction = ReportCrash;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
  return true;
}();
namespace fs = std::filesystem;

struct Case {
  torch::Dtype dtype;
  bool channels_last;
  int64_t n, c, hw, k, kernel, stride, padding;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const std::string type = c.dtype == torch::kFloat ? "Fp32" : c.dtype == torch::kBFloat16 ? "Bf16" : "Half";
  return type + (c.channels_last ? "Nhwc" : "Nchw") + "_C" + std::to_string(c.c) + "_Hw" + std::to_string(c.hw) + "_K" +
         std::to_string(c.k) + "_R" + std::to_string(c.kernel) + "_S" + std::to_string(c.stride);
}

using trainbench::testing::RelativeError;
using trainbench::testing::RemoveTree;

struct Result {
  torch::Tensor y, dx, dw;
};

// One forward and backward, through our path or LibTorch's (or LibTorch's in
// fp64: the truth).
Result RunConv(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& dy, const Case& c, int path) {
  const auto type = path == 2 ? torch::kDouble : x0.scalar_type();
  torch::Tensor x = x0.to(type).detach().requires_grad_(), w = w0.to(type).detach().requires_grad_();
  torch::Tensor y = path == 0 ? cudnn_conv::Conv2d(x, w, {c.stride, c.stride}, {c.padding, c.padding})
                              : torch::conv2d(x, w, {}, c.stride, c.padding);
  y.backward(dy.to(type));
  return {y.detach(), x.grad(), w.grad()};
}

class ScopedCacheHome {
 public:
  ScopedCacheHome() {
    dir_ = fs::temp_directory_path() / ("trainbench-cudnn-conv-" + std::to_string(::getpid()));
    RemoveTree(dir_);
    const char* old = std::getenv("XDG_CACHE_HOME");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
    cudnn_conv::ResetForTesting();
    // CUDNN_CONV_TEST_SIDE_STREAM=1: everything on a side stream, as a
    // training step runs (to tell stream-related faults from others).
    const char* side = std::getenv("CUDNN_CONV_TEST_SIDE_STREAM");
    if (side != nullptr && std::string(side) == "1" && torch::cuda::is_available())
      guard_.emplace(c10::cuda::getStreamFromPool());
  }
  ~ScopedCacheHome() {
    if (had_)
      ::setenv("XDG_CACHE_HOME", old_.c_str(), 1);
    else
      ::unsetenv("XDG_CACHE_HOME");
    RemoveTree(dir_);
    cudnn_conv::ResetForTesting();
  }

 private:
  fs::path dir_;
  bool had_ = false;
  std::string old_;
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
};

// cuDNN's autotuning switched on (LibTorch's global, as the cuda device
// sets it) for a scope.
class Autotuning {
 public:
  Autotuning() : was_(at::globalContext().benchmarkCuDNN()) { at::globalContext().setBenchmarkCuDNN(true); }
  ~Autotuning() { at::globalContext().setBenchmarkCuDNN(was_); }
  Autotuning(const Autotuning&) = delete;
  Autotuning& operator=(const Autotuning&) = delete;

 private:
  bool was_;
};

class CudnnConv : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnConv, MatchesLibTorchsConvolution) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  ScopedCacheHome home;
  auto& context = at::globalContext();
  const bool tf32 = context.allowTF32CuDNN();
  context.setAllowTF32CuDNN(false);  // fp32 against fp32
  Autotuning autotuning;
  torch::manual_seed(7);
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  const auto options = torch::TensorOptions(torch::kCUDA).dtype(c.dtype);
  const torch::Tensor x = torch::randn({c.n, c.c, c.hw, c.hw}, options).contiguous(format);
  const torch::Tensor w =
      (torch::randn({c.k, c.c, c.kernel, c.kernel}, options) / std::sqrt(c.c * c.kernel * c.kernel)).contiguous(format);
  const int64_t out = (c.hw + 2 * c.padding - c.kernel) / c.stride + 1;
  const torch::Tensor dy = torch::randn({c.n, c.k, out, out}, options).contiguous(format);
  ASSERT_TRUE(cudnn_conv::Supports(x, w));
  const Result ours = RunConv(x, w, dy, c, 0), theirs = RunConv(x, w, dy, c, 1), truth = RunConv(x, w, dy, c, 2);
  context.setAllowTF32CuDNN(tf32);
  EXPECT_EQ(ours.y.sizes(), theirs.y.sizes());
  EXPECT_EQ(ours.y.scalar_type(), c.dtype);
  EXPECT_EQ(ours.y.is_contiguous(format), true);
  const double floor = c.dtype == torch::kFloat ? 1e-5 : 5e-3;
  const std::pair<const char*, std::array<torch::Tensor, 3>> checks[] = {{"y", {ours.y, theirs.y, truth.y}},
                                                                         {"dx", {ours.dx, theirs.dx, truth.dx}},
                                                                         {"dw", {ours.dw, theirs.dw, truth.dw}}};
  for (const auto& [what, t] : checks) {
    const double mine = RelativeError(t[0], t[2]), libtorch = RelativeError(t[1], t[2]);
    EXPECT_LE(mine, std::max(2 * libtorch, floor)) << what << ": LibTorch's error " << libtorch;
  }
  const auto counts = cudnn_conv::GetCounts();
  EXPECT_EQ(counts.tuned, 3);  // forward, backward data, backward filter
  EXPECT_GT(counts.timed, 0);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (const bool cl : {false, true}) {
      cases.push_back({dtype, cl, 8, 3, 32, 64, 7, 2, 3});      // the ImageNet stem
      cases.push_back({dtype, cl, 8, 64, 16, 64, 3, 1, 1});     // a basic block's 3x3
      cases.push_back({dtype, cl, 8, 64, 16, 128, 3, 2, 1});    // strided 3x3
      cases.push_back({dtype, cl, 8, 256, 8, 512, 1, 2, 0});    // a downsample
      cases.push_back({dtype, cl, 16, 2048, 1, 512, 1, 1, 0});  // a 1x1 map
      cases.push_back({dtype, cl, 4, 5, 9, 6, 3, 1, 1});        // odd channels
    }
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudnnConv, ::testing::ValuesIn(Cases()), Name);

// One step of a small stack of convolutions (a 3x3, then a strided 1x1),
// bf16 and channels_last: what the warm start is for.
struct Stack {
  torch::Tensor w1, w2;
  cudnn_conv::Settings settings{};

  // Random weights for `in` -> `mid` -> `out` channels, from `seed`.
  static Stack Random(uint64_t seed, int64_t in, int64_t mid, int64_t out) {
    torch::manual_seed(seed);
    const auto options = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
    return {(torch::randn({mid, in, 3, 3}, options) * 0.1).contiguous(torch::MemoryFormat::ChannelsLast),
            (torch::randn({out, mid, 1, 1}, options) * 0.1).contiguous(torch::MemoryFormat::ChannelsLast)};
  }
  // An input of `n` 16x16 images for it.
  torch::Tensor Input(int64_t n) const {
    return torch::randn({n, w1.size(1), 16, 16}, w1.options()).contiguous(torch::MemoryFormat::ChannelsLast);
  }
  torch::Tensor Step(const torch::Tensor& x) const {
    torch::Tensor a = torch::Tensor(w1).detach().requires_grad_(), b = torch::Tensor(w2).detach().requires_grad_();
    torch::Tensor h = cudnn_conv::Conv2d(x, a, {1, 1}, {1, 1}, settings).relu();
    cudnn_conv::Conv2d(h, b, {2, 2}, {0, 0}, settings).square().sum().backward();
    return torch::cat({a.grad().flatten(), b.grad().flatten()});
  }
};

TEST(CudnnConvWarmStart, ARepeatRunReadsItsEnginesAndTimesNothing) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  auto& context = at::globalContext();
  const Stack stack = Stack::Random(3, 32, 64, 128);
  const torch::Tensor x = stack.Input(32);

  // First run: every operation timed (x needs no gradient: 5 operations).
  const torch::Tensor first = stack.Step(x);
  auto counts = cudnn_conv::GetCounts();
  EXPECT_EQ(counts.tuned, 5);
  EXPECT_EQ(counts.cached, 0);
  EXPECT_GE(counts.timed, 5);
  const std::string file = cudnn_conv::CacheFile();
  ASSERT_TRUE(fs::exists(file)) << file;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  EXPECT_EQ(j["entries"].size(), 5u);
  EXPECT_FALSE(j["machine"]["gpu"].get<std::string>().empty());

  // A repeat run (a fresh process's state): nothing timed, the same engines.
  cudnn_conv::ResetForTesting();
  const torch::Tensor again = stack.Step(x);
  counts = cudnn_conv::GetCounts();
  EXPECT_EQ(counts.tuned, 0);
  EXPECT_EQ(counts.cached, 5);
  EXPECT_EQ(counts.timed, 0);
  EXPECT_LE(RelativeError(again, first), 1e-2);

  // A corrupt file: rebuilt, with a warning naming it.
  std::ofstream(file, std::ios::trunc) << "{ not json";
  cudnn_conv::ResetForTesting();
  ::testing::internal::CaptureStderr();
  const torch::Tensor rebuilt = stack.Step(x);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_NE(err.find("rebuilding"), std::string::npos) << err;
  EXPECT_EQ(cudnn_conv::GetCounts().tuned, 5);
  EXPECT_LE(RelativeError(rebuilt, first), 1e-2);

  // A tampered file (an engine this cuDNN does not have): that entry is
  // timed again, with a warning; the results stay right.
  j = nlohmann::json::parse(std::ifstream(file));
  ASSERT_EQ(j["entries"].size(), 5u);
  for (auto& [key, entry] : j["entries"].items()) entry["engine"] = 987654;
  std::ofstream(file, std::ios::trunc) << j.dump();
  cudnn_conv::ResetForTesting();
  ::testing::internal::CaptureStderr();
  const torch::Tensor retuned = stack.Step(x);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no longer builds"), std::string::npos) << err;
  EXPECT_EQ(cudnn_conv::GetCounts().tuned, 5);
  EXPECT_LE(RelativeError(retuned, first), 1e-2);
  j = nlohmann::json::parse(std::ifstream(file));
  for (auto& [key, entry] : j["entries"].items()) EXPECT_NE(entry["engine"], 987654) << key;

  // Without autotuning: cuDNN's heuristics, nothing timed, nothing stored.
  context.setBenchmarkCuDNN(false);
  cudnn_conv::ResetForTesting();
  fs::remove(file);
  const torch::Tensor heuristic = stack.Step(x);
  counts = cudnn_conv::GetCounts();
  EXPECT_EQ(counts.heuristic, 5);
  EXPECT_EQ(counts.timed, 0);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_LE(RelativeError(heuristic, first), 1e-2);
}

// The prefetch: while a forward convolution is tuned, a helper thread
// gathers cuDNN's candidates for its two backward problems; their tunings
// take those lists (three of the four gathered here: the first
// convolution's input needs no gradient) and give LibTorch's results.
TEST(CudnnConvPrefetch, GathersTheBackwardCandidatesAhead) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  const Stack stack = Stack::Random(7, 32, 64, 128);
  const torch::Tensor x = stack.Input(32);
  cudnn_conv::ResetForTesting();
  const torch::Tensor with = stack.Step(x);
  const auto counts = cudnn_conv::GetCounts();
  EXPECT_EQ(counts.tuned, 5);
  EXPECT_EQ(counts.gathered_ahead, 3);
  // Against cuDNN's heuristic choices (nothing tuned, nothing gathered).
  at::globalContext().setBenchmarkCuDNN(false);
  cudnn_conv::ResetForTesting();
  const torch::Tensor heuristic = stack.Step(x);
  at::globalContext().setBenchmarkCuDNN(true);
  EXPECT_EQ(cudnn_conv::GetCounts().gathered_ahead, 0);
  EXPECT_LE(RelativeError(with, heuristic), 1e-2);
}

// cuDNN's runtime-compiled engines are candidates only when asked
// (Settings::runtime_compiled), and choices made with and without them are
// kept apart in the file: one never stands in for the other.
TEST(CudnnConvRuntimeCompiled, AreCandidatesOnlyWhenAskedAndKeptApart) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  Stack stack = Stack::Random(5, 64, 64, 256);
  const torch::Tensor x = stack.Input(128);
  const torch::Tensor precompiled = stack.Step(x);
  const auto without = cudnn_conv::GetCounts();
  EXPECT_EQ(without.tuned, 5);

  cudnn_conv::ResetForTesting();
  stack.settings.runtime_compiled = true;
  const torch::Tensor any = stack.Step(x);
  const auto with = cudnn_conv::GetCounts();
  EXPECT_EQ(with.tuned, 5);  // nothing taken from the first run's choices
  EXPECT_EQ(with.cached, 0);
  EXPECT_GE(with.timed, without.timed);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(cudnn_conv::CacheFile()));
  EXPECT_EQ(j["entries"].size(), 10u);
  EXPECT_LE(RelativeError(any, precompiled), 1e-2);
}

// `step` captured in a CUDA graph on a pool stream, after one run outside the
// capture (the engines are chosen there; outside a capture nothing forks).
std::unique_ptr<at::cuda::CUDAGraph> Capture(const std::function<void()>& step) {
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  trainbench::testing::WarmUpAndCapture(*graph, step);
  return graph;
}

// A 3x3 convolution (padding 1) of bf16 channels_last tensors, its weights
// and input random (drawn from the current seed, the weights first) and
// needing gradients: the graph tests' step.
struct GradConv {
  torch::Tensor w, x;
  GradConv(int64_t batch, int64_t in, int64_t out, int64_t hw) {
    const auto options = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
    const auto cl = torch::MemoryFormat::ChannelsLast;
    w = (torch::randn({out, in, 3, 3}, options) * 0.1).contiguous(cl).requires_grad_();
    x = torch::randn({batch, in, hw, hw}, options).contiguous(cl).requires_grad_();
  }
  // The gradients unset (a captured step makes its own), then the backward
  // of dy, or of sum(y^2) where dy is undefined.
  void Step(const torch::Tensor& dy = {}) {
    x.mutable_grad() = torch::Tensor();
    w.mutable_grad() = torch::Tensor();
    const torch::Tensor y = cudnn_conv::Conv2d(x, w, {1, 1}, {1, 1});
    if (dy.defined())
      y.backward(dy);
    else
      y.square().sum().backward();
  }
};

TEST(CudnnConvGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  torch::manual_seed(5);
  GradConv conv(16, 32, 64, 8);
  auto step = [&] { conv.Step(); };
  step();  // eager: engines chosen, the gradients to expect
  const std::vector<torch::Tensor> expected = {conv.x.grad().clone(), conv.w.grad().clone()};
  const auto graph = Capture(step);
  const torch::Tensor x_grad = conv.x.grad(), w_grad = conv.w.grad();
  for (int replay = 0; replay < 3; ++replay) {
    x_grad.zero_();
    w_grad.zero_();
    graph->replay();
    torch::cuda::synchronize();
    EXPECT_LE(RelativeError(x_grad, expected[0]), 1e-2) << replay;
    EXPECT_LE(RelativeError(w_grad, expected[1]), 1e-2) << replay;
  }
}

// The host worker's captured step (worker::MakeGraphedStep) with graph fill
// forced on (the cuda device's graph_fill: always): its memset nodes become
// kernels before it is instantiated (said in the cell's log), in their
// place: a copy after a memset sees it, a kernel before it does not; beside
// them a convolution's backward through the cuDNN path gives the eager
// step's gradients. Forced off, nothing is rewritten.
TEST(HostGraphFill, RewritesTheCapturedStepsMemsetsInPlace) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  torch::manual_seed(9);
  GradConv conv(16, 32, 64, 8);
  const int64_t n = 1 << 16;
  torch::Tensor buf = torch::empty({n}, torch::TensorOptions(torch::kCUDA).dtype(torch::kInt32));
  torch::Tensor seen = torch::empty_like(buf), after = torch::empty_like(buf);
  auto step = [&] {
    buf.fill_(7);
    seen.copy_(buf);  // before the memset: all 7
    ASSERT_EQ(cudaMemsetAsync(buf.data_ptr(), 0, n / 2 * sizeof(int32_t), c10::cuda::getCurrentCUDAStream()),
              cudaSuccess);
    after.copy_(buf);  // half 0, half 7
    conv.Step();
  };
  step();  // eager
  torch::cuda::synchronize();
  const std::vector<torch::Tensor> expected = {conv.x.grad().clone(), conv.w.grad().clone()};
  torch::Tensor want = torch::full({n}, 7, buf.options());
  want.slice(0, 0, n / 2).zero_();
  for (const bool fill : {true, false}) {
    auto graphed = trainbench::worker::MakeGraphedStep(step, 0, "", fill);
    ::testing::internal::CaptureStderr();
    graphed->Run();  // warm-up steps, the capture, a replay
    const std::string log = ::testing::internal::GetCapturedStderr();
    for (int replay = 0; replay < 2; ++replay) {
      seen.zero_();
      after.zero_();
      graphed->Run();
      torch::cuda::synchronize();
      EXPECT_TRUE(torch::equal(seen, torch::full({n}, 7, buf.options()))) << fill << ": the copy before saw the memset";
      EXPECT_TRUE(torch::equal(after, want)) << fill;
      EXPECT_LE(RelativeError(conv.x.grad(), expected[0]), 1e-2) << fill;
      EXPECT_LE(RelativeError(conv.w.grad(), expected[1]), 1e-2) << fill;
    }
    if (fill)
      EXPECT_NE(log.find("graph fill: "), std::string::npos) << log;
    else
      EXPECT_EQ(log.find("graph fill: "), std::string::npos) << log;
    int replaced = 0;
    if (fill && log.find("does not keep") == std::string::npos) {
      EXPECT_EQ(std::sscanf(log.c_str() + log.find("graph fill: "), "graph fill: %d", &replaced), 1) << log;
      EXPECT_GE(replaced, 1) << "at least the step's own memset: " << log;
    }
  }
}

// Inside a capture the backward's two convolutions are two branches of the
// graph (the filter's gradient on a side stream), with the gradients of an
// eager step (where nothing forks).
TEST(CudnnConvGraph, CapturesTheTwoGradientsSideBySide) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  torch::manual_seed(6);
  GradConv conv(32, 64, 128, 8);
  const torch::Tensor dy =
      torch::randn({32, 128, 8, 8}, conv.x.options()).contiguous(torch::MemoryFormat::ChannelsLast);
  auto step = [&] { conv.Step(dy); };
  // A replay of the captured step: the gradients, and how many backward
  // passes used the side stream (the warm-up run is outside the capture).
  const int64_t before = cudnn_conv::GetCounts().side_stream_grads;
  const auto graph = Capture(step);
  const int64_t side = cudnn_conv::GetCounts().side_stream_grads - before;
  const torch::Tensor x_grad = conv.x.grad(), w_grad = conv.w.grad();
  x_grad.fill_(7);
  w_grad.fill_(7);
  graph->replay();
  torch::cuda::synchronize();
  const torch::Tensor x_side = x_grad.clone(), w_side = w_grad.clone();
  EXPECT_EQ(side, 1);
  // An eager step (new gradient tensors): one stream.
  const int64_t eager_before = cudnn_conv::GetCounts().side_stream_grads;
  step();
  torch::cuda::synchronize();
  const torch::Tensor x_one = conv.x.grad(), w_one = conv.w.grad();
  EXPECT_EQ(cudnn_conv::GetCounts().side_stream_grads, eager_before);
  // The same engines either way (a split reduction may add in another order).
  EXPECT_LE(RelativeError(x_side, x_one), 1e-3);
  EXPECT_LE(RelativeError(w_side, w_one), 1e-3);
  // And LibTorch's gradients.
  const torch::Tensor xr = conv.x.detach().requires_grad_(), wr = conv.w.detach().requires_grad_();
  torch::conv2d(xr, wr, {}, 1, 1).backward(dy);
  EXPECT_LE(RelativeError(x_side, xr.grad()), 1e-2);
  EXPECT_LE(RelativeError(w_side, wr.grad()), 1e-2);
}

// ResNet18 or (`bottleneck`) ResNet50 for 32 px images on CUDA with every
// fast path on, its convolution weights channels_last.
std::unique_ptr<sdk::Model> CudaResNet(bool bottleneck) {
  const sdk::Options options(R"({"num_classes": 10, "image_size": 32, "stem": "imagenet", "fused_batchnorm": true,
      "batchnorm_one_pass": true, "fused_maxpool": true, "cudnn_engine_cache": true,
      "cudnn_runtime_compiled": false, "cudnn_tune_log": false, "stem_space_to_depth": true, "fused_classifier": true,
      "cudnn_workspace_limit_mb": 1024, "whole_map_conv": "auto", "sm90_launches": "auto"})");
  const ResNetSpec spec = bottleneck ? ResNetSpec{{3, 4, 6, 3}, true} : ResNetSpec{{2, 2, 2, 2}, false};
  std::unique_ptr<sdk::Model> model = MakeResNet(spec, options);
  model->module().to(torch::kCUDA);
  for (auto& p : model->module().parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  return model;
}

// The worker's step up to its loss: the gradients unset, the forward under
// bf16 autocast (or, with `bf16` false, in fp32), cross entropy in float.
void StepLoss(sdk::Model& model, const torch::Tensor& x, const torch::Tensor& labels, torch::Tensor* loss,
              bool bf16 = true) {
  for (auto& p : model.module().parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor logits;
  {
    trainbench::worker::AutocastScope autocast(c10::kCUDA, bf16 ? sdk::Amp::kBf16 : sdk::Amp::kNone);
    ASSERT_TRUE(model.Forward(x, &logits).ok());
  }
  *loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

// A whole ResNet training step captured in a CUDA graph, where every fork
// runs (the convolutions' two gradients, the downsampling branch beside the
// main path, the filter gradients joined late, before the weight casts'
// backward), against an eager step, where none does: the same gradients and
// running statistics. A missing wait between the branches would let a
// kernel read a tensor before it is written, or free it early; kernels with
// shared state on two streams at once would corrupt each other (with the
// downsampling branch on a side stream and the batch norm's counters per
// device: ResNet50's gradients 1.0-35x off); a branch never joined fails the
// capture. In bf16 (`bf16`) or fp32, where the whole map (whole_map.h)
// takes layer 3's and 4's 3x3 convolutions at every batch.
void ExpectCapturedResNetStepUnchanged(bool bf16) {
  ScopedCacheHome home;
  Autotuning autotuning;
  for (const bool bottleneck : {false, true}) {
    torch::manual_seed(8);
    const std::unique_ptr<sdk::Model> model = CudaResNet(bottleneck);
    const torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast);
    const torch::Tensor labels = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    auto step = [&] {
      torch::Tensor loss;
      StepLoss(*model, x, labels, &loss, bf16);
      loss.backward();
    };
    // The whole map's convolutions (fp32: 7 in ResNet18, 8 in ResNet50) join
    // late too at this batch (below resnet::kWholeMapLateBelowRows).
    static_assert(64 < resnet::kWholeMapLateBelowRows);
    auto zero_running_means = [&] {
      torch::NoGradGuard no_grad;
      for (auto& b : model->module().named_buffers())
        if (b.key().find("running_mean") != std::string::npos) b.value().zero_();
    };
    auto state = [&] {
      std::vector<torch::Tensor> s;
      for (auto& p : model->module().parameters()) s.push_back(p.grad().clone());
      for (auto& b : model->module().named_buffers())
        if (b.key().find("running_mean") != std::string::npos) s.push_back(b.value().clone());
      return s;
    };
    // One replay of a captured step: every gradient, then the running means.
    const cudnn_conv::Counts before = cudnn_conv::GetCounts();
    const auto graph = Capture(step);
    const cudnn_conv::Counts after = cudnn_conv::GetCounts();
    // Every convolution but the stem's (no input gradient) forks in the
    // capture, none in the run before it, and joins late.
    const int64_t forked = after.side_stream_grads - before.side_stream_grads;
    EXPECT_EQ(forked, bottleneck ? 52 : 19);
    EXPECT_EQ(after.late_filter_grads - before.late_filter_grads, forked);
    zero_running_means();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->module().parameters()) p.grad().fill_(7);
    }
    graph->replay();
    torch::cuda::synchronize();
    const std::vector<torch::Tensor> side = state();
    // An eager step: nothing forks.
    zero_running_means();
    step();
    torch::cuda::synchronize();
    EXPECT_EQ(cudnn_conv::GetCounts().side_stream_grads, after.side_stream_grads);
    const std::vector<torch::Tensor> one = state();
    ASSERT_EQ(side.size(), one.size());
    for (size_t i = 0; i < side.size(); ++i)
      EXPECT_LE(RelativeError(side[i], one[i]), 1e-2) << (bottleneck ? "ResNet50" : "ResNet18") << " tensor " << i;
  }
}

TEST(SideStreams, LeaveACapturedResNetStepUnchanged) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectCapturedResNetStepUnchanged(true);
}

TEST(SideStreams, LeaveACapturedFp32ResNetStepUnchanged) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectCapturedResNetStepUnchanged(false);
}

// The optimizer's updates during a captured step's backward (optimizer.h,
// `training.optimizer.overlap`) with the ResNets' weights joined stage by
// stage (resnet.cc, StepWeights) and every side stream, bf16: after replays
// of the captured step (forward, backward, SGD), the same weights and
// gradients as with every update after the backward. An update queued
// before its gradient is written would read the previous replay's gradient;
// one beside a kernel that still reads its weight would change what that
// kernel computes: at this learning rate either shows.
TEST(OptimizerOverlap, UpdatesACapturedResNetStepAsAfterItsBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  for (const bool bottleneck : {false, true}) {
    const std::string name = bottleneck ? "ResNet50" : "ResNet18";
    torch::manual_seed(9);
    const torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast);
    const torch::Tensor labels = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    // Every weight and gradient after two replays, and how many parameters
    // the capture updated during its backward.
    auto trained = [&](bool overlap) {
      torch::manual_seed(10);
      const std::unique_ptr<sdk::Model> model = CudaResNet(bottleneck);
      trainbench::protocol::OptimizerSettings settings;
      settings.lr = 0.2;
      settings.overlap = overlap;
      const auto optimizer = trainbench::worker::MakeOptimizer(settings, model->module().parameters());
      auto step = [&] {
        torch::Tensor loss;
        StepLoss(*model, x, labels, &loss);
        optimizer->BeginBackward();
        loss.backward();
        optimizer->Step();
      };
      const auto graph = Capture(step);
      for (int replay = 0; replay < 2; ++replay) graph->replay();
      torch::cuda::synchronize();
      std::vector<torch::Tensor> state;
      for (auto& p : model->module().parameters()) {
        state.push_back(p.detach().clone());
        state.push_back(p.grad().clone());
      }
      return std::make_pair(state, optimizer->UpdatedDuringBackward());
    };
    const auto [after, none] = trained(false);
    const auto [during, updated] = trained(true);
    EXPECT_EQ(none, 0) << name;
    // The stages whose weights hold 2^20 elements or more (layer3, layer4)
    // and the batch norms between them; the rest after the backward.
    EXPECT_GT(updated, 0) << name;
    EXPECT_LT(updated, static_cast<int64_t>(after.size() / 2)) << name;
    ASSERT_EQ(during.size(), after.size());
    for (size_t i = 0; i < during.size(); ++i)
      EXPECT_LE(RelativeError(during[i], after[i]), 1e-3)
          << name << (i % 2 ? " gradient" : " weight") << " of parameter " << i / 2;
  }
}

// A ResNet on CUDA reading its convolutions' weights through the worker's
// working copies (sdk::Model::UseWorkingCopies, host/worker/mixed_precision.h)
// as the worker offers them under bf16 autocast: with `take`, the worker's
// optimizer hands the copies' parameters to mixed-precision SGD inside the
// backward and updates the rest itself; else the copies' casts and the
// optimizer for everything.
struct SgdRun {
  std::unique_ptr<trainbench::worker::MixedPrecision> copies;  // outlives the model
  std::unique_ptr<sdk::Model> model;
  std::vector<torch::Tensor> params;
  std::vector<bool> taken;
  std::unique_ptr<trainbench::worker::Optimizer> optimizer;
};

SgdRun MakeSgdRun(bool bottleneck, bool take, double lr) {
  using trainbench::worker::MixedPrecision;
  SgdRun run;
  run.model = CudaResNet(bottleneck);
  run.params = run.model->module().parameters();
  trainbench::protocol::OptimizerSettings settings;
  settings.lr = lr;
  run.optimizer = trainbench::worker::MakeOptimizer(settings, run.params);
  run.copies = std::make_unique<MixedPrecision>();
  std::vector<std::vector<torch::Tensor>> groups;
  EXPECT_TRUE(run.model->UseWorkingCopies(run.copies.get(), &groups).ok());
  run.copies->Adopt(groups);
  if (take) run.optimizer->UpdateInBackward(*run.copies);
  std::vector<torch::Tensor> taken;
  if (run.copies->Updates()) taken = run.copies->Parameters();
  for (const auto& p : run.params) {
    bool in = false;
    for (const auto& t : taken) in = in || t.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    run.taken.push_back(in);
  }
  return run;
}

// The worker's training step.
void SgdStep(SgdRun& run, const torch::Tensor& x, const torch::Tensor& labels) {
  torch::Tensor loss;
  StepLoss(*run.model, x, labels, &loss);
  ASSERT_TRUE(loss.defined());
  run.optimizer->BeginBackward();
  loss.backward();
  run.optimizer->Step();
}

// The bf16 logits of `model` without a gradient (training mode: the batch's
// statistics).
torch::Tensor Bf16Logits(sdk::Model& model, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  trainbench::worker::AutocastScope autocast(c10::kCUDA, sdk::Amp::kBf16);
  torch::Tensor logits;
  EXPECT_TRUE(model.Forward(x, &logits).ok());
  return logits.to(torch::kFloat);
}

// One eager step of mixed-precision SGD against the optimizer's: every
// parameter and the host's gradients as close as two runs of one path (the
// arithmetic is torch.optim.SGD's; later steps at this learning rate
// amplify the last bit of bf16 rounding, so one step is what is compared).
TEST(MixedPrecisionSgdModels, OneStepAsTheHostsOptimizer) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  for (const bool bottleneck : {false, true}) {
    torch::manual_seed(13);
    const torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast);
    const torch::Tensor labels = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    {
      torch::manual_seed(14);  // the engines tuned before either run is compared
      SgdRun warm = MakeSgdRun(bottleneck, false, 0.2);
      SgdStep(warm, x, labels);
    }
    torch::manual_seed(14);
    SgdRun host = MakeSgdRun(bottleneck, false, 0.2);
    torch::manual_seed(14);
    SgdRun fused = MakeSgdRun(bottleneck, true, 0.2);
    size_t taken = 0;
    for (const bool t : fused.taken) taken += t;
    EXPECT_EQ(taken, bottleneck ? 53u : 20u) << "every convolution's weight";
    SgdStep(host, x, labels);
    SgdStep(fused, x, labels);
    torch::cuda::synchronize();
    const auto names = host.model->module().named_parameters();
    for (size_t i = 0; i < host.params.size(); ++i) {
      const std::string name = (bottleneck ? "ResNet50 " : "ResNet18 ") + names[i].key();
      if (fused.taken[i])
        EXPECT_FALSE(fused.params[i].grad().defined()) << name;
      else
        EXPECT_LE(RelativeError(fused.params[i].grad(), host.params[i].grad()), 1e-4) << name << ": gradient";
      EXPECT_LE(RelativeError(fused.params[i].detach(), host.params[i].detach()), 1e-5) << name;
    }
  }
}

// After eager steps and replays of a captured step (every side stream), the
// model's next forward reads copies of its current weights: the same logits
// as a model on the host's path given those weights (a copy a step behind
// would be off by a whole update at this learning rate), and the weights
// moved.
TEST(MixedPrecisionSgdModels, TheNextForwardReadsTheUpdatedWeights) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  Autotuning autotuning;
  for (const bool bottleneck : {false, true}) {
    for (const bool captured : {false, true}) {
      const std::string name = std::string(bottleneck ? "ResNet50" : "ResNet18") + (captured ? " captured" : " eager");
      torch::manual_seed(11);
      const torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast);
      const torch::Tensor labels = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
      torch::manual_seed(12);
      SgdRun fused = MakeSgdRun(bottleneck, true, 0.2);
      std::vector<torch::Tensor> before;
      for (const auto& p : fused.params) before.push_back(p.detach().clone());
      if (captured) {
        const auto graph = Capture([&] { SgdStep(fused, x, labels); });  // a step, captured
        for (int replay = 0; replay < 2; ++replay) graph->replay();
      } else {
        for (int s = 0; s < 3; ++s) SgdStep(fused, x, labels);
      }
      torch::cuda::synchronize();
      SgdRun host = MakeSgdRun(bottleneck, false, 0.2);
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < host.params.size(); ++i) host.params[i].copy_(fused.params[i]);
      }
      for (size_t i = 0; i < fused.params.size(); ++i)
        if (fused.taken[i]) {
          EXPECT_GT(RelativeError(fused.params[i].detach(), before[i]), 1e-3) << name << " " << i;
        }
      EXPECT_LE(RelativeError(Bf16Logits(*fused.model, x), Bf16Logits(*host.model, x)), 1e-3) << name;
    }
  }
}

// The tuning's StreamGate: the stream waits until the gate opens, so that
// events around work queued behind it time the GPU and not the host; a gate
// left shut lets go after its limit.
TEST(StreamGate, HoldsTheStreamUntilOpened) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto stream = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(stream);
  torch::Tensor x = torch::zeros({1024}, torch::kCUDA);
  // The kernel once before: its first launch loads it, which would wait for
  // the gate (see stream_gate.h).
  x.add_(1);
  stream.synchronize();
  cudaEvent_t start = nullptr, end = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  trainbench::plugins::StreamGate gate(stream.stream());
  ASSERT_EQ(cudaEventRecord(start, stream.stream()), cudaSuccess);
  for (int i = 0; i < 4; ++i) {
    x.add_(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));  // a slow host
  }
  ASSERT_EQ(cudaEventRecord(end, stream.stream()), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(end), cudaErrorNotReady);
  cudaGetLastError();  // not an error: leave nothing for LibTorch's checks
  gate.Open();
  ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  // Four tiny kernels back to back: far below the host's 100 ms.
  EXPECT_LT(ms, 20.0f);
  EXPECT_TRUE(gate.HeldUntilOpened());
  EXPECT_EQ(x.cpu()[0].item<float>(), 5.0f);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
}

TEST(StreamGate, LetsGoAfterItsLimit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto stream = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(stream);
  torch::Tensor x = torch::zeros({16}, torch::kCUDA);
  trainbench::plugins::StreamGate gate(stream.stream(), std::chrono::milliseconds(50));
  x.add_(1);             // its first launch too: the loading waits for the gate's limit
  stream.synchronize();  // returns although the gate was never opened
  EXPECT_FALSE(gate.HeldUntilOpened());
  EXPECT_EQ(x.cpu()[0].item<float>(), 1.0f);
}

// Under CUDA autocast both operands take its type, as at::conv2d's; the
// weight's gradient comes back in the weight's own type.
TEST(CudnnConvAutocast, FollowsAutocastsType) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ScopedCacheHome home;
  torch::manual_seed(9);
  const auto options = torch::TensorOptions(torch::kCUDA);
  torch::Tensor w = (torch::randn({16, 8, 3, 3}, options) * 0.1).requires_grad_();
  const torch::Tensor x = torch::randn({4, 8, 8, 8}, options);
  torch::Tensor ours, theirs;
  {
    trainbench::worker::AutocastScope autocast(c10::kCUDA, trainbench::sdk::Amp::kBf16, /*cache=*/false);
    ASSERT_TRUE(cudnn_conv::Supports(x, w));
    ours = cudnn_conv::Conv2d(x, w, {1, 1}, {1, 1});
    theirs = torch::conv2d(x, w, {}, 1, 1);
  }
  EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(theirs.scalar_type(), torch::kBFloat16);
  EXPECT_LE(RelativeError(ours, theirs), 1e-2);
  ours.to(torch::kFloat).sum().backward();
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
}

TEST(CudnnConvSupport, TakesOnlyWhatItCanRun) {
  EXPECT_TRUE(cudnn_conv::Built());
  const torch::Tensor cpu = torch::randn({2, 3, 8, 8});
  EXPECT_FALSE(cudnn_conv::Supports(cpu, torch::randn({4, 3, 3, 3})));
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  EXPECT_FALSE(cudnn_conv::Supports(torch::randn({2, 3, 8, 8}, cuda.dtype(torch::kDouble)),
                                    torch::randn({4, 3, 3, 3}, cuda.dtype(torch::kDouble))));
  EXPECT_FALSE(cudnn_conv::Supports(torch::randn({2, 3, 8, 8}, cuda), torch::randn({4, 5, 3, 3}, cuda)));
  EXPECT_FALSE(
      cudnn_conv::Supports(torch::randn({2, 3, 8, 8}, cuda), torch::randn({4, 3, 3, 3}, cuda.dtype(torch::kBFloat16))));
  EXPECT_TRUE(cudnn_conv::Supports(torch::randn({2, 3, 8, 8}, cuda), torch::randn({4, 3, 3, 3}, cuda)));
}

}  // namespace

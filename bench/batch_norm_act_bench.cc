// The ResNets' fused batch norm (+ ReLU, + residual add) against LibTorch's
// composite (batch_norm, add, relu), one training forward and backward of each
// batch-norm shape of ResNet50 at batch 1024 on 32x32 images (imagenet stem),
// channels_last, bf16 and fp32. Prints microseconds per forward + backward
// (median of 7 timings of 20 repetitions, CUDA events) and their ratio, then
// the sum over the network's 53 batch norms.
//   build-gpu/bin/batch_norm_act_bench [batch]
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "batch_norm_act.h"

namespace {

enum class Act { kPlain, kRelu, kAddRelu };

struct Shape {
  int64_t c, hw;
  Act act;
  int count;  // how many of ResNet50's batch norms have it
};

double MedianMicros(const std::function<void()>& step) {
  for (int i = 0; i < 5; ++i) step();
  std::vector<double> times;
  for (int t = 0; t < 7; ++t) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (int i = 0; i < 20; ++i) step();
    stop.record();
    stop.synchronize();
    times.push_back(start.elapsed_time(stop) * 1000.0 / 20);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "batch_norm_act_bench: no CUDA device\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::stoll(argv[1]) : 1024;
  // ResNet50, 32x32 input, imagenet stem: 16x16 after conv1, 8x8 in layer1.
  const std::vector<Shape> shapes = {
      {64, 16, Act::kRelu, 1}, {64, 8, Act::kRelu, 6},   {256, 8, Act::kAddRelu, 3},  {256, 8, Act::kPlain, 1},
      {128, 8, Act::kRelu, 1}, {128, 4, Act::kRelu, 7},  {512, 4, Act::kAddRelu, 4},  {512, 4, Act::kPlain, 1},
      {256, 4, Act::kRelu, 1}, {256, 2, Act::kRelu, 11}, {1024, 2, Act::kAddRelu, 6}, {1024, 2, Act::kPlain, 1},
      {512, 2, Act::kRelu, 1}, {512, 1, Act::kRelu, 5},  {2048, 1, Act::kAddRelu, 3}, {2048, 1, Act::kPlain, 1},
  };
  const char* names[] = {"bn", "bn+relu", "bn+add+relu"};
  for (auto dtype : {torch::kBFloat16, torch::kFloat}) {
    std::printf("\n%s, batch %lld, channels_last\n", dtype == torch::kFloat ? "fp32" : "bf16",
                static_cast<long long>(batch));
    std::printf("| channels | map | op | count | composite us | fused us | ratio |\n|---|---|---|---|---|---|---|\n");
    double total_composite = 0, total_fused = 0;
    for (const Shape& s : shapes) {
      const auto cuda = torch::TensorOptions(torch::kCUDA);
      const auto cl = torch::MemoryFormat::ChannelsLast;
      torch::Tensor x = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl).requires_grad_();
      torch::Tensor r = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl).requires_grad_();
      const torch::Tensor dy = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl);
      trainbench::sdk::BatchNorm2d bn(s.c);
      bn->to(torch::kCUDA);
      const bool add = s.act == Act::kAddRelu, relu = s.act != Act::kPlain;
      double micros[2];
      for (bool fused : {false, true}) {
        micros[fused] = MedianMicros([&] {
          torch::Tensor y = resnet::BatchNormAct(*bn, x, add ? r : torch::Tensor(), relu, fused);
          y.backward(dy);
        });
      }
      std::printf("| %lld | %lldx%lld | %s | %d | %.1f | %.1f | %.2f |\n", static_cast<long long>(s.c),
                  static_cast<long long>(s.hw), static_cast<long long>(s.hw), names[static_cast<int>(s.act)], s.count,
                  micros[0], micros[1], micros[0] / micros[1]);
      total_composite += s.count * micros[0];
      total_fused += s.count * micros[1];
    }
    std::printf("| all 53 | | | | %.0f | %.0f | %.2f |\n", total_composite, total_fused, total_composite / total_fused);
  }
  return 0;
}

// The ResNets' fused batch norm (+ ReLU, + residual add) against LibTorch's
// composite (batch_norm, add, relu), one training forward and backward of each
// batch-norm shape of ResNet50 (or ResNet18) at batch 1024 on 32x32 images
// (imagenet stem), channels_last, bf16 and fp32: the composite, the fused
// path's two kernels each way, and its one kernel each way (where the shape
// fits on chip). Twenty forward + backward captured in a CUDA graph (the host's
// launch rate left out, as in a graphed training step); prints microseconds
// per forward + backward (median of 7 replays, CUDA events) and the ratios,
// then the sums over the network's batch norms. A second table takes the
// fused two kernels apart: the training forward alone, the evaluation
// forward (the element-wise pass alone), and the backward (forward +
// backward less the forward), each with the bandwidth its kernels' minimal
// traffic implies (bytes read and written over time: forward x twice, the
// residual, y; evaluation x, the residual, y; backward x and dy twice, with a
// residual y read and its gradient written, dx).
//   build-gpu/bin/batch_norm_act_bench [batch] [resnet50|resnet18]
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "batch_norm_act.h"
#include "graph_timer.h"

namespace {

enum class Act { kPlain, kRelu, kAddRelu };

struct Shape {
  int64_t c, hw;
  Act act;
  int count;  // how many of the network's batch norms have it
};

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "batch_norm_act_bench: no CUDA device\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::stoll(argv[1]) : 1024;
  const bool resnet18 = argc > 2 && std::string(argv[2]) == "resnet18";
  // 32x32 input, imagenet stem: 16x16 after conv1, 8x8 in layer1.
  const std::vector<Shape> resnet18_shapes = {
      {64, 16, Act::kRelu, 1},    {64, 8, Act::kRelu, 2},   {64, 8, Act::kAddRelu, 2},  {128, 4, Act::kRelu, 2},
      {128, 4, Act::kAddRelu, 2}, {128, 4, Act::kPlain, 1}, {256, 2, Act::kRelu, 2},    {256, 2, Act::kAddRelu, 2},
      {256, 2, Act::kPlain, 1},   {512, 1, Act::kRelu, 2},  {512, 1, Act::kAddRelu, 2}, {512, 1, Act::kPlain, 1},
  };
  const std::vector<Shape> resnet50_shapes = {
      {64, 16, Act::kRelu, 1}, {64, 8, Act::kRelu, 6},   {256, 8, Act::kAddRelu, 3},  {256, 8, Act::kPlain, 1},
      {128, 8, Act::kRelu, 1}, {128, 4, Act::kRelu, 7},  {512, 4, Act::kAddRelu, 4},  {512, 4, Act::kPlain, 1},
      {256, 4, Act::kRelu, 1}, {256, 2, Act::kRelu, 11}, {1024, 2, Act::kAddRelu, 6}, {1024, 2, Act::kPlain, 1},
      {512, 2, Act::kRelu, 1}, {512, 1, Act::kRelu, 5},  {2048, 1, Act::kAddRelu, 3}, {2048, 1, Act::kPlain, 1},
  };
  const std::vector<Shape>& shapes = resnet18 ? resnet18_shapes : resnet50_shapes;
  int layers = 0;
  for (const Shape& s : shapes) layers += s.count;
  const char* names[] = {"bn", "bn+relu", "bn+add+relu"};
  for (auto dtype : {torch::kBFloat16, torch::kFloat}) {
    std::printf("\n%s, %s, batch %lld, channels_last\n", resnet18 ? "ResNet18" : "ResNet50",
                dtype == torch::kFloat ? "fp32" : "bf16", static_cast<long long>(batch));
    std::printf(
        "| channels | map | op | count | composite us | fused, two kernels us | fused, one pass us | two / one | "
        "composite / best |\n|---|---|---|---|---|---|---|---|---|\n");
    double totals[3] = {0, 0, 0};
    std::string passes =
        "| channels | map | op | count | forward us | TB/s | evaluation us | TB/s | backward us | TB/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
    double pass_totals[3] = {0, 0, 0};
    for (const Shape& s : shapes) {
      const auto cuda = torch::TensorOptions(torch::kCUDA);
      const auto cl = torch::MemoryFormat::ChannelsLast;
      torch::Tensor x = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl).requires_grad_();
      torch::Tensor r = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl).requires_grad_();
      const torch::Tensor dy = torch::randn({batch, s.c, s.hw, s.hw}, cuda).to(dtype).contiguous(cl);
      trainbench::sdk::BatchNorm2d bn(s.c);
      bn->to(torch::kCUDA);
      const bool add = s.act == Act::kAddRelu, relu = s.act != Act::kPlain;
      // The gradients returned, not accumulated: the same kernels every repetition.
      std::vector<torch::Tensor> inputs = {x, bn->weight, bn->bias};
      if (add) inputs.push_back(r);
      double micros[3];
      const bool one_pass = resnet::OnePassApplies(x, relu, add);
      for (int path = 0; path < 3; ++path) {
        if (path == 2 && !one_pass) {
          micros[2] = micros[1];
          continue;
        }
        micros[path] = bench::MedianMicros([&] {
          torch::Tensor y =
              resnet::BatchNormAct(*bn, x, add ? r : torch::Tensor(), relu, path > 0, resnet::BnLaunch{path == 2});
          torch::autograd::grad({y}, inputs, {dy});
        });
      }
      char one_pass_us[16] = "-";
      if (one_pass) std::snprintf(one_pass_us, sizeof one_pass_us, "%.1f", micros[2]);
      std::printf("| %lld | %lldx%lld | %s | %d | %.1f | %.1f | %s | %.2f | %.2f |\n", static_cast<long long>(s.c),
                  static_cast<long long>(s.hw), static_cast<long long>(s.hw), names[static_cast<int>(s.act)], s.count,
                  micros[0], micros[1], one_pass_us, micros[1] / micros[2], micros[0] / std::min(micros[1], micros[2]));
      for (int path = 0; path < 3; ++path) totals[path] += s.count * micros[path];
      // The fused two kernels pass by pass.
      const torch::Tensor residual = add ? r : torch::Tensor();
      const double forward =
          bench::MedianMicros([&] { resnet::BatchNormAct(*bn, x, residual, relu, true, resnet::BnLaunch{false}); });
      bn->eval();
      const double evaluation = bench::MedianMicros([&] {
        const torch::NoGradGuard no_grad;
        resnet::BatchNormAct(*bn, x, residual, relu, true, resnet::BnLaunch{false});
      });
      bn->train();
      const double backward = micros[1] - forward;
      const double tensor = static_cast<double>(x.numel()) * x.element_size();
      const double bytes[3] = {(3 + add) * tensor, (2 + add) * tensor, (5 + 2 * add) * tensor};
      const double us[3] = {forward, evaluation, backward};
      char row[256];
      std::snprintf(row, sizeof row, "| %lld | %lldx%lld | %s | %d | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n",
                    static_cast<long long>(s.c), static_cast<long long>(s.hw), static_cast<long long>(s.hw),
                    names[static_cast<int>(s.act)], s.count, us[0], bytes[0] / us[0] * 1e-6, us[1],
                    bytes[1] / us[1] * 1e-6, us[2], bytes[2] / us[2] * 1e-6);
      passes += row;
      for (int i = 0; i < 3; ++i) pass_totals[i] += s.count * us[i];
    }
    std::printf("| all %d | | | | %.0f | %.0f | %.0f | %.2f | %.2f |\n", layers, totals[0], totals[1], totals[2],
                totals[1] / totals[2], totals[0] / totals[2]);
    std::printf("\nThe fused two kernels pass by pass (%s)\n%s| all %d | | | | %.0f | | %.0f | | %.0f | |\n",
                dtype == torch::kFloat ? "fp32" : "bf16", passes.c_str(), layers, pass_totals[0], pass_totals[1],
                pass_totals[2]);
  }
  return 0;
}

// The ResNets' fused batch norm + ReLU (+ residual add) on CUDA
// (plugins/models/resnet/batch_norm_act.h) against LibTorch's composite
// (the module's batch_norm, add, relu): every dtype and layout it takes,
// channel counts of every pack width, 1x1 maps, training (outputs, running
// statistics, every gradient) and evaluation, several streams at once,
// replays in a CUDA graph.
// Built only where the kernels are (a LibTorch with CUDA); skipped without a GPU.
#include "batch_norm_act.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "batch_norm_act_kernels.h"
#include "cuda_graph.h"
#include "relative_error.h"
#include "stream_gate.h"

namespace {

using trainbench::sdk::BatchNorm2d;

enum class Act { kNone, kRelu, kAddRelu };

struct Case {
  torch::Dtype dtype;
  bool channels_last;
  std::vector<int64_t> shape;
  Act act;
  bool one_pass = true;       // channels_last: false runs the two kernels each way
  bool sm90_launches = true;  // false: launched as on GPUs before compute capability 9.0
  resnet::BnLaunch launch() const { return {one_pass, sm90_launches}; }
};

using trainbench::testing::RelativeError;

class BatchNormAct : public ::testing::TestWithParam<Case> {};

// Gradients of one training step through BatchNormAct.
struct Step {
  torch::Tensor y, dx, dr, dw, db;
};

Step RunStep(BatchNorm2d& bn, const torch::Tensor& base, const torch::Tensor& skip, const torch::Tensor& upstream,
             Act act, bool fused, resnet::BnLaunch launch = {}) {
  torch::Tensor x = base.clone().requires_grad_(), r = skip.clone().requires_grad_();
  const bool add = act == Act::kAddRelu;
  Step out;
  out.y = resnet::BatchNormAct(*bn, x, add ? r : torch::Tensor(), act != Act::kNone, fused, launch);
  out.y.backward(upstream);
  out.dx = x.grad();
  out.dr = add ? r.grad() : torch::zeros({1});
  out.dw = bn->weight.grad().clone();
  out.db = bn->bias.grad().clone();
  bn->weight.mutable_grad() = torch::Tensor();
  bn->bias.mutable_grad() = torch::Tensor();
  return out;
}

// fp32: the fused path equals the composite within rounding. bf16 and half:
// the composite rounds batch norm's output before the residual add and ReLU,
// the fused path rounds once at the end, so ReLU's mask differs where the sum
// is within a rounding of zero; both are measured against the same function
// in fp64 on the same inputs, and the fused path must be as close to it as
// the composite is (or within 1e-3).
void ExpectClose(const torch::Tensor& fused, const torch::Tensor& composite, const torch::Tensor& truth, bool fp32,
                 const char* what) {
  if (fp32) {
    EXPECT_LE(RelativeError(fused, composite), 2e-5) << what;
    return;
  }
  const double fused_error = RelativeError(fused, truth), composite_error = RelativeError(composite, truth);
  EXPECT_LE(fused_error, std::max(1.5 * composite_error, 1e-3)) << what << ": composite's error " << composite_error;
}

TEST_P(BatchNormAct, EqualsTheCompositeInTrainingAndEvaluation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(resnet::FusedKernelsBuilt());
  const Case& c = GetParam();
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  torch::manual_seed(11);
  const int64_t channels = c.shape[1];
  // A mean far from zero (the statistics' shift) and a spread per channel.
  const torch::Tensor base =
      (torch::randn(c.shape, cuda) * torch::linspace(0.5, 3.0, channels, cuda).view({1, -1, 1, 1}) + 4.0)
          .to(c.dtype)
          .contiguous(format);
  const torch::Tensor skip = torch::randn(c.shape, cuda).to(c.dtype).contiguous(format);
  BatchNorm2d fused_bn(channels), ref_bn(channels), truth_bn(channels);
  for (auto* bn : {&fused_bn, &ref_bn, &truth_bn}) {
    (*bn)->to(torch::kCUDA);
    torch::NoGradGuard no_grad;
    (*bn)->weight.copy_(torch::linspace(0.5, 1.5, channels));
    (*bn)->bias.copy_(torch::linspace(-0.3, 0.3, channels));
  }
  truth_bn->to(torch::kDouble);
  const bool fp32 = c.dtype == torch::kFloat;

  for (int step = 0; step < 2; ++step) {  // twice: the running statistics move on from their first update
    const torch::Tensor upstream = torch::randn(c.shape, cuda).to(c.dtype).contiguous(format);
    const Step fused = RunStep(fused_bn, base, skip, upstream, c.act, true, c.launch());
    const Step ref = RunStep(ref_bn, base, skip, upstream, c.act, false);
    const Step truth =
        RunStep(truth_bn, base.to(torch::kDouble), skip.to(torch::kDouble), upstream.to(torch::kDouble), c.act, false);
    ASSERT_TRUE(fused.y.grad_fn());
    EXPECT_NE(fused.y.grad_fn()->name().find("FusedBatchNormAct"), std::string::npos) << fused.y.grad_fn()->name();
    EXPECT_EQ(fused.y.scalar_type(), c.dtype);
    EXPECT_EQ(fused.y.sizes(), ref.y.sizes());
    EXPECT_TRUE(fused.y.is_contiguous(format));
    EXPECT_TRUE(fused.dx.is_contiguous(format));
    EXPECT_EQ(fused.dw.scalar_type(), torch::kFloat);
    ExpectClose(fused.y, ref.y, truth.y, fp32, "y");
    ExpectClose(fused.dx, ref.dx, truth.dx, fp32, "dx");
    ExpectClose(fused.dw, ref.dw, truth.dw, fp32, "dweight");
    ExpectClose(fused.db, ref.db, truth.db, fp32, "dbias");
    if (c.act == Act::kAddRelu) ExpectClose(fused.dr, ref.dr, truth.dr, fp32, "dresidual");
    // The statistics come from the same rounded inputs, in fp32 both ways.
    EXPECT_LE(RelativeError(fused_bn->running_mean, ref_bn->running_mean), 1e-5);
    EXPECT_LE(RelativeError(fused_bn->running_var, ref_bn->running_var), 1e-4);
    EXPECT_EQ(fused_bn->num_batches_tracked.item<int64_t>(), ref_bn->num_batches_tracked.item<int64_t>());
  }

  // Evaluation: the running statistics, one element-wise kernel, no autograd.
  fused_bn->eval();
  ref_bn->eval();
  truth_bn->eval();
  torch::NoGradGuard no_grad;
  const bool add = c.act == Act::kAddRelu, relu = c.act != Act::kNone;
  const torch::Tensor fused = resnet::BatchNormAct(*fused_bn, base, add ? skip : torch::Tensor(), relu, true);
  const torch::Tensor ref = resnet::BatchNormAct(*ref_bn, base, add ? skip : torch::Tensor(), relu, false);
  const torch::Tensor truth = resnet::BatchNormAct(*truth_bn, base.to(torch::kDouble),
                                                   add ? skip.to(torch::kDouble) : torch::Tensor(), relu, false);
  EXPECT_FALSE(fused.grad_fn());
  EXPECT_TRUE(fused.is_contiguous(format));
  ExpectClose(fused, ref, truth, fp32, "evaluation y");
}

// BatchNormActTwice (a block's output for its two readers): two outputs of
// the same values, whose two gradients the backward's kernels add where they
// read them; the same gradients, bit for bit, as BatchNormAct given their
// sum (autograd's add, in the element type), and with one gradient only
// those of BatchNormAct given it.
TEST_P(BatchNormAct, TwoOutputsGiveTheGradientsOfTheirSum) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  if (c.act != Act::kAddRelu) GTEST_SKIP() << "only a block's output (residual and ReLU) is read twice";
  const auto format = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  torch::manual_seed(12);
  const int64_t channels = c.shape[1];
  auto input = [&] { return torch::randn(c.shape, cuda).to(c.dtype).contiguous(format); };
  const torch::Tensor base = input(), skip = input(), g1 = input(), g2 = input();
  BatchNorm2d twice_bn(channels), once_bn(channels);
  for (auto* bn : {&twice_bn, &once_bn}) (*bn)->to(torch::kCUDA);
  // (which gradients reach the two outputs, the one gradient BatchNormAct gets)
  const std::vector<std::tuple<bool, bool, torch::Tensor, const char*>> runs = {
      {true, true, g1 + g2, "both"}, {false, true, g2, "the second only"}, {true, false, g1, "the first only"}};
  for (const auto& [first, second, sum, what] : runs) {
    torch::Tensor x = base.clone().requires_grad_(), r = skip.clone().requires_grad_();
    const auto [y1, y2] = resnet::BatchNormActTwice(*twice_bn, x, r, true, c.launch());
    ASSERT_TRUE(y1.grad_fn() && y2.grad_fn());
    EXPECT_NE(y1.grad_fn()->name().find("FusedBatchNormAct"), std::string::npos) << y1.grad_fn()->name();
    EXPECT_EQ(y1.data_ptr(), y2.data_ptr()) << "one output, two tensors";
    std::vector<torch::Tensor> outputs, grads;
    if (first) outputs.push_back(y1), grads.push_back(g1);
    if (second) outputs.push_back(y2), grads.push_back(g2);
    torch::autograd::backward(outputs, grads);
    const Step once = RunStep(once_bn, base, skip, sum, Act::kAddRelu, true, c.launch());
    EXPECT_TRUE(torch::equal(y1, once.y)) << what;
    EXPECT_TRUE(torch::equal(x.grad(), once.dx)) << what;
    EXPECT_TRUE(torch::equal(r.grad(), once.dr)) << what;
    EXPECT_TRUE(torch::equal(twice_bn->weight.grad(), once.dw)) << what;
    EXPECT_TRUE(torch::equal(twice_bn->bias.grad(), once.db)) << what;
    twice_bn->weight.mutable_grad() = torch::Tensor();
    twice_bn->bias.mutable_grad() = torch::Tensor();
  }
  // Where the fused path does not apply: the composite's one tensor, twice.
  BatchNorm2d cpu_bn(channels);
  const auto [a, b] =
      resnet::BatchNormActTwice(*cpu_bn, base.cpu().to(torch::kFloat), skip.cpu().to(torch::kFloat), true, c.launch());
  EXPECT_TRUE(a.is_same(b));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (bool cl : {false, true}) {
      for (Act act : {Act::kNone, Act::kRelu, Act::kAddRelu}) {
        cases.push_back({dtype, cl, {8, 64, 8, 8}, act});    // layer1 at 32 px input, batch 8
        cases.push_back({dtype, cl, {16, 256, 1, 1}, act});  // a 1x1 map: both layouts at once
      }
      cases.push_back({dtype, cl, {4, 24, 5, 7}, Act::kRelu});       // odd H * W: narrow NCHW packs
      cases.push_back({dtype, cl, {3, 6, 3, 3}, Act::kAddRelu});     // 6 channels: pairs
      cases.push_back({dtype, cl, {5, 5, 4, 4}, Act::kRelu});        // 5 channels: single elements
      cases.push_back({dtype, cl, {2, 2048, 2, 2}, Act::kAddRelu});  // layer4's width: many channel tiles
      cases.push_back({dtype, cl, {64, 64, 32, 32}, Act::kRelu});    // 4M elements: many blocks per channel
    }
  }
  // channels_last with full packs: one kernel each way where the tensor fits
  // (the smaller cases above; the larger ones fall back to two kernels), and
  // the same shapes with the two kernels.
  const size_t one_pass_cases = cases.size();
  for (size_t i = 0; i < one_pass_cases; ++i) {
    if (!cases[i].channels_last) continue;
    Case two = cases[i];
    two.one_pass = false;
    cases.push_back(two);
  }
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    cases.push_back({dtype, true, {256, 64, 8, 8}, Act::kAddRelu});  // too many blocks per tile: two kernels
    // 8 blocks per tile of 4 rows per thread: 2048 rows in bf16, 1024 in fp32.
    cases.push_back({dtype, true, {dtype == torch::kFloat ? 16 : 32, 64, 8, 8}, Act::kAddRelu});
    cases.push_back({dtype, true, {8, 512, 4, 4}, Act::kRelu});    // eight channel tiles
    cases.push_back({dtype, true, {3, 40, 7, 5}, Act::kAddRelu});  // rows not a multiple of a block's
    // 64 channels over 65,536 rows: tiles narrower than 64 channels on a
    // device of more than 64 multiprocessors (ReduceTileChannels).
    cases.push_back({dtype, true, {256, 64, 16, 16}, Act::kAddRelu});
  }
  // The channels_last cases again as launched on GPUs before compute
  // capability 9.0 (option sm90_launches: never): a one-pass kernel's blocks
  // wait for each other through global memory, no programmatic dependent
  // launches; on a 9.0 GPU too.
  const size_t sm90_cases = cases.size();
  for (size_t i = 0; i < sm90_cases; ++i) {
    if (!cases[i].channels_last) continue;
    Case before = cases[i];
    before.sm90_launches = false;
    cases.push_back(before);
  }
  return cases;
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = c.dtype == torch::kFloat ? "Float" : c.dtype == torch::kBFloat16 ? "BFloat16" : "Half";
  name += c.channels_last ? "ChannelsLast" : "Nchw";
  name += c.act == Act::kNone ? "Plain" : c.act == Act::kRelu ? "Relu" : "AddRelu";
  for (int64_t s : c.shape) name += "_" + std::to_string(s);
  if (!c.one_pass) name += "_TwoKernels";
  if (!c.sm90_launches) name += "_BeforeSm90";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Cuda, BatchNormAct, ::testing::ValuesIn(Cases()), Name);

TEST(BatchNormActPaths, CompositeWhereTheKernelsDoNotApply) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  BatchNorm2d bn(8);
  bn->to(torch::kCUDA);
  const torch::Tensor x = torch::randn({4, 8, 3, 3}, torch::kCUDA).requires_grad_();
  // fused = false, a double input, a CPU tensor, a residual without ReLU.
  EXPECT_EQ(resnet::BatchNormAct(*bn, x, {}, true, false).grad_fn()->name().find("Fused"), std::string::npos);
  BatchNorm2d bn64(8);
  bn64->to(torch::kCUDA, torch::kDouble);
  EXPECT_EQ(resnet::BatchNormAct(*bn64, x.to(torch::kDouble), {}, true, true).grad_fn()->name().find("Fused"),
            std::string::npos);
  EXPECT_EQ(resnet::BatchNormAct(*bn, x, x.detach(), false, true).grad_fn()->name().find("Fused"), std::string::npos);
  BatchNorm2d on_cpu(8);
  EXPECT_EQ(resnet::BatchNormAct(*on_cpu, x.cpu(), {}, true, true).grad_fn()->name().find("Fused"), std::string::npos);
}

// Where one kernel each way is planned: channels_last tensors of full
// 16-byte packs whose elements fit in the registers of at most 8 blocks per
// channel tile (256 threads, at most 4 rows each by default; tiles down to 2
// packs wide, so up to 512 rows a block); not NCHW, narrow channel counts or
// a larger tensor.
TEST(BatchNormActPaths, OnePassWhereTheTensorFits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  EXPECT_TRUE(resnet::OnePassApplies(torch::empty({8, 64, 8, 8}, bf16).contiguous(cl), true, false));
  EXPECT_TRUE(
      resnet::OnePassApplies(torch::empty({8, 64, 8, 8}, bf16.dtype(torch::kFloat)).contiguous(cl), true, true));
  EXPECT_TRUE(resnet::OnePassApplies(torch::empty({2, 2048, 2, 2}, bf16).contiguous(cl), false, false));
  EXPECT_TRUE(resnet::OnePassApplies(torch::empty({16, 64, 8, 8}, bf16).contiguous(cl), true, true));  // 8 blocks
  // 16 blocks of 64 channels, 8 of 32.
  EXPECT_TRUE(resnet::OnePassApplies(torch::empty({32, 64, 8, 8}, bf16).contiguous(cl), true, true));
  // 16 blocks even of 16 channels (128 rows a pass, 4 passes a thread).
  EXPECT_FALSE(resnet::OnePassApplies(torch::empty({128, 64, 8, 8}, bf16).contiguous(cl), true, true));
  EXPECT_FALSE(resnet::OnePassApplies(torch::empty({8, 64, 8, 8}, bf16), true, false));                // NCHW
  EXPECT_FALSE(resnet::OnePassApplies(torch::empty({8, 6, 8, 8}, bf16).contiguous(cl), true, false));  // pairs
  EXPECT_FALSE(resnet::OnePassApplies(torch::empty({256, 256, 32, 32}, bf16).contiguous(cl), true, false));
  EXPECT_FALSE(resnet::OnePassApplies(torch::empty({8, 64, 8, 8}, torch::kFloat).contiguous(cl), true, false));  // CPU
}

// y's ReLU mask in place of y for the backward of a block's output:
// channels_last, channels of whole 16-byte packs.
TEST(BatchNormActPaths, ReluMaskWhereTheLayoutAllows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  EXPECT_TRUE(resnet::ReluMaskApplies(torch::empty({8, 64, 8, 8}, bf16).contiguous(cl)));
  EXPECT_TRUE(resnet::ReluMaskApplies(torch::empty({1024, 256, 8, 8}, bf16).contiguous(cl)));
  EXPECT_TRUE(resnet::ReluMaskApplies(torch::empty({8, 64, 8, 8}, bf16.dtype(torch::kFloat)).contiguous(cl)));
  EXPECT_FALSE(resnet::ReluMaskApplies(torch::empty({8, 64, 8, 8}, bf16)));                          // NCHW
  EXPECT_FALSE(resnet::ReluMaskApplies(torch::empty({8, 6, 8, 8}, bf16).contiguous(cl)));            // pairs
  EXPECT_FALSE(resnet::ReluMaskApplies(torch::empty({8, 64, 8, 8}, torch::kFloat).contiguous(cl)));  // CPU
}

// The kernels take y's ReLU mask only where they write one (a residual,
// NHWC, channels of whole 16-byte packs), and in the backward only in place
// of y, not beside it: refused before anything is launched.
TEST(BatchNormActPaths, TheReluMaskOnlyWhereTheKernelsWriteOne) {
  namespace k = resnet::kernels;
  const k::BnProblem nhwc{k::DType::kBFloat16, k::Layout::kNhwc, 8, 64, 64, true, true};
  k::BnProblem nchw = nhwc, pairs = nhwc, plain = nhwc;
  nchw.layout = k::Layout::kNchw;
  pairs.c = 6;
  plain.residual = false;
  EXPECT_EQ(k::ReluMaskBytes(nhwc), 8 * 64 * 64 / 8);
  EXPECT_EQ(k::ReluMaskBytes(nchw), 0);
  EXPECT_EQ(k::ReluMaskBytes(pairs), 0);
  EXPECT_EQ(k::ReluMaskBytes(plain), 0);
  int cell = 0;
  void* some = &cell;
  k::BnForwardArgs forward{};
  forward.residual = some;
  forward.relu_mask = some;
  EXPECT_EQ(k::BnForwardTraining(nchw, forward, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(k::BnForwardTraining(pairs, forward, nullptr), cudaErrorInvalidValue);
  k::BnBackwardArgs backward{};
  backward.grad_residual = some;
  backward.y = some;
  backward.relu_mask = some;  // both
  EXPECT_EQ(k::BnBackwardTraining(nhwc, backward, nullptr), cudaErrorInvalidValue);
  backward.y = nullptr;
  backward.relu_mask = nullptr;  // neither
  EXPECT_EQ(k::BnBackwardTraining(nhwc, backward, nullptr), cudaErrorInvalidValue);
  backward.relu_mask = some;  // the mask where there is none
  EXPECT_EQ(k::BnBackwardTraining(nchw, backward, nullptr), cudaErrorInvalidValue);
  backward.grad_residual = nullptr;  // without a residual: neither y nor a mask
  EXPECT_EQ(k::BnBackwardTraining(plain, backward, nullptr), cudaErrorInvalidValue);
}

// The reductions' channel tiles: 64 channels, narrower only where 64-channel
// tiles of at most 256 blocks each would leave the device short of 4 blocks
// per multiprocessor (64 channels over many rows), and never under 4 packs of
// 16 bytes.
TEST(BatchNormActPaths, NarrowerTilesOnlyWhereTheDeviceWouldNotFill) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  EXPECT_EQ(resnet::ReduceTileChannels(torch::empty({8, 64, 8, 8}, bf16).contiguous(cl)), 64);
  EXPECT_EQ(resnet::ReduceTileChannels(torch::empty({1024, 256, 8, 8}, bf16).contiguous(cl)), 64);
  EXPECT_EQ(resnet::ReduceTileChannels(torch::empty({8, 64, 8, 8}, bf16)), 0);  // NCHW
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    const int tile = resnet::ReduceTileChannels(torch::empty({1024, 64, 16, 16}, bf16.dtype(dtype)).contiguous(cl));
    // 256 blocks per tile: 64 channels fill 4 per multiprocessor up to 64 of them.
    if (sms <= 64) {
      EXPECT_EQ(tile, 64);
    } else {
      EXPECT_LT(tile, 64);
      EXPECT_GE(tile, 4 * 16 / static_cast<int>(torch::elementSize(dtype)));
    }
  }
}

// Kernels on several streams at once keep their own counters (per stream,
// batch_norm_act_kernels.h): four streams each train on their own tensor,
// queued in turn without waiting, give what each gives alone. Tensors of two
// kernels each way (the statistics finished by a tile's last block) and of
// one kernel each way.
TEST(BatchNormActStreams, SeveralStreamsAtOnceKeepTheirOwnSums) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  for (const bool sm90 : {true, false})
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{256, 64, 8, 8}, std::vector<int64_t>{8, 64, 8, 8}}) {
      SCOPED_TRACE(sm90 ? "sm90 launches" : "as before sm90");
      constexpr int kStreams = 4, kRounds = 8;
      torch::manual_seed(11);
      std::vector<BatchNorm2d> bns;
      std::vector<torch::Tensor> xs, upstream, y_alone, dx_alone;
      const auto train = [&](int i) {
        const torch::Tensor x = xs[i].detach().requires_grad_();
        const torch::Tensor y = resnet::BatchNormAct(*bns[i], x, {}, /*relu=*/true, /*fused=*/true, {true, sm90});
        return std::make_pair(y.detach(), torch::autograd::grad({y}, {x}, {upstream[i]})[0]);
      };
      for (int i = 0; i < kStreams; ++i) {
        bns.emplace_back(64);
        bns.back()->to(torch::kCUDA);
        xs.push_back((torch::randn(shape, bf16) * (i + 1) + i).contiguous(cl));
        upstream.push_back(torch::randn(shape, bf16).contiguous(cl));
        const auto [y, dx] = train(i);
        y_alone.push_back(y);
        dx_alone.push_back(dx);
      }
      ASSERT_EQ(resnet::OnePassApplies(xs[0], true, false), shape[0] == 8);
      torch::cuda::synchronize();
      std::vector<c10::cuda::CUDAStream> streams;
      for (int i = 0; i < kStreams; ++i) streams.push_back(c10::cuda::getStreamFromPool());
      // Everything queued behind one gate, so the streams' kernels start
      // together and overlap instead of running at the host's launch pace.
      const c10::cuda::CUDAStream held = c10::cuda::getStreamFromPool();
      std::vector<std::pair<torch::Tensor, torch::Tensor>> results;
      {
        trainbench::plugins::StreamGate gate(held.stream());
        at::cuda::CUDAEvent open;
        open.record(held);
        for (auto& stream : streams) open.block(stream);
        for (int round = 0; round < kRounds; ++round) {
          for (int i = 0; i < kStreams; ++i) {
            const c10::cuda::CUDAStreamGuard guard(streams[i]);
            results.push_back(train(i));
          }
        }
        gate.Open();
      }
      torch::cuda::synchronize();
      for (size_t k = 0; k < results.size(); ++k) {
        const int i = static_cast<int>(k % kStreams);
        ASSERT_TRUE(torch::allclose(results[k].first, y_alone[i], 1e-2, 1e-2)) << "y, stream " << i << ", run " << k;
        ASSERT_TRUE(torch::allclose(results[k].second, dx_alone[i], 1e-2, 1e-2)) << "dx, stream " << i << ", run " << k;
      }
    }
}

// `sm90`: BnLaunch::sm90_launches.
void ReplaysInACudaGraph(bool sm90) {
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  torch::manual_seed(5);
  BatchNorm2d bn1(32), bn2(32);
  bn1->to(torch::kCUDA);
  bn2->to(torch::kCUDA);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  torch::Tensor x = torch::randn({16, 32, 8, 8}, cuda).contiguous(cl).requires_grad_();
  torch::Tensor skip = torch::randn({16, 32, 8, 8}, cuda).contiguous(cl).requires_grad_();
  auto step = [&] {
    for (auto* t : {&x, &skip}) t->mutable_grad() = torch::Tensor();
    for (auto* bn : {&bn1, &bn2}) {
      (*bn)->weight.mutable_grad() = torch::Tensor();
      (*bn)->bias.mutable_grad() = torch::Tensor();
    }
    const torch::Tensor h = resnet::BatchNormAct(*bn1, x, {}, true, true, {true, sm90});
    resnet::BatchNormAct(*bn2, h * 2.0, skip, true, true, {true, sm90}).square().sum().backward();
  };
  at::cuda::CUDAGraph graph;
  std::vector<torch::Tensor> expected;
  torch::Tensor running_after_one;
  trainbench::testing::WarmUpAndCapture(graph, step, [&] {
    expected = {x.grad().clone(), skip.grad().clone(), bn1->weight.grad().clone(), bn2->bias.grad().clone()};
  });
  torch::cuda::synchronize();
  // Capturing ran nothing: the running mean moved once (the eager step).
  const torch::Tensor mean_before = bn1->running_mean.clone();
  for (int replay = 0; replay < 3; ++replay) {
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::allclose(x.grad(), expected[0], 1e-6, 1e-6)) << "replay " << replay;
    EXPECT_TRUE(torch::allclose(skip.grad(), expected[1], 1e-6, 1e-6));
    EXPECT_TRUE(torch::allclose(bn1->weight.grad(), expected[2], 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(bn2->bias.grad(), expected[3], 1e-5, 1e-5));
  }
  // Each replay updated the running statistics once more.
  const torch::Tensor batch_mean = x.detach().mean({0, 2, 3});
  torch::Tensor expect_mean = mean_before;
  for (int i = 0; i < 3; ++i) expect_mean = 0.9 * expect_mean + 0.1 * batch_mean;
  EXPECT_TRUE(torch::allclose(bn1->running_mean, expect_mean, 1e-5, 1e-5));
}

TEST(BatchNormActGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ReplaysInACudaGraph(/*sm90=*/true);
}
TEST(BatchNormActGraph, ReplaysInACudaGraphLaunchedAsBeforeSm90) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ReplaysInACudaGraph(/*sm90=*/false);
}

// Back to back in a CUDA graph, each batch norm's element-wise pass starts
// while its reduction finishes (programmatic dependent launch on sm_90,
// batch_norm_act_kernels.cu): it must still read its own call's
// coefficients, not those the workspace held from the call before (another
// tensor, statistics a hundred times apart). Two kernels each way, forward
// and backward, with and without a residual.
void BackToBackCallsReadTheirOwnStatistics(bool sm90) {
  const auto cl = torch::MemoryFormat::ChannelsLast;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  torch::manual_seed(17);
  constexpr int kCalls = 8;
  const std::vector<int64_t> shape{256, 64, 8, 8};
  BatchNorm2d bn(64);
  bn->to(torch::kCUDA);
  std::vector<torch::Tensor> xs, skips, upstream;
  for (int i = 0; i < kCalls; ++i) {
    const double scale = i % 2 == 0 ? 1.0 : 100.0;
    xs.push_back((torch::randn(shape, bf16) * scale + scale / 2).contiguous(cl));
    skips.push_back((torch::randn(shape, bf16) * scale).contiguous(cl));
    upstream.push_back((torch::randn(shape, bf16) / scale).contiguous(cl));
  }
  ASSERT_FALSE(resnet::OnePassApplies(xs[0], true, false));
  // Call i: a residual on odd calls; y and dx of each.
  const auto call = [&](int i) {
    const torch::Tensor x = xs[i].detach().requires_grad_();
    const torch::Tensor skip = i % 2 == 1 ? skips[i] : torch::Tensor();
    const torch::Tensor y = resnet::BatchNormAct(*bn, x, skip, /*relu=*/true, /*fused=*/true, {true, sm90});
    return std::make_pair(y.detach(), torch::autograd::grad({y}, {x}, {upstream[i]})[0]);
  };
  std::vector<std::pair<torch::Tensor, torch::Tensor>> alone, replayed;
  auto stream = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    for (int i = 0; i < kCalls; ++i) alone.push_back(call(i));
    stream.synchronize();
    graph.capture_begin();
    for (int i = 0; i < kCalls; ++i) replayed.push_back(call(i));
    graph.capture_end();
  }
  for (int replay = 0; replay < 3; ++replay) {
    graph.replay();
    torch::cuda::synchronize();
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(torch::allclose(replayed[i].first, alone[i].first, 1e-2, 1e-2)) << "y, call " << i;
      ASSERT_TRUE(torch::allclose(replayed[i].second, alone[i].second, 1e-2, 1e-2)) << "dx, call " << i;
    }
  }
}

TEST(BatchNormActGraph, BackToBackCallsReadTheirOwnStatistics) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  BackToBackCallsReadTheirOwnStatistics(/*sm90=*/true);
}
TEST(BatchNormActGraph, BackToBackCallsLaunchedAsBeforeSm90ReadTheirOwnStatistics) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  BackToBackCallsReadTheirOwnStatistics(/*sm90=*/false);
}

}  // namespace

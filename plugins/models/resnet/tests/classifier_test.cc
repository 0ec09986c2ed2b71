// The ResNets' classifier on CUDA (plugins/models/resnet/classifier.h) against
// the exact values (fp64) and against autocast's path: every element type,
// few and many features, features that no 16-byte pack divides, misaligned
// activations, 1-16 classes, with and without a bias, only some gradients
// asked for; the same values every run; LibTorch's linear where the kernels
// do not apply; replays in a CUDA graph.
// Built only where the kernels are (a LibTorch with CUDA); skipped without a GPU.
#include "classifier.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <tuple>

#include "cuda_graph.h"
#include "relative_error.h"
#include "trainbench/sdk/support/autocast.h"

namespace {

using trainbench::testing::RelativeError;

struct Case {
  torch::Dtype dtype;
  int64_t n, c, k;
  bool bias;
  bool misaligned;  // x starts one element past an allocation's start
};

std::string Name(const Case& c) {
  std::string s = c10::toString(c.dtype);
  s += "_" + std::to_string(c.n) + "x" + std::to_string(c.c) + "_k" + std::to_string(c.k);
  return s + (c.bias ? "_bias" : "") + (c.misaligned ? "_misaligned" : "");
}

class Classifier : public ::testing::TestWithParam<Case> {};

struct Inputs {
  torch::Tensor x, weight, bias, upstream;
};

Inputs MakeInputs(const Case& c) {
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  Inputs in;
  const torch::Tensor flat = torch::randn({c.n * c.c + 1}, cuda.dtype(c.dtype));
  in.x = flat.narrow(0, c.misaligned ? 1 : 0, c.n * c.c).view({c.n, c.c});
  in.weight = torch::randn({c.k, c.c}, cuda) / std::sqrt(static_cast<double>(c.c));
  if (c.bias) in.bias = torch::randn({c.k}, cuda);
  in.upstream = torch::randn({c.n, c.k}, cuda);
  return in;
}

// y, dx, dw, db of one forward and backward through `f`.
template <class F>
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> Step(const Inputs& in, F&& f) {
  torch::Tensor x = in.x.detach().requires_grad_();
  torch::Tensor w = in.weight.detach().clone().requires_grad_();
  torch::Tensor b = in.bias.defined() ? in.bias.detach().clone().requires_grad_() : torch::Tensor();
  torch::Tensor y = f(x, w, b);
  y.backward(in.upstream.to(y.scalar_type()));
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

TEST_P(Classifier, MatchesTheExactValues) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  torch::manual_seed(5);
  const Inputs in = MakeInputs(c);
  ASSERT_TRUE(resnet::ClassifierApplies(in.x, in.weight, in.bias));
  const auto [y, dx, dw, db] = Step(in, [](auto& x, auto& w, auto& b) { return resnet::Classifier(x, w, b); });
  Inputs exact{in.x.to(torch::kDouble), in.weight.to(torch::kDouble),
               in.bias.defined() ? in.bias.to(torch::kDouble) : torch::Tensor(), in.upstream.to(torch::kDouble)};
  const auto [ty, tdx, tdw, tdb] =
      Step(exact, [](auto& x, auto& w, auto& b) { return torch::nn::functional::linear(x, w, b); });
  EXPECT_EQ(y.scalar_type(), torch::kFloat);  // fp32 logits whatever x's type
  EXPECT_EQ(dx.scalar_type(), c.dtype);
  EXPECT_EQ(dw.scalar_type(), torch::kFloat);
  // Sums in fp32; the input's gradient rounded once to its type.
  const double rounding = c.dtype == torch::kFloat ? 1e-6 : c.dtype == torch::kHalf ? 1e-3 : 8e-3;
  EXPECT_LT(RelativeError(y, ty), 1e-5) << Name(c);
  EXPECT_LT(RelativeError(dx, tdx), std::max(rounding, 1e-5)) << Name(c);
  EXPECT_LT(RelativeError(dw, tdw), 1e-5) << Name(c);
  if (c.bias) {
    ASSERT_TRUE(db.defined());
    EXPECT_LT(RelativeError(db, tdb), 1e-5) << Name(c);
  }
  // The same values again (fixed order of every sum).
  const auto [y2, dx2, dw2, db2] = Step(in, [](auto& x, auto& w, auto& b) { return resnet::Classifier(x, w, b); });
  EXPECT_TRUE(torch::equal(y, y2) && torch::equal(dx, dx2) && torch::equal(dw, dw2)) << Name(c);
  if (c.bias) {
    EXPECT_TRUE(torch::equal(db, db2)) << Name(c);
  }
}

// Under autocast LibTorch's linear rounds the weight, the logits and the
// gradients to bf16 or half: the kernels' values are as close to the exact
// ones or closer.
TEST_P(Classifier, AtLeastAsCloseAsAutocastsPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  if (c.dtype == torch::kFloat) GTEST_SKIP() << "autocast takes fp32 activations to bf16 or half";
  torch::manual_seed(6);
  const Inputs in = MakeInputs(c);
  const auto fused = Step(in, [](auto& x, auto& w, auto& b) { return resnet::Classifier(x, w, b); });
  const auto autocast = Step(in, [&](auto& x, auto& w, auto& b) {
    trainbench::sdk::autocast::Enable(c10::kCUDA, c.dtype);
    torch::Tensor y = torch::nn::functional::linear(x, w, b);
    trainbench::sdk::autocast::Disable(c10::kCUDA);
    at::autocast::clear_cache();
    return y.to(torch::kFloat);
  });
  Inputs exact{in.x.to(torch::kDouble), in.weight.to(torch::kDouble),
               in.bias.defined() ? in.bias.to(torch::kDouble) : torch::Tensor(), in.upstream.to(torch::kDouble)};
  const auto truth = Step(exact, [](auto& x, auto& w, auto& b) { return torch::nn::functional::linear(x, w, b); });
  EXPECT_LE(RelativeError(std::get<0>(fused), std::get<0>(truth)),
            RelativeError(std::get<0>(autocast), std::get<0>(truth)))
      << Name(c);
  EXPECT_LE(RelativeError(std::get<1>(fused), std::get<1>(truth)),
            1.5 * RelativeError(std::get<1>(autocast), std::get<1>(truth)))
      << Name(c);
  EXPECT_LE(RelativeError(std::get<2>(fused), std::get<2>(truth)),
            RelativeError(std::get<2>(autocast), std::get<2>(truth)))
      << Name(c);
}

// The ResNets' shapes at 32 px and 224 px, and the edges: one class, the most,
// features that need one element at a time, one row, a misaligned input, the
// weight's gradient over many rows.
INSTANTIATE_TEST_SUITE_P(
    Cuda, Classifier,
    ::testing::Values(Case{torch::kBFloat16, 128, 512, 10, true, false},
                      Case{torch::kBFloat16, 1024, 2048, 10, true, false},
                      Case{torch::kHalf, 256, 2048, 10, true, false}, Case{torch::kFloat, 128, 512, 10, true, false},
                      Case{torch::kFloat, 64, 2048, 16, false, false}, Case{torch::kBFloat16, 33, 100, 16, true, false},
                      Case{torch::kBFloat16, 7, 24, 1, false, false}, Case{torch::kHalf, 1, 64, 3, true, false},
                      Case{torch::kBFloat16, 100, 520, 7, true, true}, Case{torch::kFloat, 65, 129, 5, true, true},
                      Case{torch::kHalf, 3000, 72, 9, true, false},
                      // Above 256 rows the weight's gradient in chunks of rows:
                      // a last chunk shorter than the others, a misaligned input.
                      Case{torch::kBFloat16, 1000, 512, 10, true, false},
                      Case{torch::kFloat, 257, 2048, 10, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

// Only the gradients autograd asks for: an input that needs none (a frozen
// backbone), a weight that needs none; at a few rows and at many (the
// weight's gradient in chunks).
TEST(ClassifierGradients, OnlyThoseAskedFor) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(7);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (const int64_t rows : {32, 1024}) {
    const torch::Tensor x = torch::randn({rows, 64}, cuda.dtype(torch::kBFloat16));
    const torch::Tensor w = torch::randn({10, 64}, cuda).requires_grad_();
    const torch::Tensor b = torch::randn({10}, cuda);
    resnet::Classifier(x, w, b).sum().backward();
    ASSERT_TRUE(w.grad().defined()) << rows;
    const torch::Tensor expected = torch::ones({rows, 10}, cuda).t().mm(x.to(torch::kFloat));
    EXPECT_LT(RelativeError(w.grad(), expected), 1e-5) << rows;

    const torch::Tensor x2 = x.detach().clone().requires_grad_();
    const torch::Tensor frozen = w.detach();
    const torch::Tensor b2 = b.detach().clone().requires_grad_();
    resnet::Classifier(x2, frozen, b2).sum().backward();
    ASSERT_TRUE(x2.grad().defined()) << rows;
    const torch::Tensor expected_dx = torch::ones({rows, 10}, cuda).mm(frozen).to(torch::kBFloat16);
    EXPECT_LT(RelativeError(x2.grad(), expected_dx), 8e-3) << rows;
    ASSERT_TRUE(b2.grad().defined()) << rows;
    EXPECT_TRUE(torch::allclose(b2.grad(), torch::full({10}, static_cast<double>(rows), cuda))) << rows;
  }
}

// Where the kernels do not apply, LibTorch's linear: the same values.
TEST(ClassifierFallback, LibTorchsLinearWhereTheKernelsDoNotApply) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(8);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const torch::Tensor x = torch::randn({8, 32}, cuda);
  const torch::Tensor w = torch::randn({10, 32}, cuda), b = torch::randn({10}, cuda);
  const std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, std::string> refused[] = {
      {x.cpu(), w.cpu(), b.cpu(), "on the CPU"},
      {x, torch::randn({17, 32}, cuda), torch::randn({17}, cuda), "17 classes"},
      {x, w.to(torch::kBFloat16), b, "a bf16 weight"},
      {x.t().contiguous().t(), w, b, "a transposed input"},
      {x.to(torch::kDouble), w, b, "an fp64 input"},
      {x, w, b.to(torch::kHalf), "a half bias"},
      {x.view({8, 4, 8}), torch::randn({10, 8}, cuda), b, "a 3-D input"},
  };
  for (const auto& [xi, wi, bi, what] : refused) {
    EXPECT_FALSE(resnet::ClassifierApplies(xi, wi, bi)) << what;
    torch::Tensor expected, got;
    try {
      expected = torch::nn::functional::linear(xi, wi, bi);
    } catch (const c10::Error&) {
      EXPECT_THROW(resnet::Classifier(xi, wi, bi), c10::Error) << what;
      continue;
    }
    got = resnet::Classifier(xi, wi, bi);
    EXPECT_TRUE(torch::equal(got, expected)) << what;
  }
}

// Forward and backward captured in a CUDA graph and replayed on new inputs:
// at batch 128 and at 1024 (the weight's gradient in chunks, its workspace
// allocated inside the capture).
TEST(ClassifierGraph, ReplaysInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(9);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (const int64_t rows : {128, 1024}) {
    torch::Tensor x = torch::randn({rows, 512}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    torch::Tensor w = torch::randn({10, 512}, cuda).requires_grad_();
    torch::Tensor b = torch::randn({10}, cuda).requires_grad_();
    auto step = [&] {
      for (auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
      resnet::Classifier(x, w, b).square().sum().backward();
    };
    at::cuda::CUDAGraph graph;
    trainbench::testing::WarmUpAndCapture(graph, step);
    torch::cuda::synchronize();
    for (int replay = 0; replay < 2; ++replay) {
      {
        torch::NoGradGuard no_grad;
        x.copy_(torch::randn_like(x));
      }
      graph.replay();
      torch::cuda::synchronize();
      const torch::Tensor captured[] = {x.grad().clone(), w.grad().clone(), b.grad().clone()};
      torch::Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_(),
                    b2 = b.detach().clone().requires_grad_();
      resnet::Classifier(x2, w2, b2).square().sum().backward();
      EXPECT_TRUE(torch::equal(captured[0], x2.grad())) << rows << " rows, replay " << replay;
      EXPECT_TRUE(torch::equal(captured[1], w2.grad())) << rows << " rows, replay " << replay;
      EXPECT_TRUE(torch::equal(captured[2], b2.grad())) << rows << " rows, replay " << replay;
    }
  }
}

}  // namespace

// trainbench::sdk::BatchNorm2d across ranks: two threads stand for two
// ranks (an in-process CrossRankSum), each normalising half of a batch; the
// result must be torch::nn::BatchNorm2d on the whole batch: outputs, input
// and parameter gradients, running statistics.
#include "trainbench/sdk/support/batch_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "plugin_loader.h"
#include "plugin_options.h"
#include "test_env.h"
#include "trainbench/sdk/support/module_model.h"

namespace trainbench {
namespace {

// Sums tensors over `world` threads: every thread adds its tensor, waits for
// the others, and reads the total.
class ThreadSum {
 public:
  explicit ThreadSum(int world) : world_(world) {}

  void Sum(torch::Tensor& t) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    total_ = arrived_ == 0 ? t.clone() : total_ + t;
    if (++arrived_ == world_) {
      results_[generation] = total_;  // kept: a late reader may still need it
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    t.copy_(results_.at(generation));
  }

  int world() const { return world_; }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  torch::Tensor total_;
  std::map<int64_t, torch::Tensor> results_;
};

class RankSum : public sdk::CrossRankSum {
 public:
  RankSum(ThreadSum& sum, int rank) : sum_(sum), rank_(rank) {}
  void SumInPlace(torch::Tensor& t) override { sum_.Sum(t); }
  int Rank() const noexcept override { return rank_; }
  int WorldSize() const noexcept override { return sum_.world(); }

 private:
  ThreadSum& sum_;
  int rank_;
};

struct Outcome {
  torch::Tensor output, input_grad, weight_grad, bias_grad, running_mean, running_var;
};

// One rank's forward and backward on its slice; `upstream` weights the
// output so that every element's gradient differs.
Outcome RunRank(sdk::BatchNorm2d bn, const torch::Tensor& x, const torch::Tensor& upstream, double scale) {
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor out = bn(input);
  ((out * upstream).sum() * scale).backward();
  return {out.detach(),
          input.grad(),
          bn->weight.grad().clone(),
          bn->bias.grad().clone(),
          bn->running_mean.clone(),
          bn->running_var.clone()};
}

class SyncBatchNormShapes : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(SyncBatchNormShapes, TwoRanksWithHalfBatchesEqualOneBatchNormOnTheWholeBatch) {
  torch::manual_seed(7);
  const std::vector<int64_t> shape = GetParam();
  const int64_t channels = shape[1];
  const torch::Tensor x = torch::randn(shape) * 3 + 1.5;
  const torch::Tensor upstream = torch::randn(shape);

  // Reference: LibTorch's own BatchNorm2d on all 8 samples.
  torch::nn::BatchNorm2d reference(channels);
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor expected = reference(input);
  (expected * upstream).sum().backward();

  ThreadSum sum(2);
  std::vector<Outcome> ranks(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      sdk::BatchNorm2d bn(channels);
      RankSum rank_sum(sum, r);
      bn->SetCrossRankSum(&rank_sum);
      // Rank r's half; each rank's gradients are summed afterwards, as the
      // parameter all-reduce does (the reference loss is the sum of both).
      const int64_t half = shape[0] / 2;
      ranks[r] = RunRank(bn, x.narrow(0, half * r, half), upstream.narrow(0, half * r, half), 1.0);
    });
  }
  for (auto& t : threads) t.join();

  const auto close = [](const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, 1e-4, 1e-5); };
  EXPECT_TRUE(close(torch::cat({ranks[0].output, ranks[1].output}), expected.detach()));
  EXPECT_TRUE(close(torch::cat({ranks[0].input_grad, ranks[1].input_grad}), input.grad()));
  EXPECT_TRUE(close(ranks[0].weight_grad + ranks[1].weight_grad, reference->weight.grad()));
  EXPECT_TRUE(close(ranks[0].bias_grad + ranks[1].bias_grad, reference->bias.grad()));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(close(ranks[r].running_mean, reference->running_mean)) << r;
    EXPECT_TRUE(close(ranks[r].running_var, reference->running_var)) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(SyncBatchNorm, SyncBatchNormShapes,
                         ::testing::Values(std::vector<int64_t>{8, 5, 6, 6}, std::vector<int64_t>{8, 128, 16, 16},
                                           std::vector<int64_t>{2, 64, 32, 32}));

TEST(SyncBatchNorm, WithoutRanksItIsLibTorchsBatchNorm2d) {
  torch::manual_seed(8);
  const torch::Tensor x = torch::randn({4, 3, 5, 5});
  torch::nn::BatchNorm2d reference(torch::nn::BatchNormOptions(3).momentum(c10::nullopt));
  sdk::BatchNorm2d ours(torch::nn::BatchNormOptions(3).momentum(c10::nullopt));
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(torch::allclose(ours(x * step), reference(x * step)));
  }
  EXPECT_TRUE(torch::allclose(ours->running_var, reference->running_var));
  EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 3);
  ours->eval();
  reference->eval();
  EXPECT_TRUE(torch::allclose(ours(x), reference(x)));
  // Same parameter and buffer names: checkpoints load either way.
  EXPECT_EQ(ours->named_parameters().keys(), reference->named_parameters().keys());
  EXPECT_EQ(ours->named_buffers().keys(), reference->named_buffers().keys());
}

// The real ResNet18 plugin, two "ranks" with half a batch each (gradients
// summed, as the parameter all-reduce does) against one model with the whole
// batch. In fp64: in fp32 a ReLU input within rounding of zero can fall on
// the other side in one of the two computations, which moves a gradient
// element by its full size (seen: 8e-5 on a 0.03 bias gradient).
TEST(SyncBatchNorm, ResNet18GradientsOnTwoRanksEqualOneModelsOnTheWholeBatch) {
  const auto plugin = worker::LoadPlugin(testing::PluginFile("resnet18"));
  auto make = [&] {
    return worker::CreateModel(plugin, testing::WithDefaults(plugin, {{"num_classes", 10},
                                                                      {"stem", "cifar"},
                                                                      {"image_size", 32},
                                                                      {"fused_batchnorm", true},
                                                                      {"cudnn_engine_cache", true}}));
  };
  torch::manual_seed(11);
  auto reference = make();
  std::vector<std::shared_ptr<sdk::Model>> ranks{make(), make()};
  {
    torch::NoGradGuard no_grad;
    for (auto& m : ranks) {
      auto src = reference->module().parameters();
      auto dst = m->module().parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
  }
  for (auto* m : {&reference, &ranks[0], &ranks[1]}) (*m)->module().to(torch::kFloat64);
  const torch::Tensor x = torch::randn({8, 3, 16, 16}, torch::kFloat64);  // small: fp64 is slow
  const torch::Tensor y = torch::randint(0, 10, {8});
  torch::Tensor logits;
  ASSERT_TRUE(reference->Forward(x, &logits).ok());
  torch::nn::functional::cross_entropy(logits, y).backward();

  ThreadSum sum(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RankSum rank_sum(sum, r);
      ASSERT_TRUE(ranks[r]->SyncBatchNorm(&rank_sum).ok());
      torch::Tensor out;
      ASSERT_TRUE(ranks[r]->Forward(x.narrow(0, 4 * r, 4), &out).ok());
      (torch::nn::functional::cross_entropy(out, y.narrow(0, 4 * r, 4)) * 0.5).backward();
    });
  }
  for (auto& t : threads) t.join();
  const auto g0 = ranks[0]->module().parameters(), g1 = ranks[1]->module().parameters();
  size_t i = 0;
  for (const auto& item : reference->module().named_parameters()) {
    const torch::Tensor expected = item.value().grad();
    const torch::Tensor got = g0[i].grad() + g1[i].grad();
    EXPECT_TRUE(torch::allclose(got, expected, 1e-9, 1e-12))
        << item.key() << ": max difference " << (got - expected).abs().max().item<double>();
    ++i;
  }
}

// A model with LibTorch's own BatchNorm2d would stay per rank: refused.
TEST(SyncBatchNorm, PlainTorchBatchNormIsRefusedByName) {
  struct NetImpl : torch::nn::Module {
    NetImpl() {
      register_module("conv", torch::nn::Conv2d(3, 4, 3));
      register_module("norm", torch::nn::BatchNorm2d(4));
    }
    torch::Tensor forward(torch::Tensor x) { return x; }
  };
  TORCH_MODULE(Net);
  sdk::ModuleModel<Net> model(Net(), {3, 8, 8}, 4);
  const sdk::Status status = model.SyncBatchNorm(nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("layer 'norm' is a torch::nn batch normalisation"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace trainbench

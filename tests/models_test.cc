// The three model plugins against torchvision's and PyTorch's own numbers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "autocast_scope.h"
#include "mixed_precision.h"
#include "plugin_loader.h"
#include "plugin_options.h"
#include "relative_error.h"
#include "test_env.h"

namespace trainbench::worker {
namespace {

// The model as the host creates it: the plugin's defaults under the test's options.
std::shared_ptr<sdk::Model> Create(const LoadedPlugin& plugin, const nlohmann::json& options) {
  return CreateModel(plugin, testing::WithDefaults(plugin, options));
}

nlohmann::json MakeOptions(const std::string& name, int64_t classes) {
  nlohmann::json options{{"num_classes", classes}};
  if (name == "simple_cnn")
    options.update({{"hidden", 192}, {"fused_epilogue", true}});
  else
    options.update({{"stem", "imagenet"}, {"image_size", 32}, {"fused_batchnorm", true}, {"cudnn_engine_cache", true}});
  return options;
}

std::shared_ptr<sdk::Model> Make(const std::string& name, int64_t classes) {
  return Create(LoadPlugin(trainbench::testing::PluginFile(name)), MakeOptions(name, classes));
}

// The ResNets' whole-map convolutions (option whole_map_conv): by the rule,
// forced on (every type at every batch, channels_last in fp32 too, the
// stem's cases, where the rule takes layer 3's 2x2 maps and layer 4's 1x1),
// and off (the plain convolutions the rule no longer runs in fp32).
constexpr const char* kWholeMapModes[] = {"auto", "always", "never"};

// torchvision.models.resnet18/50(num_classes=1000): parameter counts from
// torchvision's documentation; parameter tensors from len(list(parameters())).
TEST(Models, ResNetParameterCountsMatchTorchvision) {
  EXPECT_EQ(Make("resnet18", 1000)->ParameterCount(), 11689512);
  EXPECT_EQ(Make("resnet50", 1000)->ParameterCount(), 25557032);
  EXPECT_EQ(Make("resnet18", 1000)->module().parameters().size(), 62u);
  EXPECT_EQ(Make("resnet50", 1000)->module().parameters().size(), 161u);
}

TEST(Models, TenClassCountsMatchThePyTorchBaseline) {
  // ../shared/baselines/h200-pytorch-2.11.json, counted by PyTorch.
  EXPECT_EQ(Make("simple_cnn", 10)->ParameterCount(), 488586);
  EXPECT_EQ(Make("resnet18", 10)->ParameterCount(), 11181642);
  EXPECT_EQ(Make("resnet50", 10)->ParameterCount(), 23528522);
}

TEST(Models, ParameterNamesAndShapesFollowTorchvision) {
  auto model = Make("resnet50", 1000);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model->module().named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  std::map<std::string, std::vector<int64_t>> buffers;
  for (const auto& item : model->module().named_buffers()) buffers[item.key()] = item.value().sizes().vec();
  EXPECT_EQ(shapes["conv1.weight"], (std::vector<int64_t>{64, 3, 7, 7}));
  EXPECT_EQ(shapes["layer1.0.conv3.weight"], (std::vector<int64_t>{256, 64, 1, 1}));
  EXPECT_EQ(shapes["layer2.0.conv2.weight"], (std::vector<int64_t>{128, 128, 3, 3}));
  EXPECT_EQ(shapes["layer1.0.downsample.0.weight"], (std::vector<int64_t>{256, 64, 1, 1}));
  EXPECT_EQ(shapes["layer4.2.bn3.bias"], (std::vector<int64_t>{2048}));
  EXPECT_EQ(shapes["fc.weight"], (std::vector<int64_t>{1000, 2048}));
  EXPECT_EQ(buffers["layer3.5.bn2.running_var"], (std::vector<int64_t>{256}));
  EXPECT_EQ(shapes.count("layer4.3.conv1.weight"), 0u);  // [3, 4, 6, 3] blocks
}

// Training FLOPs per image as torch.utils.flop_counter counts them (the
// baseline file), measured by our per-layer counters.
TEST(Models, TrainingFlopsMatchPyTorchsFlopCounter) {
  int64_t flops = 0;
  ASSERT_TRUE(Make("simple_cnn", 10)->TrainingFlopsPerSample(&flops).ok());
  EXPECT_EQ(flops, 62532864);
  ASSERT_TRUE(Make("resnet18", 10)->TrainingFlopsPerSample(&flops).ok());
  EXPECT_EQ(flops, 217282560);
  ASSERT_TRUE(Make("resnet50", 10)->TrainingFlopsPerSample(&flops).ok());
  EXPECT_EQ(flops, 495771648);
}

TEST(Models, CifarStemKeepsResolution) {
  auto model = Create(LoadPlugin(trainbench::testing::PluginFile("resnet18")), {{"num_classes", 10},
                                                                                {"stem", "cifar"},
                                                                                {"image_size", 32},
                                                                                {"fused_batchnorm", true},
                                                                                {"cudnn_engine_cache", true}});
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : model->module().named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  EXPECT_EQ(shapes["conv1.weight"], (std::vector<int64_t>{64, 3, 3, 3}));
  int64_t flops = 0;
  ASSERT_TRUE(model->TrainingFlopsPerSample(&flops).ok());
  EXPECT_GT(flops, 10 * int64_t{217282560});  // 16x the spatial work of the ImageNet stem
  torch::Tensor logits;
  ASSERT_TRUE(model->Forward(torch::randn({2, 3, 32, 32}), &logits).ok());
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10}));
}

// At 32x32 input ResNet's layer4 runs on 1x1 maps, where NCHW and NHWC
// strides describe the same memory. A channels_last batch must keep NHWC
// strides through it all the same (torchvision's in-place ReLU and residual
// add keep them): an out-of-place op writes NCHW strides there, and cuDNN's
// weight gradient for such an input comes out NCHW, so every step transposed
// and re-strided the gradients of layer4's three 512x512 convolutions
// (docs/results/raw/gpu-optimisation-notes.md, change 12). CUDA only: on the CPU
// LibTorch's batch norm itself writes NCHW strides for 1x1 maps.
TEST(Models, ChannelsLastStridesSurviveOneByOneMapsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"resnet18", "resnet50"}) {
    auto model = Make(name, 10);
    torch::nn::Module& module = model->module();
    module.to(torch::kCUDA);
    auto layer4 = module.named_children()["layer4"]->as<torch::nn::SequentialImpl>();
    ASSERT_NE(layer4, nullptr);
    const int64_t in = name == "resnet18" ? 256 : 1024, out = name == "resnet18" ? 512 : 2048;
    for (bool amp : {false, true}) {
      for (bool train : {true, false}) {
        module.train(train);
        AutocastScope autocast(torch::kCUDA, amp ? sdk::Amp::kBf16 : sdk::Amp::kNone, /*cache=*/false);
        torch::Tensor x = torch::randn({2, in, 2, 2}, torch::kCUDA).contiguous(torch::MemoryFormat::ChannelsLast);
        torch::Tensor y = layer4->forward(x.requires_grad_(train));
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, out, 1, 1}));
        EXPECT_EQ(y.strides(), (std::vector<int64_t>{out, 1, out, out}))
            << name << (amp ? " bf16" : " fp32") << (train ? " train" : " eval");
      }
    }
  }
}

TEST(Models, UnknownStemIsACreationError) {
  EXPECT_THROW(Create(LoadPlugin(trainbench::testing::PluginFile("resnet18")), {{"num_classes", 10},
                                                                                {"stem", "tiny"},
                                                                                {"image_size", 32},
                                                                                {"fused_batchnorm", true},
                                                                                {"cudnn_engine_cache", true}}),
               PluginError);
}

// A model's fused CUDA kernels against the composite path of the same plugin
// (`option` false) with the same weights: the same logits, loss and
// gradients, within `tolerance` of the largest gradient of each parameter.
// With `truth` (deep models, where the convolutions' TF32 or bf16 rounding
// grows through the layers and any change of strides or kernels moves the
// result by more than a fixed bound), both are measured against the composite
// in fp64 instead, and the fused model must be as close to it as the
// composite is (1.5x in fp32; 2x in bf16, where both errors are rounding
// noise of 10-45% in some bias gradients; or within `tolerance`), in its
// logits, every gradient and every running statistic.
void ExpectFusedMatchesComposite(const std::string& name, const std::string& option, sdk::Amp amp, bool channels_last,
                                 double tolerance, bool truth = false,
                                 const nlohmann::json& both = nlohmann::json::object()) {
  SCOPED_TRACE(name + " " + option + " " + both.dump());
  nlohmann::json fused_options = MakeOptions(name, 10);
  fused_options.update(both);
  auto fused = Create(LoadPlugin(trainbench::testing::PluginFile(name)), fused_options);
  nlohmann::json options = name == "simple_cnn" ? nlohmann::json{{"num_classes", 10}, {"hidden", 192}}
                                                : nlohmann::json{{"num_classes", 10},
                                                                 {"stem", "imagenet"},
                                                                 {"image_size", 32},
                                                                 {"fused_batchnorm", true},
                                                                 {"cudnn_engine_cache", true}};
  options.update(both);
  options[option] = false;
  auto composite = Create(LoadPlugin(trainbench::testing::PluginFile(name)), options);
  auto exact = truth ? Create(LoadPlugin(trainbench::testing::PluginFile(name)), options) : nullptr;
  const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  for (auto* m : {&fused, &composite, &exact}) {
    if (!*m) continue;
    (*m)->module().to(torch::kCUDA);
    for (auto& p : (*m)->module().parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(format));
  }
  {
    torch::NoGradGuard no_grad;
    auto from = composite->module().named_parameters();
    for (auto& item : fused->module().named_parameters()) item.value().copy_(from[item.key()]);
    if (exact) {
      for (auto& item : exact->module().named_parameters()) item.value().copy_(from[item.key()]);
      exact->module().to(torch::kDouble);
    }
  }
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({64, 3, 32, 32}, torch::kCUDA).contiguous(format);
  const torch::Tensor y = torch::randint(0, 10, {64}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
  auto run = [&](sdk::Model& model, bool fp64) {
    torch::Tensor logits;
    {
      AutocastScope autocast(c10::kCUDA, fp64 ? sdk::Amp::kNone : amp);
      EXPECT_TRUE(model.Forward(fp64 ? x.to(torch::kDouble) : x, &logits).ok());
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.to(torch::kDouble), y);
    loss.backward();
    return std::make_pair(logits.to(torch::kDouble), loss);
  };
  const auto [fused_logits, fused_loss] = run(*fused, false);
  const auto [ref_logits, ref_loss] = run(*composite, false);
  torch::Tensor true_logits;
  if (exact) true_logits = run(*exact, true).first;
  const auto error = trainbench::testing::RelativeError;
  const double factor = amp == sdk::Amp::kNone ? 1.5 : 2.0;
  auto expect_as_close = [&](const torch::Tensor& f, const torch::Tensor& c, const torch::Tensor& t,
                             const std::string& what) {
    const double fe = error(f, t), ce = error(c, t);
    EXPECT_LE(fe, std::max(factor * ce, tolerance)) << name << " " << what << ": composite's error " << ce;
  };
  if (exact) {
    expect_as_close(fused_logits, ref_logits, true_logits, "logits");
  } else {
    EXPECT_TRUE(torch::allclose(fused_logits, ref_logits, tolerance, tolerance))
        << name << " max difference " << (fused_logits - ref_logits).abs().max().item<double>();
    EXPECT_NEAR(fused_loss.item<double>(), ref_loss.item<double>(), tolerance);
  }
  auto ref_params = composite->module().named_parameters();
  auto true_params = exact ? exact->module().named_parameters() : ref_params;
  for (const auto& item : fused->module().named_parameters()) {
    const torch::Tensor& g = item.value().grad();
    const torch::Tensor& r = ref_params[item.key()].grad();
    ASSERT_TRUE(g.defined() && r.defined()) << item.key();
    if (exact) {
      expect_as_close(g, r, true_params[item.key()].grad(), item.key());
    } else {
      const double scale = r.abs().max().item<double>();
      EXPECT_LE((g - r).abs().max().item<double>(), tolerance * scale + 1e-7) << item.key();
    }
  }
  auto ref_buffers = composite->module().named_buffers();
  auto true_buffers = exact ? exact->module().named_buffers() : ref_buffers;
  for (const auto& item : fused->module().named_buffers()) {
    const torch::Tensor& r = ref_buffers[item.key()];
    if (!r.is_floating_point()) {
      EXPECT_TRUE(torch::equal(item.value(), r)) << item.key();
    } else if (exact) {
      expect_as_close(item.value(), r, true_buffers[item.key()], item.key());
    } else {
      EXPECT_TRUE(torch::allclose(item.value(), r, 1e-3, 1e-4)) << name << " " << item.key();
    }
  }
}

TEST(Models, SimpleCnnFusedEpilogueOnCudaMatchesTheCompositeFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ExpectFusedMatchesComposite("simple_cnn", "fused_epilogue", sdk::Amp::kNone, false, 1e-4);
}

TEST(Models, SimpleCnnFusedEpilogueOnCudaMatchesTheCompositeBf16ChannelsLast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // bf16 rounding: one ReLU input within rounding of zero or one changed
  // maximum moves a gradient element, so the bound is loose.
  ExpectFusedMatchesComposite("simple_cnn", "fused_epilogue", sdk::Amp::kBf16, true, 3e-2);
}

// ImageNet-size inputs (issue 16): the same network on 224x224 images does
// 49 times the work of 32x32 (every feature map 7x7 times larger each way,
// the classifier aside), and says it takes that size.
TEST(Models, ResNetWorkGrowsWithTheImageSize) {
  const auto plugin = LoadPlugin(trainbench::testing::PluginFile("resnet50"));
  int64_t small = 0, large = 0;
  const auto at32 = Create(plugin, {{"num_classes", 1000},
                                    {"stem", "imagenet"},
                                    {"image_size", 32},
                                    {"fused_batchnorm", true},
                                    {"cudnn_engine_cache", true}});
  const auto at224 = Create(plugin, {{"num_classes", 1000},
                                     {"stem", "imagenet"},
                                     {"image_size", 224},
                                     {"fused_batchnorm", true},
                                     {"cudnn_engine_cache", true}});
  ASSERT_TRUE(at32->TrainingFlopsPerSample(&small).ok());
  ASSERT_TRUE(at224->TrainingFlopsPerSample(&large).ok());
  EXPECT_EQ(at224->InputShape(), (std::array<int64_t, 3>{3, 224, 224}));
  const double ratio = static_cast<double>(large) / static_cast<double>(small);
  EXPECT_GT(ratio, 47.5);  // the 1000-class classifier is 2% of the work at 32x32
  EXPECT_LT(ratio, 49.0);
  // torchvision's ResNet50 forward is 4.1 GMACs at 224: about 24.5 GFLOPs per
  // trained sample (forward, and backward twice that).
  EXPECT_NEAR(static_cast<double>(large), 24.5e9, 0.5e9);
}

// The ResNets' fused batch norm (+ ReLU, + residual add) against their
// composite path: a whole training step's logits, every gradient and the
// running statistics, both measured against the composite in fp64.
TEST(Models, ResNetFusedBatchNormOnCudaMatchesTheCompositeFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* whole_map : kWholeMapModes)
    for (const std::string name : {"resnet18", "resnet50"})
      ExpectFusedMatchesComposite(name, "fused_batchnorm", sdk::Amp::kNone, false, 1e-3, /*truth=*/true,
                                  {{"whole_map_conv", whole_map}});
}

TEST(Models, ResNetFusedBatchNormOnCudaMatchesTheCompositeBf16ChannelsLast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* whole_map : kWholeMapModes)
    for (const std::string name : {"resnet18", "resnet50"})
      ExpectFusedMatchesComposite(name, "fused_batchnorm", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true,
                                  {{"whole_map_conv", whole_map}});
}

// The batch norms as one kernel each way (batchnorm_one_pass, default on)
// against the two kernels, in a whole training step; at batch 64 the
// channels_last batch norms of layers 2-4 are planned in one pass (the stem's
// and layer 1's in two).
TEST(Models, ResNetOnePassBatchNormOnCudaMatchesTheTwoKernels) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"resnet18", "resnet50"}) {
    ExpectFusedMatchesComposite(name, "batchnorm_one_pass", sdk::Amp::kNone, false, 1e-3, /*truth=*/true);
    ExpectFusedMatchesComposite(name, "batchnorm_one_pass", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true);
  }
}

// The stem's max pool (this plugin's kernels) against LibTorch's, in a whole
// training step: the same maxima, so the same function up to the rest of the
// step's rounding.
TEST(Models, ResNetFusedMaxPoolOnCudaMatchesLibTorchs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"resnet18", "resnet50"}) {
    ExpectFusedMatchesComposite(name, "fused_maxpool", sdk::Amp::kNone, false, 1e-3, /*truth=*/true);
    ExpectFusedMatchesComposite(name, "fused_maxpool", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true);
  }
}

// The classifier as this plugin's kernels (fp32 logits, one kernel each way)
// against torch::nn::Linear (under autocast: cuBLAS in bf16), in a whole
// training step, both against fp64.
TEST(Models, ResNetFusedClassifierOnCudaMatchesLibTorchs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"resnet18", "resnet50"}) {
    ExpectFusedMatchesComposite(name, "fused_classifier", sdk::Amp::kNone, false, 1e-3, /*truth=*/true);
    ExpectFusedMatchesComposite(name, "fused_classifier", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true);
  }
}

// The convolutions through cuDNN's backend API (the engine cache) against
// LibTorch's, in a whole training step, both against fp64.
TEST(Models, ResNetEngineCacheConvolutionsOnCudaMatchLibTorchs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* whole_map : kWholeMapModes) {
    for (const std::string name : {"resnet18", "resnet50"}) {
      ExpectFusedMatchesComposite(name, "cudnn_engine_cache", sdk::Amp::kNone, false, 1e-3, /*truth=*/true,
                                  {{"whole_map_conv", whole_map}});
      ExpectFusedMatchesComposite(name, "cudnn_engine_cache", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true,
                                  {{"whole_map_conv", whole_map}});
    }
  }
}

// The stem's convolution in space-to-depth form against the 7x7 one (both
// through cuDNN's backend API), in a whole training step, both against fp64;
// channels_last, where it applies.
TEST(Models, ResNetStemSpaceToDepthOnCudaMatchesTheSevenBySeven) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"resnet18", "resnet50"}) {
    {
      // fp32 without TF32, within 5% of fp64 where the seven by seven is
      // within 1/1.5 of that (a wrong stem is off by its whole gradient).
      // The two stems are different convolutions: in TF32 their errors
      // against fp64 differ by chance (one call on the H200, after passing in
      // an earlier one: ResNet18's layer4.1.bn2.weight
      // gradient 2.3% off against the seven by seven's 1.4%). Without TF32
      // the space-to-depth model is still 0.1-0.2% off in ResNet18's layer 1
      // bias gradients (the seven by seven's: 3e-6) and up to 2.3% in
      // ResNet50's layer 4 (its: 0.15-1.2%), the same figures with each of
      // the block kernels: not their rearrangement; the 4x4 convolution's engine, by the sizes, not
      // confirmed (the stem's own test, its convolution alone, is within
      // 1e-5 of the seven by seven).
      struct NoTf32 {
        const bool was = at::globalContext().allowTF32CuDNN();
        NoTf32() { at::globalContext().setAllowTF32CuDNN(false); }
        ~NoTf32() { at::globalContext().setAllowTF32CuDNN(was); }
      } no_tf32;
      for (const char* whole_map : kWholeMapModes)
        ExpectFusedMatchesComposite(name, "stem_space_to_depth", sdk::Amp::kNone, true, 5e-2, /*truth=*/true,
                                    {{"whole_map_conv", whole_map}});
    }
    for (const char* whole_map : kWholeMapModes)
      ExpectFusedMatchesComposite(name, "stem_space_to_depth", sdk::Amp::kBf16, true, 1e-2, /*truth=*/true,
                                  {{"whole_map_conv", whole_map}});
  }
}

// On the CPU the fused kernels' options change nothing: the same function
// either way.
TEST(Models, ResNetFusedOptionsLeaveTheCpuPathAlone) {
  torch::manual_seed(1);
  auto a = Create(LoadPlugin(trainbench::testing::PluginFile("resnet18")), {{"num_classes", 10},
                                                                            {"stem", "imagenet"},
                                                                            {"image_size", 32},
                                                                            {"fused_batchnorm", true},
                                                                            {"cudnn_engine_cache", true}});
  auto b = Create(LoadPlugin(trainbench::testing::PluginFile("resnet18")), {{"num_classes", 10},
                                                                            {"stem", "imagenet"},
                                                                            {"image_size", 32},
                                                                            {"fused_batchnorm", false},
                                                                            {"fused_maxpool", false},
                                                                            {"fused_classifier", false},
                                                                            {"cudnn_engine_cache", true}});
  {
    torch::NoGradGuard no_grad;
    auto from = a->module().named_parameters();
    for (auto& item : b->module().named_parameters()) item.value().copy_(from[item.key()]);
  }
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  torch::Tensor la, lb;
  ASSERT_TRUE(a->Forward(x, &la).ok());
  ASSERT_TRUE(b->Forward(x, &lb).ok());
  EXPECT_TRUE(torch::equal(la, lb));
  EXPECT_TRUE(torch::equal(a->module().named_buffers()["layer1.0.bn1.running_mean"],
                           b->module().named_buffers()["layer1.0.bn1.running_mean"]));
}

// The parameters a ResNet reads through the host's working copies
// (sdk::Model::UseWorkingCopies) are its convolutions' on the cuDNN path: on
// the CPU none (it declines); on CUDA every convolution's weight, a group
// for the stem and one per stage.
TEST(Models, ResNetListsItsConvolutionsForWorkingCopiesOnCudaOnly) {
  MixedPrecision copies;
  auto model = Create(LoadPlugin(trainbench::testing::PluginFile("resnet18")),
                      {{"num_classes", 10}, {"cudnn_engine_cache", true}});
  std::vector<std::vector<torch::Tensor>> groups{{torch::zeros({1})}};  // cleared
  ASSERT_TRUE(model->UseWorkingCopies(&copies, &groups).ok());
  EXPECT_TRUE(groups.empty());
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  model->module().to(torch::kCUDA);
  ASSERT_TRUE(model->UseWorkingCopies(&copies, &groups).ok());
  ASSERT_EQ(groups.size(), 5u);
  size_t listed = 0;
  for (const auto& group : groups) listed += group.size();
  EXPECT_EQ(listed, 20u) << "every convolution's weight";
}

}  // namespace
}  // namespace trainbench::worker

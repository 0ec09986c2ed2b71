// The training loop below the worker process: RunCell with a spec built in
// code, its events read back from the channel it writes.
#include "trainer.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "out_of_memory.h"
#include "plugin_options.h"
#include "step_timer.h"
#include "test_env.h"
#include "trainbench/protocol/channel.h"
#include "trainbench/protocol/version.h"

namespace trainbench::worker {
namespace {
using testing::PluginFile;

// A SimpleCNN or ResNet18 cell on the CPU, on synthetic images.
// A plugin loaded once and kept for the test program's life, to read its
// options' defaults (as the host does): unloading a plugin with CUDA kernels
// and loading it again in one process (RunInProcess loads its own) left
// CUDA's lazy loading a stale kernel now and then ("named symbol not
// found" at the next launch, 2 runs in 6 on an H100); a worker loads each
// plugin once.
const LoadedPlugin& KeptPlugin(const std::filesystem::path& path) {
  static auto* kept = new std::map<std::filesystem::path, LoadedPlugin>;  // never unloaded, not even at exit
  auto it = kept->find(path);
  if (it == kept->end()) it = kept->emplace(path, LoadPlugin(path)).first;
  return it->second;
}

CellSpec SmallCell(const std::string& model, int64_t image_size) {
  CellSpec spec;
  spec.protocol = protocol::kProtocolVersion;
  spec.experiment = "trainer-test";
  spec.seed = 3;
  spec.model = {model, PluginFile(model).string(), {{"num_classes", 10}}};
  if (model == "simple_cnn") {
    spec.model.options.update({{"hidden", 16}, {"fused_epilogue", false}});
  } else {
    spec.model.options.update(
        {{"stem", "cifar"}, {"image_size", image_size}, {"fused_batchnorm", true}, {"cudnn_engine_cache", true}});
  }
  spec.model.options = testing::WithDefaults(KeptPlugin(PluginFile(model)), spec.model.options);  // as the host does
  spec.device = {"cpu", PluginFile("cpu").string(), {{"threads", 1}, {"channels_last", false}}};
  spec.device.options = testing::WithDefaults(KeptPlugin(PluginFile("cpu")), spec.device.options);
  spec.dataset.kind = "synthetic";
  spec.dataset.train_size = 64;
  spec.dataset.test_size = 32;
  spec.dataset.image_size = image_size;
  spec.training.epochs = 2;
  spec.training.batch_size = 16;
  spec.measurement.warmup_steps = 1;
  spec.measurement.progress_interval_seconds = 0;
  return spec;
}

// Runs the cell; its exit code and events in order.
std::pair<int, std::vector<protocol::Event>> RunInProcess(const CellSpec& spec) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, {}};
  std::vector<protocol::Event> events;
  std::thread reader([&] {
    protocol::FrameReader frames;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0) {
      frames.Feed(buffer, static_cast<size_t>(n));
      while (auto message = frames.Next()) events.push_back(protocol::EventFromJson(*message));
    }
  });
  EventSink sink(fds[1]);
  const int code = RunCell(spec, sink);
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  return {code, events};
}

// The device's graph_fill option (the captured step's memsets as kernels):
// always and never decide; auto, absent or anything else leaves it to the
// step's pixels, on from 512 x 32 x 32 (batch 512 at 32 px, batch 11 at
// 224 px).
TEST(GraphFill, TheOptionOrTheStepsPixelsDecide) {
  using trainbench::worker::GraphFillOption;
  using trainbench::worker::GraphFillWanted;
  const int64_t at32 = 32 * 32, at224 = 224 * 224;
  EXPECT_FALSE(GraphFillWanted(std::nullopt, 128 * at32));
  EXPECT_FALSE(GraphFillWanted(std::nullopt, 511 * at32));
  EXPECT_TRUE(GraphFillWanted(std::nullopt, 512 * at32));
  EXPECT_TRUE(GraphFillWanted(std::nullopt, 1024 * at32));
  EXPECT_FALSE(GraphFillWanted(std::nullopt, 10 * at224));
  EXPECT_TRUE(GraphFillWanted(std::nullopt, 11 * at224));
  EXPECT_TRUE(GraphFillWanted(true, 128 * at32));
  EXPECT_FALSE(GraphFillWanted(false, 1024 * at32));
  EXPECT_FALSE(GraphFillWanted(std::nullopt, 0));
  EXPECT_EQ(GraphFillOption({{"graph_fill", "always"}}), std::optional<bool>(true));
  EXPECT_EQ(GraphFillOption({{"graph_fill", "never"}}), std::optional<bool>(false));
  for (const nlohmann::json& other :
       {nlohmann::json::object(), nlohmann::json{{"graph_fill", "auto"}}, nlohmann::json{{"graph_fill", 1}},
        nlohmann::json{{"graph_fill", "yes"}}, nlohmann::json{{"graph_fill", nullptr}}})
    EXPECT_EQ(GraphFillOption(other), std::nullopt) << other.dump();
}

TEST(Trainer, ACellReportsStartedProgressEpochsThenOneResult) {
  const auto [code, events] = RunInProcess(SmallCell("simple_cnn", 32));
  ASSERT_EQ(code, 0);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<protocol::Started>(events.front()));
  const auto& started = std::get<protocol::Started>(events.front());
  EXPECT_EQ(started.steps_per_epoch, 4);
  EXPECT_EQ(started.train_size, 64);
  int epochs = 0, progress = 0;
  for (const auto& e : events) {
    epochs += std::holds_alternative<protocol::Epoch>(e) ? 1 : 0;
    progress += std::holds_alternative<protocol::Progress>(e) ? 1 : 0;
  }
  EXPECT_EQ(epochs, 2);
  EXPECT_GT(progress, 0);
  ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  const auto& result = std::get<protocol::Result>(events.back());
  EXPECT_EQ(result.steps, 8);
  EXPECT_EQ(result.steady_steps, 7);  // one warm-up step
  EXPECT_EQ(result.epoch_seconds.size(), 2u);
  EXPECT_EQ(result.test_accuracy.size(), 2u);
  EXPECT_GT(result.samples_per_second, 0);
  EXPECT_FALSE(result.projected);
}

TEST(Trainer, AModelThatDoesNotFitTheImagesEndsInOneError) {
  CellSpec spec = SmallCell("resnet18", 24);
  spec.model.options["image_size"] = 32;  // the config said otherwise than the data
  const auto [code, events] = RunInProcess(spec);
  EXPECT_EQ(code, 1);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(events.back()));
  EXPECT_NE(std::get<protocol::Error>(events.back())
                .reason.find("model 'resnet18' takes 3x32x32 inputs, but the dataset's images are 3x24x24"),
            std::string::npos)
      << std::get<protocol::Error>(events.back()).reason;
  for (const auto& e : events) EXPECT_FALSE(std::holds_alternative<protocol::Result>(e));
}

// A cell that runs out of device memory fails in one line that says what it
// held and what to lower, never the allocator's paragraph (which goes to the
// cell's log).
TEST(Trainer, RunningOutOfDeviceMemoryEndsTheCellInOneLineThatSaysWhatToLower) {
  CellSpec spec = SmallCell("simple_cnn", 32);
  const std::string fixture = (testing::TestPluginDir() / "libtrainbench_faulty_model.so").string();
  spec.model = {"faulty_model", fixture, {{"fault", "out_of_memory"}}};
  spec.model.options = testing::WithDefaults(KeptPlugin(fixture), spec.model.options);
  const auto [code, events] = RunInProcess(spec);
  EXPECT_EQ(code, 1);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(events.back()));
  const std::string reason = std::get<protocol::Error>(events.back()).reason;
  EXPECT_EQ(reason.rfind("out of device memory: it held up to ", 0), 0u) << reason;
  EXPECT_NE(reason.find("lower training.batch_size (now 16)"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("CUDA out of memory"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
}

TEST(OutOfMemory, TheLineSaysWhatWasRefusedHeldAllowedAndWhatToLower) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  sdk::MemoryFigures m;
  m.failed_request = 2 * kGiB;
  m.peak_allocated = 5 * kGiB;
  m.peak_reserved = 7 * kGiB + kGiB / 2;
  m.limit = 8 * kGiB;
  m.total = 80 * kGiB;
  m.free = 60 * kGiB;
  EXPECT_EQ(OutOfMemoryLine(m, {256, "cuda"}),
            "out of device memory: an allocation of 2.00 GiB was refused after its tensors held up to 5.00 GiB, the "
            "allocator up to 7.50 GiB; its limit is 8.00 GiB of the device's 80.00 GiB (60.00 GiB free now): lower "
            "training.batch_size (now 256) or raise the cuda device's memory_limit_gib");
  m.limit = m.total;  // no limit set: nothing to raise
  m.failed_request = -1;
  EXPECT_EQ(OutOfMemoryLine(m, {128, "cuda"}),
            "out of device memory: its tensors held up to 5.00 GiB, the allocator up to 7.50 GiB; the device has "
            "80.00 GiB (60.00 GiB free now): lower training.batch_size (now 128)");
  EXPECT_EQ(OutOfMemoryLine(sdk::MemoryFigures{}, {32, "cuda"}),
            "out of device memory: lower training.batch_size (now 32)");
}

TEST(OutOfMemory, LibTorchsErrorAndAPluginsMessageOfItAreRecognised) {
  try {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "Tried to allocate 1 byte");
  } catch (const std::exception& e) {
    EXPECT_TRUE(IsOutOfMemory(e));
  }
  EXPECT_TRUE(IsOutOfMemory(std::runtime_error("model 'resnet18' forward: CUDA out of memory. Tried to allocate")));
  EXPECT_FALSE(IsOutOfMemory(std::runtime_error("fixture: forward failed on purpose")));
}

TEST(Trainer, AResNetTrainsOnImagesOfAnotherSize) {
  const auto [code, events] = RunInProcess(SmallCell("resnet18", 24));
  ASSERT_EQ(code, 0);
  ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  EXPECT_GT(std::get<protocol::Result>(events.back()).flops_per_sample, 0);
}

// The result says what the model's rules chose (SDK 1.4's PathTaken): on
// the CPU the ResNet's batch norms are LibTorch's composite and its
// convolutions LibTorch's, counted as the host ran them; no working copies
// (the ResNets read them on CUDA only); no captured graph, so nothing of the
// worker's.
TEST(Trainer, TheResultSaysWhatTheResNetsRulesChose) {
  const auto [code, events] = RunInProcess(SmallCell("resnet18", 24));
  ASSERT_EQ(code, 0);
  ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  const auto& path = std::get<protocol::Result>(events.back()).path_taken;
  ASSERT_TRUE(path.has_value());
  ASSERT_TRUE(path->contains("model")) << path->dump();
  const nlohmann::json& model = (*path)["model"];
  EXPECT_GT(model["batch_norm"].value("composite", 0), 0) << model.dump();
  EXPECT_FALSE(model["batch_norm"].contains("two_kernels_nhwc")) << model.dump();
  EXPECT_GT(model["convolution"].value("libtorch", 0), 0) << model.dump();
  EXPECT_GT(model["classifier"].value("libtorch", 0), 0) << model.dump();
  EXPECT_FALSE(path->contains("worker")) << path->dump();
}

// A ResNet18 step captured in a CUDA graph with its side streams (bf16,
// channels_last): the cell trains and its record says what the capture did,
// including whether memory used on two streams could be reused within it
// (step_timer.cc; with LibTorch 2.9 and later). Every step after the capture
// is a replay, the last ones of an epoch too (an eager step beside the graph
// would hold a second step's memory outside its pool): with four steps an
// epoch, two epochs, the capture's two warm-up steps and six replays. GPU only.
TEST(Trainer, ACapturedResNetStepSaysWhetherItsCaptureReusedCrossStreamMemory) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  CellSpec spec = SmallCell("resnet18", 32);
  spec.device = {"cuda", PluginFile("cuda").string(), {{"amp", "bf16"}, {"channels_last", true}, {"cuda_graph", true}}};
  spec.device.options = testing::WithDefaults(KeptPlugin(PluginFile("cuda")), spec.device.options);
  const auto [code, events] = RunInProcess(spec);
  ASSERT_EQ(code, 0);
  ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  const auto& path = std::get<protocol::Result>(events.back()).path_taken;
  ASSERT_TRUE(path.has_value() && path->contains("worker"));
  const nlohmann::json& worker = (*path)["worker"];
  EXPECT_EQ(worker.value("graphs_captured", 0), 1) << worker.dump();
  EXPECT_EQ(std::get<protocol::Result>(events.back()).steps, 8);
  EXPECT_EQ(worker.value("graph_replays", 0), 6) << worker.dump();
  ASSERT_TRUE(worker.contains("capture_reuses_cross_stream_memory")) << worker.dump();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
  EXPECT_TRUE(worker["capture_reuses_cross_stream_memory"].get<bool>()) << worker.dump();
#endif
  EXPECT_GT((*path)["model"]["side_streams"].value("filter_gradients_beside", 0), 0) << path->dump();
}

// SimpleCNN says which form each block's epilogue (bias + ReLU + max-pool)
// ran in: on the CPU LibTorch's composite, three blocks a forward.
TEST(Trainer, TheResultSaysWhichEpilogueSimpleCnnRan) {
  const auto [code, events] = RunInProcess(SmallCell("simple_cnn", 32));
  ASSERT_EQ(code, 0);
  ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  const auto& path = std::get<protocol::Result>(events.back()).path_taken;
  ASSERT_TRUE(path.has_value());
  ASSERT_TRUE(path->contains("model")) << path->dump();
  const nlohmann::json& epilogue = (*path)["model"]["epilogue"];
  EXPECT_GT(epilogue.value("composite", 0), 0) << path->dump();
  EXPECT_EQ(epilogue.value("composite", 0) % 3, 0) << path->dump();
  EXPECT_FALSE(epilogue.contains("fused_kernel")) << path->dump();
}

// The fixture model (tests/fixtures/faulty_model.cc) with one of its faults.
CellSpec FaultyCell(const std::string& fault, const std::string& fixture = "faulty_model") {
  CellSpec spec = SmallCell("simple_cnn", 32);
  const std::filesystem::path plugin = testing::TestPluginDir() / ("libtrainbench_" + fixture + ".so");
  spec.model = {fixture, plugin.string(), {{"fault", fault}}};
  spec.model.options = testing::WithDefaults(KeptPlugin(plugin), spec.model.options);
  return spec;
}

std::string ErrorOf(const std::vector<protocol::Event>& events) {
  for (const auto& e : events) EXPECT_FALSE(std::holds_alternative<protocol::Result>(e));
  if (events.empty() || !std::holds_alternative<protocol::Error>(events.back())) return "(no error event)";
  return std::get<protocol::Error>(events.back()).reason;
}

// A model's path out of the SDK's bounds (not JSON, not an object, too
// large, too deep, too wide, arrays or nulls inside; 30,000 nested arrays
// once made results.json 1.8 GB) fails the cell in one line naming the
// plugin; a refusal (bytes that are not UTF-8 included) is recorded as an
// error, never as a choice, and costs the cell nothing; an honest path is
// recorded as it is.
TEST(Trainer, AModelsPathOutOfBoundsFailsTheCellARefusalIsRecorded) {
  const std::pair<const char*, const char*> cases[] = {{"path_not_json", "gave no JSON object"},
                                                       {"path_array", "gave no JSON object"},
                                                       {"path_huge", "bytes (at most 64 KiB)"},
                                                       {"path_nested_arrays", "gave an array"},
                                                       {"path_deep", "objects nested deeper than 8"},
                                                       {"path_wide", "more than 4096 values"},
                                                       {"path_null", "gave a null"}};
  for (const auto& [fault, said] : cases) {
    const auto [code, events] = RunInProcess(FaultyCell(fault));
    EXPECT_NE(code, 0) << fault;
    const std::string error = ErrorOf(events);
    EXPECT_NE(error.find("model plugin 'faulty_model'"), std::string::npos) << fault << ": " << error;
    EXPECT_NE(error.find(said), std::string::npos) << fault << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << fault << ": " << error;
  }
  {
    const auto [code, events] = RunInProcess(FaultyCell("path_error"));
    ASSERT_EQ(code, 0);
    ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
    const auto& path = std::get<protocol::Result>(events.back()).path_taken;
    ASSERT_TRUE(path.has_value());
    EXPECT_FALSE(path->contains("model")) << path->dump();
    EXPECT_NE(path->value("model_error", "").find("failed: fixture: no path ?? on purpose"), std::string::npos)
        << path->dump();
  }
  const auto [code, events] = RunInProcess(FaultyCell("none"));
  ASSERT_EQ(code, 0);
  EXPECT_EQ(std::get<protocol::Result>(events.back()).path_taken.value_or(nullptr)["model"],
            nlohmann::json({{"layers", "linear"}}));
}

// The working copies a model may read its parameters through
// (sdk::Model::UseWorkingCopies): listing a tensor that is not one of its
// parameters, or one twice, or refusing the offer fails the cell with one
// error naming the model and what it did, and no result.
TEST(Trainer, AModelListingAForeignTensorForWorkingCopiesFailsItsCell) {
  const auto [code, events] = RunInProcess(FaultyCell("copies_foreign"));
  EXPECT_EQ(code, 1);
  const std::string reason = ErrorOf(events);
  EXPECT_NE(reason.find("model 'faulty_model' listed for working copies a tensor that is not one of its parameters"),
            std::string::npos)
      << reason;
}

TEST(Trainer, AModelListingOneParameterTwiceFailsItsCell) {
  const auto [code, events] = RunInProcess(FaultyCell("copies_twice"));
  EXPECT_EQ(code, 1);
  const std::string reason = ErrorOf(events);
  EXPECT_NE(reason.find("model 'faulty_model' listed for working copies a tensor that is listed twice"),
            std::string::npos)
      << reason;
}

TEST(Trainer, AModelRefusingTheOfferFailsItsCellWithItsReason) {
  const auto [code, events] = RunInProcess(FaultyCell("copies_error"));
  EXPECT_EQ(code, 1);
  const std::string reason = ErrorOf(events);
  EXPECT_NE(reason.find("model 'faulty_model'"), std::string::npos) << reason;
  EXPECT_NE(reason.find("fixture: no working copies, on purpose"), std::string::npos) << reason;
}

// A model reading its parameters through the working copies trains with
// every optimizer, and the result says so; on the CPU (no bf16 autocast, no
// CUDA) the copies are the parameters and the optimizer updates them: the
// same losses as the same model reading its parameters itself.
TEST(Trainer, AModelReadingWorkingCopiesTrainsAndTheResultSaysSo) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    CellSpec plain = FaultyCell("none");
    plain.training.optimizer.name = optimizer;
    const auto [plain_code, plain_events] = RunInProcess(plain);
    ASSERT_EQ(plain_code, 0) << optimizer;
    const auto& expected = std::get<protocol::Result>(plain_events.back());
    CellSpec spec = FaultyCell("copies");
    spec.training.optimizer.name = optimizer;
    const auto [code, events] = RunInProcess(spec);
    ASSERT_EQ(code, 0) << optimizer;
    ASSERT_TRUE(std::holds_alternative<protocol::Result>(events.back())) << optimizer;
    const auto& result = std::get<protocol::Result>(events.back());
    ASSERT_TRUE(result.path_taken.has_value()) << optimizer;
    EXPECT_EQ((*result.path_taken)["worker"]["working_copies"],
              nlohmann::json({{"parameters", 2}, {"groups", 1}, {"updates", "optimizer"}}))
        << optimizer << ": " << result.path_taken->dump();
    ASSERT_EQ(result.train_loss.size(), 2u) << optimizer;
    EXPECT_EQ(result.train_loss, expected.train_loss) << optimizer;
    EXPECT_NE(result.train_loss[1], result.train_loss[0]) << optimizer << ": the parameters were updated";
  }
}

// SDK 1.3's offer of SGD updates is no longer made: a model that would take
// one and refuse every learning rate trains (the host updates everything).
TEST(Trainer, NoHostOffersSdk13sSgdUpdatesAnyMore) {
  const auto [code, events] = RunInProcess(FaultyCell("sgd_taken", "sdk13_model"));
  EXPECT_EQ(code, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
}

// A kernel trace (trainbench run --kernel-trace, a diagnostic) never costs a
// cell its result: the trace is written where LibTorch has Kineto, and where
// it has not (Debian's LibTorch) the cell trains on without it.
TEST(KernelTrace, ACellTracedStillEndsInItsResult) {
  char folder[] = "/tmp/trainbench-trace.XXXXXX";
  ASSERT_NE(::mkdtemp(folder), nullptr);
  CellSpec spec = SmallCell("simple_cnn", 32);
  // Five steps asked, three timed steps left in the first epoch: its end
  // stops the recording (two steps written).
  spec.diagnostics = protocol::Diagnostics{5, false, folder};
  const auto [code, events] = RunInProcess(spec);
  EXPECT_EQ(code, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(std::holds_alternative<protocol::Result>(events.back()));
  const std::string file = std::string(folder) + "/kernel-trace-cell" + std::to_string(spec.cell_index) + ".json";
  if (::access(file.c_str(), F_OK) == 0) {
    EXPECT_EQ(::unlink(file.c_str()), 0);
  }
  EXPECT_EQ(::rmdir(folder), 0) << "the trace wrote something other than " << file;
}

TEST(KernelTrace, AStepCountOutOfRangeFailsTheCellSayingSo) {
  for (const int64_t bad : {int64_t{-3}, int64_t{100001}}) {
    CellSpec spec = SmallCell("simple_cnn", 32);
    spec.diagnostics = protocol::Diagnostics{bad, false, "/tmp/trainbench-trace-unused"};
    const auto [code, events] = RunInProcess(spec);
    if (bad < 0) {  // no trace asked
      EXPECT_EQ(code, 0);
      continue;
    }
    EXPECT_EQ(code, 1) << bad;
    ASSERT_FALSE(events.empty()) << bad;
    ASSERT_TRUE(std::holds_alternative<protocol::Error>(events.back())) << bad;
    EXPECT_NE(std::get<protocol::Error>(events.back()).reason.find("kernel trace: 100001 steps"), std::string::npos)
        << std::get<protocol::Error>(events.back()).reason;
  }
}

}  // namespace
}  // namespace trainbench::worker

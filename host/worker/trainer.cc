#include "trainer.h"

#include <cstdio>
#include <set>

#include "cell_run.h"
#include "out_of_memory.h"
#include "path_taken.h"

namespace trainbench::worker {
namespace cell {
namespace {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Converts 4-D parameters to NHWC in place. Always restrided, as PyTorch's
// Module.to(memory_format=...) does: a 1x1 convolution's NCHW weight also
// passes as channels_last-contiguous (size-1 dimensions are not checked), so
// .contiguous(ChannelsLast) would keep its NCHW strides, unlike PyTorch's.
// (Suspected, wrongly, of the weight-gradient transposes in trainbench's
// ResNet18 graph: docs/results/raw/gpu-optimisation-notes.md, change 8.)
void ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() != 4) continue;
    torch::Tensor nhwc = torch::empty_like(p.data(), torch::MemoryFormat::ChannelsLast);
    nhwc.copy_(p.data());
    p.set_data(nhwc);
  }
}

}  // namespace

// Once the device is up, a failure for want of its memory ends the cell in
// one line (the allocator's own paragraph goes to the cell's log).
int CellRun::Run() {
  try {
    return RunOnDevice();
  } catch (const std::exception& e) {
    if (device_ == nullptr || !IsOutOfMemory(e)) throw;
    std::fprintf(stderr, "error: %s\n", e.what());
    throw CellError(OutOfMemoryLine(Memory(), {s_.training.batch_size, s_.device.name}));
  }
}

int CellRun::RunOnDevice() {
  LoadedPlugin model_plugin = LoadPlugin(s_.model.path);
  LoadedPlugin device_plugin = LoadPlugin(s_.device.path);
  if (!SetUpDevice(device_plugin)) return 0;
  SetUpModel(model_plugin);
  const int64_t steps_per_epoch = Started(model_plugin, device_plugin);
  device_->ResetPeakMemory();
  Train(steps_per_epoch);
  sink_.Emit(Result(steps_per_epoch, model_plugin));
  return 0;
}

// The device, set up; the ranks connected for a data-parallel cell. False
// (the cell skipped) where the device is unavailable.
bool CellRun::SetUpDevice(const LoadedPlugin& device_plugin) {
  device_ = CreateDevice(device_plugin, s_.device.options);
  device_abi_minor_ = device_plugin.descriptor->abi_minor;
  std::string why_not;
  if (!device_->Available(&why_not)) {
    sink_.Emit(protocol::Skipped{"device '" + s_.device.name + "' unavailable: " + why_not});
    return false;
  }
  Check(device_->Setup(), "device setup");
  settings_ = device_->Settings();
  torch::manual_seed(s_.seed);
  if (s_.distributed && s_.distributed->world_size > 1) {
    if (s_.training.batch_size % s_.distributed->world_size != 0) {
      throw CellError("batch_size " + std::to_string(s_.training.batch_size) + " does not split evenly over " +
                      std::to_string(s_.distributed->world_size) + " ranks");
    }
    if (settings_.cuda_graph) {
      throw CellError("cuda_graph is not supported for data-parallel cells yet: set it false for several GPUs");
    }
    collective_ = ConnectCollective(*s_.distributed, settings_.device);
    world_ = collective_->world_size();
    rank_ = collective_->rank();
  }
  local_batch_ = s_.training.batch_size / world_;
  return true;
}

// The model on the device with the data, every rank from rank 0's weights
// (as DistributedDataParallel starts), and the optimizer.
void CellRun::SetUpModel(const LoadedPlugin& model_plugin) {
  model_ = CreateModel(model_plugin, s_.model.options);
  CheckModelFitsTheData();
  Check(model_->TrainingFlopsPerSample(&flops_), "model '" + s_.model.name + "'");
  params_ = model_->ParameterCount();
  LoadData();
  torch::nn::Module& module = model_->module();
  module.to(settings_.device);
  if (settings_.channels_last) ToChannelsLast(module);
  if (collective_) {
    torch::NoGradGuard no_grad;
    collective_->Broadcast(module.parameters());
    collective_->Broadcast(module.buffers());
  }
  if (collective_ && s_.distributed->sync_batchnorm) {
    if (model_plugin.descriptor->abi_minor < 1) {
      throw CellError("sync_batchnorm: model plugin '" + s_.model.name + "' was built against SDK ABI 1." +
                      std::to_string(model_plugin.descriptor->abi_minor) +
                      ", which cannot synchronise batch normalisation; rebuild it against SDK 1.1 or newer");
    }
    cross_rank_sum_ = std::make_unique<CollectiveSum>(*collective_);
    Check(model_->SyncBatchNorm(cross_rank_sum_.get()), "sync_batchnorm: model '" + s_.model.name + "'");
  }
  optimizer_ = MakeOptimizer(s_.training.optimizer, module.parameters());
  OfferWorkingCopies(model_plugin);
}

// Says "started" with what the cell is (its model, hardware, data and
// ranks) and opens the energy meter; returns the steps of an epoch.
int64_t CellRun::Started(const LoadedPlugin& model_plugin, const LoadedPlugin& device_plugin) {
  const int64_t steps_per_epoch = train_->size() / s_.training.batch_size;
  if (steps_per_epoch < 1) {
    throw CellError("batch_size " + std::to_string(s_.training.batch_size) + " is larger than the " +
                    std::to_string(train_->size()) + " training samples");
  }
  json hardware = json::parse(device_->DescribeJson(), nullptr, false);
  protocol::Started started;
  started.params = params_;
  started.flops_per_sample = flops_;
  started.hardware = hardware;
  started.steps_per_epoch = steps_per_epoch;
  started.train_size = train_->size();
  started.test_size = test_->size();
  started.ranks = world_;
  started.rank = rank_;
  started.plugins = {{{"name", s_.model.name}, {"version", model_plugin.descriptor->version}},
                     {{"name", s_.device.name}, {"version", device_plugin.descriptor->version}}};
  sink_.Emit(started);
  energy_ = std::make_unique<EpochEnergy>(OpenEnergyMeter(hardware));
  if (collective_ && energy_->measuring() && energy_->source() != "nvml" && rank_ != 0) {
    // A package counter (RAPL) covers every rank on the machine: rank 0
    // reads it for the cell. Each rank reads its own GPU (NVML); the host
    // adds them up.
    energy_->Drop("rank " + std::to_string(rank_) + ": the machine's package counter is read by rank 0");
  }
  return steps_per_epoch;
}

// The cell's figures once it trained: throughput from the timed steps, the
// epochs not trained projected from it, energy, the target, memory and the
// path the model and the worker took.
protocol::Result CellRun::Result(int64_t steps_per_epoch, const LoadedPlugin& model_plugin) {
  const double sps = steady_seconds_ > 0 ? static_cast<double>(steady_samples_) / steady_seconds_ : 0.0;
  if (sps <= 0) throw CellError("no steady-state steps were timed: raise max_steps (or epochs) above warmup_steps");
  protocol::Result result;
  result.params = params_;
  result.flops_per_sample = flops_;
  result.samples_per_second = sps;
  result.achieved_tflops = sps * static_cast<double>(flops_) / 1e12;
  result.step_seconds_median = Quantile(step_seconds_, 0.5);
  result.step_seconds_p90 = Quantile(step_seconds_, 0.9);
  result.steps = steps_done_;
  result.steady_steps = static_cast<int64_t>(step_seconds_.size());
  SetEpochTimes(result, steps_per_epoch, sps);
  result.setup_seconds = setup_seconds_;
  result.warmup_seconds = warmup_seconds_;
  result.eval_seconds = eval_seconds_;
  result.evaluations = evaluations_;
  result.accuracy_curve = accuracy_curve_;
  // Over the same epochs' training time (evaluation excluded).
  energy_->Fill(result, trained_seconds_, steps_done_ * s_.training.batch_size);
  SetTarget(result);
  result.train_loss = train_loss_;
  result.test_accuracy = test_accuracy_;
  const sdk::MemoryFigures memory = Memory();
  result.peak_memory_bytes = memory.peak_reserved;
  if (memory.peak_allocated >= 0) result.peak_allocated_bytes = memory.peak_allocated;
  result.ranks = world_;
  result.rank = rank_;
  result.backend = collective_ ? collective_->backend() : std::string();
  result.hardware = json::parse(device_->DescribeJson(), nullptr, false);
  if (collective_) result.sync_batchnorm = cross_rank_sum_ != nullptr;
  try {
    result.path_taken = PathTaken(*model_, model_plugin.descriptor->abi_minor, graphed_.get(), copies_.get());
  } catch (const PathRefused& e) {
    throw std::runtime_error("model plugin '" + s_.model.name + "': " + e.what() +
                             "; a path is a JSON object of names to numbers, strings, booleans or objects "
                             "(trainbench/sdk/model.h): the cell's record is not kept");
  }
  return result;
}

// The epochs' times: those trained, and the unfinished ones at what
// steady-state throughput says they would take (a cell stopped at its
// target trained what it needed: nothing to project).
void CellRun::SetEpochTimes(protocol::Result& result, int64_t steps_per_epoch, double sps) const {
  std::vector<double> epoch_seconds = measured_epoch_seconds_;
  const bool projected =
      !stopped_at_target_ && static_cast<int64_t>(measured_epoch_seconds_.size()) < s_.training.epochs;
  if (projected) {
    const double projected_epoch = static_cast<double>(steps_per_epoch * s_.training.batch_size) / sps;
    epoch_seconds.resize(static_cast<size_t>(s_.training.epochs), projected_epoch);
  }
  double total = 0;
  for (double e : epoch_seconds) total += e;
  result.epoch_seconds = epoch_seconds;
  result.measured_epochs = static_cast<int64_t>(measured_epoch_seconds_.size());
  result.train_seconds = total;
  result.projected = projected;
}

// The time to the target accuracy, or why it was not reached.
void CellRun::SetTarget(protocol::Result& result) const {
  const auto target = s_.measurement.target_accuracy;
  if (!target) return;
  result.time_to_target_seconds = time_to_target_;
  result.epochs_to_target = epochs_to_target_;
  if (!time_to_target_) {
    char why[160];
    std::snprintf(why, sizeof(why), "not reached: the best test accuracy was %.4f (target %.4f) in %lld step(s)",
                  best_accuracy_, *target, static_cast<long long>(steps_done_));
    result.target_reason = why;
  }
  result.stopped_at_target = stopped_at_target_;
}

// The device's memory figures (SDK 1.6), or what older plugins tell: the
// peak of what the process held.
sdk::MemoryFigures CellRun::Memory() {
  sdk::MemoryFigures memory;
  if (device_abi_minor_ >= 6) memory = device_->Memory();
  if (memory.peak_reserved < 0) memory.peak_reserved = device_->PeakMemoryBytes();
  return memory;
}

// The images the model takes and the classes it tells apart are the
// dataset's (a plugin whose options do not follow the dataset says so here).
void CellRun::CheckModelFitsTheData() const {
  const auto shape = model_->InputShape();
  const int64_t size = s_.dataset.ImageSize();
  if (shape[0] != 3 || shape[1] != size || shape[2] != size) {
    throw CellError("model '" + s_.model.name + "' takes " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) +
                    "x" + std::to_string(shape[2]) + " inputs, but the dataset's images are 3x" + std::to_string(size) +
                    "x" + std::to_string(size) + " (dataset.image_size); use a model for that size");
  }
  if (model_->NumClasses() < s_.dataset.NumClasses()) {
    throw CellError("model '" + s_.model.name + "' tells " + std::to_string(model_->NumClasses()) +
                    " classes apart, but the dataset has " + std::to_string(s_.dataset.NumClasses()) +
                    " (dataset.num_classes); set the model's num_classes");
  }
}

void CellRun::LoadData() {
  data::ImageSet train, test;
  if (s_.dataset.kind == "synthetic") {
    train = SyntheticImageSet(s_.dataset.train_size.value_or(50000), s_.seed, s_.dataset.ImageSize(),
                              s_.dataset.NumClasses());
    test = SyntheticImageSet(s_.dataset.test_size.value_or(10000), s_.seed + 1, s_.dataset.ImageSize(),
                             s_.dataset.NumClasses());
  } else {
    train = data::LoadSplit(s_.dataset.path, data::Split::kTrain, s_.dataset.train_size);
    test = data::LoadSplit(s_.dataset.path, data::Split::kTest, s_.dataset.test_size);
  }
  train_ = std::make_unique<DeviceDataset>(train, settings_.device, settings_.channels_last);
  test_ = std::make_unique<DeviceDataset>(test, settings_.device, settings_.channels_last);
}

// Offers the model working copies of its parameters (sdk::WorkingCopies,
// plugins of SDK 1.5+), and the optimizer their updates inside the
// backward (mixed-precision SGD, mixed_precision.h; it takes them where it
// is SGD with `overlap` and every listed parameter is a dense fp32 tensor
// on the one CUDA device). Offered only where the cell has one rank (no
// gradients to average first) and the forward runs under bf16 autocast
// (fp16's loss scaling unscales gradients first; without autocast there is
// no cast to save); elsewhere the copies cast (one kernel per group each
// way) and the optimizer's Step() updates every parameter. What the model
// lists is checked: parameters of its module, each once.
void CellRun::OfferWorkingCopies(const LoadedPlugin& plugin) {
  if (plugin.descriptor->abi_minor < 5) return;
  const std::vector<torch::Tensor> params = model_->module().parameters();
  copies_ = std::make_unique<MixedPrecision>();
  std::vector<std::vector<torch::Tensor>> groups;
  const std::string who = "model '" + s_.model.name + "'";
  Check(model_->UseWorkingCopies(copies_.get(), &groups), who);
  std::set<const void*> listed;
  for (const auto& group : groups) {
    for (const torch::Tensor& t : group) {
      const void* impl = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
      const bool ours = std::any_of(params.begin(), params.end(),
                                    [&](const torch::Tensor& p) { return p.unsafeGetTensorImpl() == impl; });
      if (!ours || !listed.insert(impl).second) {
        throw CellError(who + " listed for working copies a tensor that is " +
                        (ours ? "listed twice" : "not one of its parameters") +
                        ": a fault of the plugin; rebuild it, or run another model");
      }
    }
  }
  copies_->Adopt(std::move(groups));
  if (!collective_ && settings_.amp == sdk::Amp::kBf16) optimizer_->UpdateInBackward(*copies_);
}

// A diagnostic's file name without its extension: NAME-cellN in the
// run's diagnostics folder (a data-parallel rank after the first adds
// -rankR).
std::string CellRun::DiagnosticPath(const protocol::Diagnostics& d, const std::string& name) const {
  std::string path = d.folder + "/" + name + "-cell" + std::to_string(s_.cell_index);
  if (rank_ > 0) path += "-rank" + std::to_string(rank_);
  return path;
}

}  // namespace cell

using cell::CellRun;
using cell::Interrupted;
using cell::NonFiniteLoss;

int RunCell(const CellSpec& spec, EventSink& sink, std::chrono::steady_clock::time_point started) {
  try {
    CellRun run(spec, sink, started);
    return run.Run();
  } catch (const Interrupted& e) {
    sink.Emit(protocol::Interrupted{e.what()});
    return 0;
  } catch (const NonFiniteLoss& e) {
    sink.Emit(protocol::Error{e.what(), true});
    return 1;
  } catch (const std::exception& e) {
    // LibTorch's messages run over many lines (hints, C++ stack): the first
    // is the reason; all of it goes to the cell's log.
    const std::string message = e.what();
    std::fprintf(stderr, "error: %s\n", message.c_str());
    sink.Emit(protocol::Error{message.substr(0, message.find('\n')), false});
    return 1;
  }
}

}  // namespace trainbench::worker

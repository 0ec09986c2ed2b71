#pragma once
// What the supervising host asks a worker to run: one model on one device,
// with the dataset, training and measurement settings of the experiment.
// The supervisor's experiment holds the same setting structs (one declaration
// of each default, shared by both processes); the spec travels as JSON on the
// worker's stdin (docs/architecture.md, "Worker protocol").

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace trainbench::protocol {

/// `dataset:` of an experiment.
struct DatasetSettings {
  std::string kind = "cifar10";  ///< "cifar10" or "synthetic"
  std::string path;              ///< folder with the binary files (cifar10)
  std::optional<int64_t> train_size, test_size;
  /// synthetic: the images' height and width (default 32, CIFAR's) and the
  /// classes of their labels (default 10).
  std::optional<int64_t> image_size, num_classes;
  int64_t ImageSize() const { return image_size.value_or(32); }
  int64_t NumClasses() const { return num_classes.value_or(10); }
};

/// `training.optimizer:`.
struct OptimizerSettings {
  std::string name = "sgd";  ///< "sgd", "adam" or "adamw"
  double lr = 0.01, momentum = 0.9, weight_decay = 5e-4;
  std::array<double, 2> betas = {0.9, 0.999};  ///< adam, adamw: the moments' decay rates
  double eps = 1e-8;                           ///< adam, adamw: added to the second moment's root
  bool nesterov = false;
  /// SGD on one CUDA GPU inside a captured step: each parameter updated as
  /// soon as its gradient is final, beside the rest of the backward.
  bool overlap = true;
};

/// `training.schedule:`.
struct ScheduleSettings {
  std::string name = "none";  ///< "none", "step", "cosine"
  int64_t step_size = 1;
  double gamma = 0.1;
};

/// `training:`.
struct TrainingSettings {
  int64_t epochs = 1;
  int64_t batch_size = 128;
  bool augment = true;
  OptimizerSettings optimizer;
  ScheduleSettings schedule;
};

/// The part of `measurement:` a worker applies (the rest, such as repeats
/// and the stall timeout, is the supervisor's).
struct StepMeasurement {
  int64_t warmup_steps = 5;
  std::optional<int64_t> max_steps;
  std::optional<double> time_budget_seconds;
  double progress_interval_seconds = 1.0;
  int64_t eval_batch_size = 500;
  std::optional<double> target_accuracy;    ///< time to this test accuracy (0-1) is recorded
  std::optional<int64_t> eval_every_steps;  ///< evaluate this often too (default: each epoch's end)
  bool stop_at_target = false;              ///< end the cell once target_accuracy is reached
};

/// A plugin to load: its name, file and options (validated against its
/// schema, every key present).
struct PluginRef {
  std::string name;
  std::string path;
  nlohmann::json options = nlohmann::json::object();
};

/// This worker is one rank of a data-parallel cell.
struct DistributedSpec {
  int rank = 0;
  int world_size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  double timeout_seconds = 600;
  /// Batch normalisation over the combined batch (sdk::BatchNorm2d layers).
  bool sync_batchnorm = false;
};

/// Diagnostics a run asks of its cells (`trainbench run --kernel-trace`,
/// `--graph-dump`): files beside the results. A traced step runs a little
/// slower, so the cell's configuration records them (the folder aside).
struct Diagnostics {
  int64_t kernel_trace_steps = 0;  ///< timed steps recorded by LibTorch's profiler (0: none)
  bool graph_dump = false;         ///< the captured step (cuda_graph) written as Graphviz
  std::string folder;              ///< where the files go: kernel-trace-cellN.json, graph-cellN-K.dot
};

/// One cell, as one worker runs it.
struct CellSpec {
  int protocol = 0;  ///< kProtocolVersion of the sender
  std::string experiment;
  int64_t cell_index = 0;
  uint64_t seed = 0;
  PluginRef model, device;
  DatasetSettings dataset;
  TrainingSettings training;
  StepMeasurement measurement;
  std::optional<DistributedSpec> distributed;
  std::optional<Diagnostics> diagnostics;
};

/// JSON of each part, as recorded in results.json (`experiment` and each
/// cell's `config`). Readers are strict: a missing or unknown field throws
/// ProtocolError naming it.
nlohmann::json ToJson(const DatasetSettings& d);
nlohmann::json ToJson(const TrainingSettings& t);
nlohmann::json ToJson(const StepMeasurement& m);
nlohmann::json ToJson(const CellSpec& spec);

/// Parses a spec. Throws ProtocolError (one line, naming the field) on a
/// missing or unknown field, a wrong type, or another protocol version
/// (naming both versions).
CellSpec CellSpecFromJson(const nlohmann::json& j);

}  // namespace trainbench::protocol

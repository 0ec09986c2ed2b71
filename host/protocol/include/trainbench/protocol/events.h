#pragma once
// What a worker tells the supervising host, one message per event, on the
// worker's event channel (channel.h). The first message of every worker is
// Hello, carrying the protocol version.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace trainbench::protocol {

/// First message of every worker.
struct Hello {
  int protocol = 0;
  std::string worker_version;
};

/// The model is built and the data is on the device.
struct Started {
  int64_t params = 0;
  int64_t flops_per_sample = 0;
  nlohmann::json hardware;  ///< the device plugin's DescribeJson()
  int64_t steps_per_epoch = 0;
  int64_t train_size = 0, test_size = 0;
  int ranks = 1, rank = 0;
  nlohmann::json plugins;  ///< [{name, version}] of the model and device
};

/// At least every measurement.progress_interval_seconds while training.
struct Progress {
  int64_t epoch = 0, step = 0, steps_per_epoch = 0, steps_done = 0, samples_done = 0;
  double loss = 0;
  double samples_per_second = 0;     ///< since the last report; 0 in the warm-up
  std::vector<double> step_seconds;  ///< timed steps since the last report (a sample)
  int64_t memory_bytes = 0;
  /// The highest so far of memory_bytes (the allocator's reserve on a GPU)
  /// and, where the device tells it (SDK 1.6), of what live tensors held.
  std::optional<int64_t> peak_memory_bytes, peak_allocated_bytes;
  double elapsed_seconds = 0;
};

/// An epoch ended (its evaluation included).
struct Epoch {
  int64_t epoch = 0;
  bool complete = true;  ///< false: the budget ended it early
  double seconds = 0;
  int64_t steps = 0;
  double train_loss = 0;
  double test_accuracy = 0;
};

/// The cell finished: its measurements. Counts only when the worker then
/// exits with status 0.
struct Result {
  int64_t params = 0;
  int64_t flops_per_sample = 0;
  double samples_per_second = 0;
  double achieved_tflops = 0;
  double step_seconds_median = 0, step_seconds_p90 = 0;
  int64_t steps = 0, steady_steps = 0;
  std::vector<double> epoch_seconds;  ///< measured, then projected ones
  int64_t measured_epochs = 0;
  double train_seconds = 0;                       ///< the epochs' training time, measured and projected
  std::vector<double> train_loss, test_accuracy;  ///< per epoch
  /// Where the time went: the worker's start to the first step (plugins,
  /// data to the device, the model), the untimed steps before the first
  /// timed one (autotuning, graph capture), and the evaluations.
  double setup_seconds = 0, warmup_seconds = 0, eval_seconds = 0;
  int64_t evaluations = 0;  ///< evaluations made (eval_seconds is their sum)
  /// Every evaluation: [training seconds so far (evaluation excluded),
  /// epochs so far, test accuracy]: the accuracy-against-time curve.
  std::vector<std::vector<double>> accuracy_curve;
  /// measurement.target_accuracy: when it was first reached, or why not.
  std::optional<double> time_to_target_seconds, epochs_to_target;
  std::optional<std::string> target_reason;
  bool stopped_at_target = false;
  /// Energy of the training epochs (warm-up included, evaluation excluded)
  /// from the device's counter (energy_source: "nvml", "rapl"), per epoch
  /// too; or none, with energy_reason saying why.
  std::optional<double> energy_joules, joules_per_sample, average_power_watts;
  std::vector<double> epoch_energy_joules;
  std::optional<std::string> energy_source, energy_reason;
  /// Backward steps of the energy counter too small to be a wrap (a
  /// firmware glitch), counted as no energy rather than as a whole range.
  std::optional<int64_t> energy_counter_glitches;
  bool projected = false;
  int64_t peak_memory_bytes = 0;
  /// Beside peak_memory_bytes (what the process held: a GPU allocator's
  /// cache included), the most live tensors held, where the device tells it.
  std::optional<int64_t> peak_allocated_bytes;
  int ranks = 1, rank = 0;
  std::string backend;  ///< "nccl"/"gloo" for data-parallel cells, else ""
  /// What the model's rules (SDK 1.4's Model::PathTaken, under "model", or
  /// "model_error" where it gave no JSON object) and the worker's chose for
  /// the steps run ("worker": graphs captured, memsets rewritten).
  std::optional<nlohmann::json> path_taken;
  nlohmann::json hardware;
  std::optional<bool> sync_batchnorm;  ///< data-parallel cells only
};

/// The device is not available here.
struct Skipped {
  std::string reason;
};

/// The cell failed.
struct Error {
  std::string reason;
  bool loss_nan = false;
};

/// A stop request reached the worker; it stopped at the next step.
struct Interrupted {
  std::string reason;
};

/// `describe`: one plugin file.
struct PluginDescribed {
  std::string path;
  bool loaded = false;
  std::string reason;             ///< why rejected
  nlohmann::json descriptor;      ///< when loaded
  std::optional<bool> available;  ///< device plugins
  std::string unavailable_reason;
};

/// `info`: the worker's build.
struct Info {
  std::string torch_version, compiler, cxx_abi, cuda_version;
  std::vector<std::string> distributed_backends;
};

using Event = std::variant<Hello, Started, Progress, Epoch, Result, Skipped, Error, Interrupted, PluginDescribed, Info>;

/// The event's name on the wire ("hello", "started", "progress", ...).
std::string EventName(const Event& event);

/// As JSON with its name in "event"; also the form RunEvent::data shows
/// embedders.
nlohmann::json ToJson(const Event& event);

/// Parses one message. Throws ProtocolError naming the event and the field
/// on a missing, unknown or mistyped field or an unknown event.
Event EventFromJson(const nlohmann::json& j);

/// The result's fields as they go into a results.json cell.
nlohmann::json ToJson(const Result& result);

/// The keys of a `result` event, set or not, in declaration order: the
/// cell record takes exactly these from it (CellRecord::Apply).
const std::vector<std::string>& ResultKeys();

}  // namespace trainbench::protocol

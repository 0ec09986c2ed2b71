#pragma once
// A cell as results.json records it: what results.json/csv, metrics,
// `report` and Slurm gather consume. The one place its keys are spelled is
// cell_record.cc.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/protocol/events.h"

namespace trainbench::protocol {

/// One cell of a run. Fields a cell has not reached (a skipped cell's
/// measurements) are unset and absent from its JSON.
struct CellRecord {
  // Which cell.
  std::optional<int64_t> index;
  std::string model, model_plugin, device, device_plugin;
  nlohmann::json model_options = nlohmann::json::object(), device_options = nlohmann::json::object();
  nlohmann::json plugins = nlohmann::json::array();  ///< [{name, kind, path, version, abi, fingerprint, sha256}]
  nlohmann::json config;  ///< the resolved configuration: what makes two cells the same work (--resume)
  /// pending, running, ok, failed, skipped, interrupted.
  std::string status = "pending";
  std::optional<std::string> reason;  ///< why, when not ok
  std::optional<bool> loss_nan, resumed;
  // From the worker's `started` and `result` events.
  std::optional<int64_t> params, flops_per_sample, train_size, test_size, steps_per_epoch;
  nlohmann::json hardware;
  std::optional<double> samples_per_second, achieved_tflops, step_seconds_median, step_seconds_p90, train_seconds;
  std::optional<double> setup_seconds, warmup_seconds, eval_seconds;
  std::optional<int64_t> evaluations;
  std::optional<std::vector<std::vector<double>>> accuracy_curve;  ///< [train seconds, epochs, accuracy] per evaluation
  /// measurement.target_accuracy: the training time (evaluation excluded)
  /// and the epochs until the test accuracy first reached it; unset with
  /// target_reason saying why when it was not.
  std::optional<double> target_accuracy, time_to_target_seconds, epochs_to_target;
  std::optional<std::string> target_reason;
  std::optional<bool> stopped_at_target;
  /// Energy of the training epochs (warm-up included, evaluation excluded),
  /// per sample and as average power, from energy_source ("nvml", "rapl");
  /// unset with energy_reason when nothing could be read (never estimated).
  std::optional<double> energy_joules, joules_per_sample, average_power_watts;
  std::optional<std::vector<double>> epoch_energy_joules;
  std::optional<std::string> energy_source, energy_reason;
  /// The counter's backward steps too small to be a wrap, ignored (set only
  /// when there were some).
  std::optional<int64_t> energy_counter_glitches;
  /// The baseline's joules per sample over this cell's.
  std::optional<double> energy_ratio;
  /// What the study measured: the cell's whole training, setup_seconds +
  /// train_seconds + evaluation (projected like the epochs when budgeted).
  std::optional<double> time_to_train_seconds;
  /// The worker's life as the host saw it, start to exit.
  std::optional<double> wall_seconds;
  std::optional<int64_t> steps, steady_steps, measured_epochs, peak_memory_bytes, peak_allocated_bytes;
  std::optional<std::vector<double>> epoch_seconds, train_loss, test_accuracy;
  std::optional<bool> projected, sync_batchnorm;
  /// What the model's and the worker's rules chose (Result::path_taken).
  std::optional<nlohmann::json> path_taken;
  std::optional<int64_t> ranks, rank;
  std::optional<std::string> backend;
  // Computed by the host.
  std::optional<double> speedup;  ///< steady-state samples/s over the baseline's (always written, null when none)
  /// The baseline's time_to_train_seconds over this cell's: the study's speedup.
  std::optional<double> speedup_time_to_train;
  /// Repeats (measurement.repeats > 1): their spread, and a 95% confidence
  /// interval of the mean rate (Student's t), carried into the speedup's.
  std::optional<double> samples_per_second_min, samples_per_second_max;
  std::optional<std::vector<double>> samples_per_second_ci95, speedup_ci95, time_to_train_seconds_repeats;
  /// Efficiency: the dense peak of this hardware and precision, where it
  /// comes from ("datasheet: NVIDIA H200 bf16", "measurement.peak_tflops"),
  /// and achieved_tflops over it.
  std::optional<double> peak_tflops, mfu;
  std::optional<std::string> peak_tflops_source;
  std::optional<double> scaling_efficiency;
  std::optional<std::string> scaling_baseline;
  std::optional<std::vector<double>> rank_samples_per_second, samples_per_second_repeats;
  nlohmann::json slurm;  ///< {job_id, array_task_id, job_gpus} under Slurm
  /// Keys this version does not know (a newer writer's), kept as they were.
  nlohmann::json extra = nlohmann::json::object();

  bool ok() const { return status == "ok"; }
  /// The measurements of a `result` event (and its identity fields).
  void Apply(const Result& result);
  /// What the `started` event says of the cell.
  void Apply(const Started& started);
  /// Forgets the measurements (of a worker that did not end cleanly).
  void DropMeasurements();
  /// The last epoch's test accuracy, when there is one.
  std::optional<double> final_accuracy() const;
  /// The median of epoch_seconds (the first epoch holds the warm-up), or 0.
  double median_epoch_seconds() const;
};

/// As results.json has it.
nlohmann::json ToJson(const CellRecord& cell);

/// From results.json, of this or an older version: absent keys stay unset,
/// unknown ones go to `extra`. Throws ProtocolError naming the field when one
/// has the wrong type.
CellRecord CellRecordFromJson(const nlohmann::json& j);

/// What makes a record unusable as a finished result (an ok cell without
/// its configuration or measurements), or "".
std::string CellRecordProblem(const CellRecord& cell);

/// The columns of results.csv, in order (keys of the record's JSON).
const std::vector<std::string>& CsvColumns();

}  // namespace trainbench::protocol

#include "trainbench/protocol/cell_record.h"

#include <algorithm>
#include <type_traits>

#include "is_optional.h"
#include "trainbench/protocol/error.h"

namespace trainbench::protocol {
using nlohmann::json;

namespace {

// What the cell is: its place, plugins, configuration and status.
template <class R, class V>
void CellFields(R& c, V& v) {
  v("index", c.index);
  v("model", c.model);
  v("model_plugin", c.model_plugin);
  v("device", c.device);
  v("device_plugin", c.device_plugin);
  v("model_options", c.model_options);
  v("device_options", c.device_options);
  v("plugins", c.plugins);
  v("config", c.config);
  v("status", c.status);
  v("reason", c.reason);
  v("loss_nan", c.loss_nan);
  v("resumed", c.resumed);
  v("params", c.params);
  v("flops_per_sample", c.flops_per_sample);
  v("train_size", c.train_size);
  v("test_size", c.test_size);
  v("steps_per_epoch", c.steps_per_epoch);
}

// What it ran on and how fast: hardware, rate, times.
template <class R, class V>
void RateFields(R& c, V& v) {
  v("hardware", c.hardware);
  v("samples_per_second", c.samples_per_second);
  v("achieved_tflops", c.achieved_tflops);
  v("step_seconds_median", c.step_seconds_median);
  v("step_seconds_p90", c.step_seconds_p90);
  v("train_seconds", c.train_seconds);
  v("setup_seconds", c.setup_seconds);
  v("warmup_seconds", c.warmup_seconds);
  v("eval_seconds", c.eval_seconds);
  v("evaluations", c.evaluations);
  v("accuracy_curve", c.accuracy_curve);
}

// What it reached: target, energy, totals, memory.
template <class R, class V>
void OutcomeFields(R& c, V& v) {
  v("target_accuracy", c.target_accuracy);
  v("time_to_target_seconds", c.time_to_target_seconds);
  v("epochs_to_target", c.epochs_to_target);
  v("target_reason", c.target_reason);
  v("stopped_at_target", c.stopped_at_target);
  v("energy_joules", c.energy_joules);
  v("joules_per_sample", c.joules_per_sample);
  v("average_power_watts", c.average_power_watts);
  v("epoch_energy_joules", c.epoch_energy_joules);
  v("energy_source", c.energy_source);
  v("energy_reason", c.energy_reason);
  v("energy_counter_glitches", c.energy_counter_glitches);
  v("energy_ratio", c.energy_ratio);
  v("time_to_train_seconds", c.time_to_train_seconds);
  v("wall_seconds", c.wall_seconds);
  v("steps", c.steps);
  v("steady_steps", c.steady_steps);
  v("measured_epochs", c.measured_epochs);
  v("peak_memory_bytes", c.peak_memory_bytes);
  v("peak_allocated_bytes", c.peak_allocated_bytes);
}

// Its curves and what the host adds: ranks, speedups, spreads, efficiency.
template <class R, class V>
void SummaryFields(R& c, V& v) {
  v("epoch_seconds", c.epoch_seconds);
  v("train_loss", c.train_loss);
  v("test_accuracy", c.test_accuracy);
  v("projected", c.projected);
  v("sync_batchnorm", c.sync_batchnorm);
  v("path_taken", c.path_taken);
  v("ranks", c.ranks);
  v("rank", c.rank);
  v("backend", c.backend);
  v("speedup", c.speedup);
  v("speedup_time_to_train", c.speedup_time_to_train);
  v("samples_per_second_min", c.samples_per_second_min);
  v("samples_per_second_max", c.samples_per_second_max);
  v("samples_per_second_ci95", c.samples_per_second_ci95);
  v("speedup_ci95", c.speedup_ci95);
  v("time_to_train_seconds_repeats", c.time_to_train_seconds_repeats);
  v("peak_tflops", c.peak_tflops);
  v("peak_tflops_source", c.peak_tflops_source);
  v("mfu", c.mfu);
  v("scaling_efficiency", c.scaling_efficiency);
  v("scaling_baseline", c.scaling_baseline);
  v("rank_samples_per_second", c.rank_samples_per_second);
  v("samples_per_second_repeats", c.samples_per_second_repeats);
  v("slurm", c.slurm);
}

// Every field of a record with its key, both ways.
template <class R, class V>
void Fields(R& c, V&& v) {
  CellFields(c, v);
  RateFields(c, v);
  OutcomeFields(c, v);
  SummaryFields(c, v);
}

struct RecordWriter {
  json& out;
  template <class T>
  void operator()(const char* key, const T& value) {
    if constexpr (IsOptional<T>::value) {
      if (value) out[key] = *value;
    } else if constexpr (std::is_same_v<T, json>) {
      if (!value.is_null()) out[key] = value;
    } else {
      out[key] = value;
    }
  }
};

struct RecordReader {
  const json& in;
  std::vector<std::string>& seen;
  template <class T>
  void operator()(const char* key, T& value) {
    auto it = in.find(key);
    if (it == in.end()) return;
    seen.emplace_back(key);
    if (it->is_null()) return;  // an unset optional (or null json)
    try {
      if constexpr (IsOptional<T>::value) {
        value = it->template get<typename T::value_type>();
      } else {
        value = it->template get<T>();
      }
    } catch (const json::exception&) {
      throw ProtocolError(std::string("cell record: field '") + key + "' has the wrong type (" + it->type_name() + ")");
    }
  }
};

}  // namespace

void CellRecord::Apply(const Result& r) {
  DropMeasurements();
  // Each key of the event into the record's field of the same key (a test
  // holds every result key to be a record key of the same type).
  const json event = ToJson(r);
  std::vector<std::string> seen;
  Fields(*this, RecordReader{event, seen});
  // Recorded when they say something: a target reached and stopped at, the
  // energy of each epoch when there is energy at all.
  if (!r.stopped_at_target) stopped_at_target.reset();
  if (!r.energy_joules) epoch_energy_joules.reset();
  // The whole training of the cell, as the study timed it: evaluation
  // projected over the epochs as the epochs themselves are.
  const double evals = r.evaluations > 0 ? static_cast<double>(r.evaluations) : 1.0;
  const double epochs = static_cast<double>(r.epoch_seconds.size());
  time_to_train_seconds = r.setup_seconds + r.train_seconds + r.eval_seconds / evals * std::max(epochs, evals);
  // All epochs projected at the steady rate (a budget within the first):
  // the warm-up they lack is added back, as measured.
  if (r.measured_epochs == 0) *time_to_train_seconds += r.warmup_seconds;
}

void CellRecord::Apply(const Started& s) {
  params = s.params;
  flops_per_sample = s.flops_per_sample;
  hardware = s.hardware;
  train_size = s.train_size;
  test_size = s.test_size;
  steps_per_epoch = s.steps_per_epoch;
}

void CellRecord::DropMeasurements() {
  // Every key of a result but what the `started` event says too (the
  // model's size and the hardware), and what the host derives from them.
  static const std::vector<std::string> dropped = [] {
    const std::vector<std::string> keep = {"params", "flops_per_sample", "hardware"};
    std::vector<std::string> keys;
    for (const auto& key : ResultKeys())
      if (std::find(keep.begin(), keep.end(), key) == keep.end()) keys.push_back(key);
    keys.emplace_back("time_to_train_seconds");
    return keys;
  }();
  Fields(*this, [&](const char* key, auto& value) {
    if (std::find(dropped.begin(), dropped.end(), key) == dropped.end()) return;
    using T = std::decay_t<decltype(value)>;
    if constexpr (IsOptional<T>::value) value.reset();
  });
}

std::optional<double> CellRecord::final_accuracy() const {
  if (!test_accuracy || test_accuracy->empty()) return std::nullopt;
  return test_accuracy->back();
}

double CellRecord::median_epoch_seconds() const {
  if (!epoch_seconds || epoch_seconds->empty()) return 0;
  std::vector<double> e = *epoch_seconds;
  std::sort(e.begin(), e.end());
  return e[e.size() / 2];
}

json ToJson(const CellRecord& cell) {
  json out = cell.extra.is_object() ? cell.extra : json::object();
  Fields(cell, RecordWriter{out});
  out["speedup"] = cell.speedup ? json(*cell.speedup) : json(nullptr);
  return out;
}

CellRecord CellRecordFromJson(const json& j) {
  if (!j.is_object()) throw ProtocolError("cell record: not a JSON object");
  CellRecord cell;
  std::vector<std::string> seen;
  Fields(cell, RecordReader{j, seen});
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(seen.begin(), seen.end(), it.key()) == seen.end()) cell.extra[it.key()] = it.value();
  }
  return cell;
}

std::string CellRecordProblem(const CellRecord& cell) {
  if (cell.model.empty() || cell.device.empty()) return "a cell without its model or device";
  if (!cell.ok()) return "";
  const std::string who = "cell " + cell.model + " on " + cell.device;
  if (!cell.config.is_object()) return who + ": no 'config'";
  if (!cell.samples_per_second || !(*cell.samples_per_second > 0))
    return who + ": 'samples_per_second' missing or not a positive number";
  if (!cell.epoch_seconds) return who + ": 'epoch_seconds' missing or not a list";
  if (cell.epoch_seconds->empty()) return who + ": 'epoch_seconds' is empty";
  if (!cell.test_accuracy) return who + ": 'test_accuracy' missing or not a list";
  if (!cell.train_loss) return who + ": 'train_loss' missing or not a list";
  return "";
}

const std::vector<std::string>& CsvColumns() {
  static const std::vector<std::string> kColumns = {"model",
                                                    "device",
                                                    "status",
                                                    "reason",
                                                    "params",
                                                    "flops_per_sample",
                                                    "samples_per_second",
                                                    "step_seconds_median",
                                                    "step_seconds_p90",
                                                    "epoch_seconds",
                                                    "train_seconds",
                                                    "train_loss",
                                                    "test_accuracy",
                                                    "projected",
                                                    "speedup",
                                                    "peak_memory_bytes",
                                                    "peak_allocated_bytes",
                                                    "ranks",
                                                    "rank_samples_per_second",
                                                    "scaling_efficiency",
                                                    "setup_seconds",
                                                    "warmup_seconds",
                                                    "eval_seconds",
                                                    "time_to_train_seconds",
                                                    "wall_seconds",
                                                    "speedup_time_to_train",
                                                    "samples_per_second_ci95",
                                                    "speedup_ci95",
                                                    "peak_tflops",
                                                    "mfu"};
  return kColumns;
}

}  // namespace trainbench::protocol

#pragma once
// What the host asks a worker to run: one model on one device, as sent on the
// worker's stdin (JSON; built by the host's runner, see docs/architecture.md).

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "distributed.h"

namespace trainbench::worker {

struct PluginRef {
  std::string name;
  std::string path;
  nlohmann::json options;  // validated, every schema key present
};

struct CellSpec {
  std::string experiment;
  int64_t cell_index = 0;
  uint64_t seed = 0;
  PluginRef model, device;
  // dataset
  std::string dataset_kind;  // "cifar10" or "synthetic"
  std::string dataset_path;
  std::optional<int64_t> train_size, test_size;
  // training
  int64_t epochs = 1;
  int64_t batch_size = 128;
  std::string optimizer = "sgd";  // "sgd" or "adam"
  double lr = 0.01, momentum = 0.9, weight_decay = 0.0;
  bool nesterov = false;
  std::string schedule = "none";  // "none", "step", "cosine"
  int64_t step_size = 1;
  double gamma = 0.1;
  bool augment = true;
  // measurement
  int64_t warmup_steps = 5;
  std::optional<int64_t> max_steps;
  std::optional<double> time_budget_seconds;
  double progress_interval_seconds = 1.0;
  int64_t eval_batch_size = 500;
  // data parallelism: this process is one rank of several (absent: alone)
  std::optional<DistributedSpec> distributed;

  /// Parses the host's JSON; throws nlohmann::json::exception on a bad field.
  static CellSpec FromJson(const nlohmann::json& j);
};

}  // namespace trainbench::worker

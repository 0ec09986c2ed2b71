#pragma once
// An experiment as described in YAML: models x devices, training settings and
// measurement rules. Plain data, no LibTorch.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/protocol/cell_spec.h"

namespace trainbench {

/// One `models:` or `devices:` entry.
struct PluginUse {
  std::string plugin;          ///< plugin name
  std::string label;           ///< name of this entry in results (default: plugin)
  YAML::Node plugin_node;      ///< the entry naming the plugin, for error positions
  YAML::Node options_node;     ///< as written, for error positions
  nlohmann::json options;      ///< validated, defaults filled (after ResolvePlugins)
  std::string path;            ///< plugin file (after ResolvePlugins); empty: missing
  nlohmann::json record;       ///< name, kind, path, version, abi, sha256 (for results)
  std::string missing_reason;  ///< why a known optional plugin is absent
  // Device entries only: per-cell budget overriding `measurement`.
  std::optional<int64_t> max_steps;
  std::optional<double> time_budget_seconds;
  // Device entries only: data parallelism over `ranks` worker processes
  // (`gpus: N | [i, j]` or `processes: N`); rank r uses device_indices[r]
  // as its device_index when the list is not empty.
  int64_t ranks = 1;
  std::vector<int64_t> device_indices;
  // `sync_batchnorm: true`: batch normalisation over the combined batch.
  bool sync_batchnorm = false;
  // Device entries only, from the plugin's own description (after
  // ResolvePlugins): an accelerator, the option that picks which one ("" if
  // none), the option that captures graphs ("" if none).
  bool accelerator = false;
  std::string index_option, graph_option;
};

// The settings a worker applies are the protocol's (one declaration of each
// default for both processes); the rest of `measurement:` is the supervisor's.
using DatasetSpec = protocol::DatasetSettings;
using OptimizerSpec = protocol::OptimizerSettings;
using ScheduleSpec = protocol::ScheduleSettings;
using TrainingSpec = protocol::TrainingSettings;

struct MeasurementSpec : protocol::StepMeasurement {
  int64_t repeats = 1;
  double stall_timeout_seconds = 1800;  ///< a worker that sends no event this long is hung
  bool stop_on_failure = false;         ///< end the run at the first failed cell
  std::string baseline = "cpu";         ///< device label that speedups are against
  std::optional<double> peak_tflops;    ///< the hardware's peak, overriding the datasheet table
};

/// `metrics:`, the one struct of the metrics settings; command-line flags
/// (RunOptions) override its fields.
struct MetricsSpec {
  std::string address;        ///< HOST:PORT to serve /metrics on; empty: off
  double linger_seconds = 0;  ///< keep serving this long after the run
  std::string push_url;       ///< Pushgateway "http://HOST:PORT" to push final metrics to; empty: none
  struct BasicAuth {
    std::string username;       ///< empty: none
    std::string password_file;  ///< its password, first line of this file
  } basic_auth;
  struct Tls {
    std::string cert_file;  ///< serve HTTPS with this PEM certificate (chain)
    std::string key_file;   ///< and this PEM private key
  } tls;
};

/// One cell of the plan: a model entry on a device entry. Every part of the
/// supervisor (runner, Slurm, the engine API's listing) numbers and orders
/// cells this way: models outer, devices inner.
struct PlannedCell {
  size_t index;
  const PluginUse& model;
  const PluginUse& device;
  std::string name() const { return model.label + " on " + device.label; }
};

struct Experiment {
  std::string file;  ///< the YAML file it came from
  std::string name;
  uint64_t seed = 42;
  DatasetSpec dataset;
  std::vector<PluginUse> models, devices;
  TrainingSpec training;
  MeasurementSpec measurement;
  MetricsSpec metrics;

  /// The model x device plan, in cell order (index 0 first).
  std::vector<PlannedCell> Cells() const {
    std::vector<PlannedCell> cells;
    cells.reserve(models.size() * devices.size());
    for (const auto& m : models)
      for (const auto& d : devices) cells.push_back({cells.size(), m, d});
    return cells;
  }

  /// What a worker applies of `measurement:` for a cell on `device`: a
  /// device entry's own budget wins over measurement's.
  protocol::StepMeasurement MeasurementOn(const PluginUse& device) const {
    protocol::StepMeasurement m = measurement;
    if (device.max_steps) m.max_steps = device.max_steps;
    if (device.time_budget_seconds) m.time_budget_seconds = device.time_budget_seconds;
    return m;
  }

  /// The resolved experiment as JSON (recorded in results.json).
  nlohmann::json ToJson() const;
};

}  // namespace trainbench

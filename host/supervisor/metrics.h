#pragma once
// Live metrics for Prometheus (prometheus-cpp): a RunObserver that turns
// worker events into metrics served on /metrics by the host process, which
// has no LibTorch loaded, so civetweb's threads start even for GPU runs.
// Every metric is documented in docs/metrics.md.

#include <memory>
#include <string>

#include "metrics_server.h"
#include "runner.h"

namespace trainbench {

/// Serves /metrics while alive. Not copyable. Observer calls come from the
/// runner's thread; a sampler thread reads GPU and worker CPU usage every
/// second.
class MetricsExporter : public RunObserver {
 public:
  /// Starts listening; throws std::runtime_error with a one-line message when
  /// the address cannot be bound (port in use, say).
  /// Serves on options.address (HOST:PORT, or PORT: loopback; empty: push
  /// only); TLS and basic authentication as the options say (both files of
  /// each or neither: checked by the engine).
  /// `run`: the run whose workers' CPU use is sampled and whose stop ends
  /// the linger (null: none); it must outlive this object.
  explicit MetricsExporter(const MetricsSpec& options, const RunStop* run = nullptr);
  ~MetricsExporter() override;

  /// The address actually bound ("127.0.0.1:9464").
  std::string address() const;

  void OnRunStarted(const Experiment& experiment, size_t cells) override;
  void OnCellStarted(size_t index, const CellRecord& cell) override;
  void OnEvent(size_t index, const CellRecord& cell, const protocol::Event& event) override;
  void OnCellFinished(size_t index, const CellRecord& cell) override;
  void OnRunFinished(const Results& results) override;

  /// Pushes to the Pushgateway (if configured), then keeps serving for the
  /// linger time (returns early once the run is asked to stop).
  void Finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbench

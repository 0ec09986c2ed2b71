#pragma once
// The metrics trainbench exports: every family, its name, help and type, in
// one place (docs/metrics.md describes each). Registered on construction in
// the registry that /metrics serves and the Pushgateway receives.

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>

namespace trainbench {

struct MetricFamilies {
  using Counter = prometheus::Counter;
  using Gauge = prometheus::Gauge;
  using Histogram = prometheus::Histogram;
  template <class T>
  using Family = prometheus::Family<T>;

  /// Step durations from 50 us (a small model on a GPU in a CUDA graph) to
  /// 60 s (a large model on a slow CPU).
  static inline const Histogram::BucketBoundaries kStepBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();

  Family<Gauge>& info =
      prometheus::BuildGauge().Name("trainbench_info").Help("Build and run metadata; always 1").Register(*registry);
  Family<Gauge>& cells = prometheus::BuildGauge()
                             .Name("trainbench_cells")
                             .Help("Cells (model x device) in the experiment")
                             .Register(*registry);
  // A finished run told from a crashed one: its state, when it started and
  // when it last made progress (a crashed run's series stop; its state does
  // not reach finished).
  Family<Gauge>& run_state = prometheus::BuildGauge()
                                 .Name("trainbench_run_state")
                                 .Help(
                                     "1 for the run's state: running, finished, failed (some cells failed) or "
                                     "interrupted")
                                 .Register(*registry);
  Family<Gauge>& run_start = prometheus::BuildGauge()
                                 .Name("trainbench_run_start_timestamp_seconds")
                                 .Help("When the run started (Unix time)")
                                 .Register(*registry);
  Family<Gauge>& last_progress = prometheus::BuildGauge()
                                     .Name("trainbench_last_progress_timestamp_seconds")
                                     .Help("When a worker last reported progress (Unix time)")
                                     .Register(*registry);
  Family<Gauge>& cell_index = prometheus::BuildGauge()
                                  .Name("trainbench_cell_index")
                                  .Help("1-based index of the cell running now (or last run)")
                                  .Register(*registry);
  Family<Counter>& cells_finished = prometheus::BuildCounter()
                                        .Name("trainbench_cells_finished_total")
                                        .Help("Cells finished, by status")
                                        .Register(*registry);
  Family<Counter>& samples = prometheus::BuildCounter()
                                 .Name("trainbench_samples_total")
                                 .Help("Training samples processed")
                                 .Register(*registry);
  Family<Counter>& steps = prometheus::BuildCounter()
                               .Name("trainbench_steps_total")
                               .Help("Training steps (optimizer updates) processed")
                               .Register(*registry);
  Family<Histogram>& step_duration = prometheus::BuildHistogram()
                                         .Name("trainbench_step_duration_seconds")
                                         .Help("Duration of steady-state training steps (warm-up excluded)")
                                         .Register(*registry);
  Family<Gauge>& throughput = prometheus::BuildGauge()
                                  .Name("trainbench_samples_per_second")
                                  .Help("Training throughput over the last progress interval")
                                  .Register(*registry);
  Family<Gauge>& epoch_duration = prometheus::BuildGauge()
                                      .Name("trainbench_epoch_duration_seconds")
                                      .Help("Wall time of the last finished epoch (evaluation excluded)")
                                      .Register(*registry);
  Family<Gauge>& loss = prometheus::BuildGauge()
                            .Name("trainbench_train_loss")
                            .Help("Mean training loss of the current epoch so far")
                            .Register(*registry);
  Family<Gauge>& accuracy = prometheus::BuildGauge()
                                .Name("trainbench_test_accuracy_ratio")
                                .Help("Test accuracy after the last epoch, 0-1")
                                .Register(*registry);
  Family<Gauge>& epoch =
      prometheus::BuildGauge().Name("trainbench_epoch").Help("Current epoch, 1-based").Register(*registry);
  Family<Gauge>& epochs =
      prometheus::BuildGauge().Name("trainbench_epochs").Help("Epochs the cell is configured for").Register(*registry);
  Family<Gauge>& step = prometheus::BuildGauge()
                            .Name("trainbench_epoch_step")
                            .Help("Current step within the epoch, 1-based")
                            .Register(*registry);
  Family<Gauge>& steps_per_epoch =
      prometheus::BuildGauge().Name("trainbench_steps_per_epoch").Help("Steps in one epoch").Register(*registry);
  Family<Gauge>& progress = prometheus::BuildGauge()
                                .Name("trainbench_cell_progress_ratio")
                                .Help("Fraction of the cell's training done, 0-1 (budget-limited cells: of the budget)")
                                .Register(*registry);
  Family<Gauge>& eta = prometheus::BuildGauge()
                           .Name("trainbench_cell_remaining_seconds")
                           .Help("Estimated seconds left in the cell, its repeats included")
                           .Register(*registry);
  Family<Gauge>& device_accelerator =
      prometheus::BuildGauge()
          .Name("trainbench_device_accelerator")
          .Help("1 for a device of the experiment that is an accelerator (as its plugin describes itself), else 0")
          .Register(*registry);
  Family<Gauge>& run_eta = prometheus::BuildGauge()
                               .Name("trainbench_run_remaining_seconds")
                               .Help("Estimated seconds left in the run: the cell running now and every cell after it")
                               .Register(*registry);
  Family<Gauge>& speedup = prometheus::BuildGauge()
                               .Name("trainbench_speedup")
                               .Help("Samples/s over the baseline device's for the same model")
                               .Register(*registry);
  Family<Gauge>& cell_samples_per_second = prometheus::BuildGauge()
                                               .Name("trainbench_cell_samples_per_second")
                                               .Help("Steady-state samples/s of a finished cell")
                                               .Register(*registry);
  Family<Gauge>& cell_time_to_train = prometheus::BuildGauge()
                                          .Name("trainbench_cell_time_to_train_seconds")
                                          .Help("Time to train a finished cell: setup, epochs and evaluation")
                                          .Register(*registry);
  Family<Counter>& energy = prometheus::BuildCounter()
                                .Name("trainbench_energy_joules_total")
                                .Help(
                                    "Energy of finished cells' training (warm-up included, evaluation excluded), "
                                    "from NVML or RAPL; absent where it cannot be read")
                                .Register(*registry);
  Family<Gauge>& cell_joules_per_sample = prometheus::BuildGauge()
                                              .Name("trainbench_cell_joules_per_sample")
                                              .Help("Energy per training sample of a finished cell")
                                              .Register(*registry);
  Family<Gauge>& cell_power = prometheus::BuildGauge()
                                  .Name("trainbench_cell_average_power_watts")
                                  .Help("Average power of a finished cell's training")
                                  .Register(*registry);
  Family<Gauge>& cell_mfu = prometheus::BuildGauge()
                                .Name("trainbench_cell_mfu_ratio")
                                .Help("Model FLOPs utilisation of a finished cell: achieved over peak TFLOP/s")
                                .Register(*registry);
  Family<Gauge>& ranks = prometheus::BuildGauge()
                             .Name("trainbench_cell_ranks")
                             .Help("Worker processes (GPUs) of a finished data-parallel cell")
                             .Register(*registry);
  Family<Gauge>& rank_samples_per_second =
      prometheus::BuildGauge()
          .Name("trainbench_rank_samples_per_second")
          .Help("Steady-state samples/s of one rank (GPU) of a finished data-parallel cell")
          .Register(*registry);
  Family<Gauge>& scaling_efficiency =
      prometheus::BuildGauge()
          .Name("trainbench_scaling_efficiency_ratio")
          .Help("Samples/s of a data-parallel cell over N times the one-rank cell's, 0-1")
          .Register(*registry);
  Family<Gauge>& params = prometheus::BuildGauge()
                              .Name("trainbench_model_parameters")
                              .Help("Trainable parameters of the model")
                              .Register(*registry);
  Family<Gauge>& memory =
      prometheus::BuildGauge()
          .Name("trainbench_device_memory_bytes")
          .Help("Device memory in use by the cell (resident set on a CPU, allocator reserve on a GPU)")
          .Register(*registry);
  Family<Gauge>& memory_peak =
      prometheus::BuildGauge()
          .Name("trainbench_device_memory_peak_bytes")
          .Help(
              "The most device memory the cell has held so far (peak resident set on a CPU, peak allocator "
              "reserve on a GPU: its cache included)")
          .Register(*registry);
  Family<Gauge>& memory_allocated_peak =
      prometheus::BuildGauge()
          .Name("trainbench_device_memory_allocated_peak_bytes")
          .Help("The most device memory the cell's tensors have held so far, where the device tells it (a GPU)")
          .Register(*registry);
  Family<Gauge>& gpu_util = prometheus::BuildGauge()
                                .Name("trainbench_gpu_utilization_ratio")
                                .Help("GPU busy fraction as NVML reports it, 0-1")
                                .Register(*registry);
  Family<Gauge>& gpu_power =
      prometheus::BuildGauge().Name("trainbench_gpu_power_watts").Help("GPU board power draw").Register(*registry);
  Family<Gauge>& gpu_temp = prometheus::BuildGauge()
                                .Name("trainbench_gpu_temperature_celsius")
                                .Help("GPU core temperature")
                                .Register(*registry);
  Family<Gauge>& gpu_memory = prometheus::BuildGauge()
                                  .Name("trainbench_gpu_memory_used_bytes")
                                  .Help("GPU memory used by all processes, as NVML reports it")
                                  .Register(*registry);
  Family<Gauge>& cpu_util =
      prometheus::BuildGauge()
          .Name("trainbench_worker_cpu_utilization_ratio")
          .Help("CPU time of the cell's worker process over wall time, divided by logical cores, 0-1")
          .Register(*registry);
};

}  // namespace trainbench

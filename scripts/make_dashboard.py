#!/usr/bin/env python3
"""Writes dashboards/grafana/trainbench.json, the Grafana dashboard for
trainbench's metrics (docs/metrics.md). Edit here, run, commit both."""
import json, pathlib

SEL = 'experiment=~"$experiment",model=~"$model",device_type=~"$device_type",instance=~"$instance"'
DS = {"type": "prometheus", "uid": "${datasource}"}
panels = []

def panel(kind, title, desc, unit, targets, x, y, w=12, h=8, no_value=None, **extra):
    """no_value: what the panel says when its query has no data (Grafana's
    "No value" option), rather than an empty panel."""
    defaults = {"unit": unit}
    if no_value:
        defaults["noValue"] = no_value
    p = {"type": kind, "title": title, "description": desc, "datasource": DS,
         "gridPos": {"x": x, "y": y, "w": w, "h": h}, "id": len(panels) + 1,
         "fieldConfig": {"defaults": defaults, "overrides": []}, "options": {},
         "targets": [dict({"datasource": DS, "refId": chr(65 + i)}, **t) for i, t in enumerate(targets)]}
    p.update(extra)
    panels.append(p)

def ts(expr, legend):
    return {"expr": expr, "legendFormat": legend, "range": True}

LEG = "{{model}} on {{variant}} ({{instance}})"
NO_GPU = "no GPU: no cell of this experiment ran on one"
panel("timeseries", "Throughput per cell", "Training samples per second of each model x device cell, from the samples counter.",
      "suffix: samples/s", [ts(f'rate(trainbench_samples_total{{{SEL}}}[$__rate_interval])', LEG)], 0, 0)
panel("xychart", "Speedup against model size (the study's figure)",
      "Each point is a model on a device: x = trainable parameters, y = samples/s over the baseline device's for the same model. The study saw 2x, 7x and 40.6x for 0.5M, 11.7M and 25.6M parameters.",
      "suffix:x",
      [{"expr": f'max by (model, variant) (trainbench_speedup{{{SEL}}})', "format": "table", "instant": True, "legendFormat": "speedup"},
       {"expr": f'max by (model, variant) (trainbench_model_parameters{{{SEL}}})', "format": "table", "instant": True, "legendFormat": "parameters"}],
      12, 0, transformations=[{"id": "merge", "options": {}},
                              {"id": "organize", "options": {"renameByName": {"Value #A": "speedup", "Value #B": "parameters"}}}],
      options={"seriesMapping": "auto", "dims": {"x": "parameters"}})
panel("bargauge", "Speedup by model and device", "Samples/s over the baseline device's for the same model, per finished cell.",
      "suffix:x", [{"expr": f'max by (model, variant) (trainbench_speedup{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 0, 8)
panel("timeseries", "Step time p50 and p90", "Quantiles of the steady-state step duration (warm-up excluded), from the step histogram.",
      "s", [ts(f'histogram_quantile(0.5, sum by (le, model, variant) (rate(trainbench_step_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))', "p50 {{model}} on {{variant}}"),
            ts(f'histogram_quantile(0.9, sum by (le, model, variant) (rate(trainbench_step_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))', "p90 {{model}} on {{variant}}")], 12, 8)
panel("timeseries", "Training loss", "Mean training loss of the current epoch so far.", "none",
      [ts(f'trainbench_train_loss{{{SEL}}}', LEG)], 0, 16)
panel("timeseries", "Test accuracy per epoch", "Test-set accuracy after each epoch.", "percentunit",
      [ts(f'trainbench_test_accuracy_ratio{{{SEL}}}', LEG)], 12, 16)
panel("bargauge", "Cell progress", "Fraction of each cell's training done (1 when the cell finished).", "percentunit",
      [{"expr": f'trainbench_cell_progress_ratio{{{SEL}}}', "legendFormat": LEG, "instant": True}], 0, 24, w=8)
panel("stat", "Time left in the cell", "Estimated seconds left in the running cell (its steps at the rate so far, to its epochs or budget, and its repeats still to come).", "s",
      [{"expr": f'max(trainbench_cell_remaining_seconds{{{SEL}}})', "instant": True}], 8, 24, w=4)
panel("stat", "Time left in the run", "Estimated seconds left in the run: the running cell and every cell after it, at the wall time the cells on the same device took (the log's run ETA).", "s",
      [{"expr": 'max(trainbench_run_remaining_seconds{experiment=~"$experiment",instance=~"$instance"})', "instant": True}], 12, 24, w=4)
panel("stat", "Cell", "Index of the running (or last) cell over the cells in the experiment.", "none",
      [{"expr": 'max by (experiment) (trainbench_cell_index{experiment=~"$experiment",instance=~"$instance"})', "legendFormat": "cell", "instant": True},
       {"expr": 'max by (experiment) (trainbench_cells{experiment=~"$experiment",instance=~"$instance"})', "legendFormat": "of", "instant": True}], 16, 24, w=8)
panel("timeseries", "Device memory in use", "Memory the cell uses on its device: the allocator's reserve on a GPU, the worker's resident set on a CPU; and its peak so far (the figure results record).", "bytes",
      [ts(f'trainbench_device_memory_bytes{{{SEL}}}', LEG),
       ts(f'trainbench_device_memory_peak_bytes{{{SEL}}}', "peak: " + LEG)], 0, 32)
panel("timeseries", "GPU utilisation", "Fraction of time the GPU was busy (NVML). Only cells on a GPU report it.", "percentunit",
      [ts(f'trainbench_gpu_utilization_ratio{{{SEL}}}', "{{model}} on {{variant}} gpu {{gpu}}")], 12, 32, no_value=NO_GPU)
panel("timeseries", "GPU power and temperature", "Board power (W) and core temperature (C) of the GPU running the cell (NVML).", "watt",
      [ts(f'trainbench_gpu_power_watts{{{SEL}}}', "power {{gpu}}"), ts(f'trainbench_gpu_temperature_celsius{{{SEL}}}', "temperature {{gpu}}")], 0, 40,
      fieldConfig={"defaults": {"unit": "watt", "noValue": NO_GPU}, "overrides": [{"matcher": {"id": "byRegexp", "options": "temperature.*"}, "properties": [{"id": "unit", "value": "celsius"}]}]})
panel("timeseries", "Worker CPU utilisation", "CPU time of the cell's worker process over wall time, divided by the machine's logical cores.", "percentunit",
      [ts(f'trainbench_worker_cpu_utilization_ratio{{{SEL}}}', LEG)], 12, 40)
panel("timeseries", "Epoch duration", "Wall time of each finished epoch, evaluation excluded.", "s",
      [ts(f'trainbench_epoch_duration_seconds{{{SEL}}}', LEG)], 0, 48)
panel("timeseries", "Steps per second", "Optimizer steps per second of each cell.", "suffix: steps/s",
      [ts(f'rate(trainbench_steps_total{{{SEL}}}[$__rate_interval])', LEG)], 12, 48)
panel("bargauge", "Data-parallel scaling efficiency", "Samples/s of each data-parallel cell over N times its one-GPU twin's (same model and device options): 1 = perfect scaling.",
      "percentunit", [{"expr": f'max by (model, variant) (trainbench_scaling_efficiency_ratio{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 0, 56)
panel("bargauge", "Samples/s per GPU (data parallel)", "Each rank's (GPU's) share of a finished data-parallel cell's throughput.",
      "suffix: samples/s", [{"expr": f'max by (model, variant, rank) (trainbench_rank_samples_per_second{{{SEL}}})', "legendFormat": "{{model}} on {{variant}} rank {{rank}}", "instant": True}], 12, 56)
panel("bargauge", "Time to train", "A finished cell's whole training as the study timed it: setup, epochs and evaluation (projected like the epochs when budgeted).",
      "s", [{"expr": f'max by (model, variant) (trainbench_cell_time_to_train_seconds{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 0, 64)
panel("bargauge", "Model FLOPs utilisation", "Achieved training TFLOP/s over the hardware's dense peak (datasheet table, or measurement.peak_tflops).",
      "percentunit", [{"expr": f'max by (model, variant) (trainbench_cell_mfu_ratio{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 12, 64,
      no_value="peak unknown: set measurement.peak_tflops for this hardware")
NO_ENERGY = "not measured: no NVML (GPU) or RAPL (CPU) counter readable here; see energy_reason in results.json"
panel("bargauge", "Energy per sample", "Joules per training sample of each finished cell (warm-up included, evaluation excluded), from NVML or RAPL; never estimated.",
      "J", [{"expr": f'max by (model, variant) (trainbench_cell_joules_per_sample{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 0, 72,
      no_value=NO_ENERGY)
panel("bargauge", "Average power while training", "Average power of each finished cell's device while it trained (GPU board from NVML, CPU packages from RAPL).",
      "watt", [{"expr": f'max by (model, variant) (trainbench_cell_average_power_watts{{{SEL}}})', "legendFormat": "{{model}} on {{variant}}", "instant": True}], 12, 72,
      no_value=NO_ENERGY)
panel("stat", "GPUs sampled", "GPUs whose utilisation, power and temperature this experiment's cells report (NVML). 0: no GPU here, and the GPU panels stay empty.", "none",
      [{"expr": f'count(count by (instance, gpu) (trainbench_gpu_utilization_ratio{{{SEL}}})) or vector(0)', "instant": True}], 0, 80, w=6, h=4,
      fieldConfig={"defaults": {"unit": "none", "mappings": [{"type": "value", "options": {"0": {"text": "no GPU"}}}]}, "overrides": []})

def var(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS, "query": {"query": query, "refId": name},
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "sort": 1}

dashboard = {
    "uid": "trainbench", "title": "trainbench", "description": "Live training benchmarks: throughput, speedup against model size, step times, loss and accuracy, progress, device use.",
    "tags": ["trainbench"], "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": True,
    "graphTooltip": 1, "refresh": "5s", "time": {"from": "now-30m", "to": "now"},
    "annotations": {"list": []}, "links": [],
    "templating": {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "refresh": 1,
         "hide": 0, "includeAll": False, "multi": False, "options": [], "regex": ""},
        var("instance", "Server", 'label_values(trainbench_info, instance)'),
        var("experiment", "Experiment", 'label_values(trainbench_info{instance=~"$instance"}, experiment)'),
        var("model", "Model", 'label_values(trainbench_samples_total{experiment=~"$experiment"}, model)'),
        var("device_type", "Device type", 'label_values(trainbench_samples_total{experiment=~"$experiment"}, device_type)'),
    ]},
    "panels": panels,
}
out = pathlib.Path(__file__).resolve().parent.parent / "dashboards" / "grafana" / "trainbench.json"
out.write_text(json.dumps(dashboard, indent=2) + "\n")
print(out)

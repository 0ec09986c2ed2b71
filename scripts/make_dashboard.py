#!/usr/bin/env python3
"""Writes dashboards/grafana/trainbench.json, the Grafana dashboard for
trainbench's metrics (docs/metrics.md). Edit here, run, commit both."""
import json, pathlib

SEL = 'experiment=~"$experiment",model=~"$model",device_type=~"$device_type",instance=~"$instance"'
DS = {"type": "prometheus", "uid": "${datasource}"}
panels = []

def panel(kind, title, desc, unit, targets, x, y, w=12, h=8, **extra):
    p = {"type": kind, "title": title, "description": desc, "datasource": DS,
         "gridPos": {"x": x, "y": y, "w": w, "h": h}, "id": len(panels) + 1,
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {},
         "targets": [dict({"datasource": DS, "refId": chr(65 + i)}, **t) for i, t in enumerate(targets)]}
    p.update(extra)
    panels.append(p)

def ts(expr, legend):
    return {"expr": expr, "legendFormat": legend, "range": True}

LEG = "{{model}} on {{variant}} ({{instance}})"
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
panel("stat", "Time remaining in the running cell", "Estimated seconds of training left in the cell, at the current rate.", "s",
      [{"expr": f'max(trainbench_cell_remaining_seconds{{{SEL}}})', "instant": True}], 8, 24, w=8)
panel("stat", "Cell", "Index of the running (or last) cell over the cells in the experiment.", "none",
      [{"expr": 'max by (experiment) (trainbench_cell_index{experiment=~"$experiment",instance=~"$instance"})', "legendFormat": "cell", "instant": True},
       {"expr": 'max by (experiment) (trainbench_cells{experiment=~"$experiment",instance=~"$instance"})', "legendFormat": "of", "instant": True}], 16, 24, w=8)
panel("timeseries", "Device memory in use", "Memory the cell uses on its device: the allocator's reserve on a GPU, the worker's resident set on a CPU.", "bytes",
      [ts(f'trainbench_device_memory_bytes{{{SEL}}}', LEG)], 0, 32)
panel("timeseries", "GPU utilisation", "Fraction of time the GPU was busy (NVML). Only cells on a GPU report it.", "percentunit",
      [ts(f'trainbench_gpu_utilization_ratio{{{SEL}}}', "{{model}} on {{variant}} gpu {{gpu}}")], 12, 32)
panel("timeseries", "GPU power and temperature", "Board power (W) and core temperature (C) of the GPU running the cell (NVML).", "watt",
      [ts(f'trainbench_gpu_power_watts{{{SEL}}}', "power {{gpu}}"), ts(f'trainbench_gpu_temperature_celsius{{{SEL}}}', "temperature {{gpu}}")], 0, 40,
      fieldConfig={"defaults": {"unit": "watt"}, "overrides": [{"matcher": {"id": "byRegexp", "options": "temperature.*"}, "properties": [{"id": "unit", "value": "celsius"}]}]})
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

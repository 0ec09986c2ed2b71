#pragma once
// Each setting of an experiment declared once: the struct member holds its
// default; the VisitFields() entry below gives its key, range or choices and
// one line of documentation. Everything else is derived from these: the
// cell spec's JSON both ways (cell_spec.cc), the YAML validation with
// did-you-mean, the resolved config in results.json and the generated
// docs/config-reference.md (host/supervisor/settings_yaml.cc). Adding a
// `training:` key is a member plus a line here, and the code that uses it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "trainbench/protocol/cell_spec.h"

namespace trainbench::protocol {

/// What is known of one setting besides its type and default.
struct Field {
  const char* key;
  const char* doc;
  double min = 0, max = 0;        ///< numbers: inclusive range, when min < max
  const char* choices = nullptr;  ///< strings: "a,b,c" when only those are allowed
};

// A visitor `v` is called as v(field, member) for every setting, and as
// v.Section(key, doc, substruct) for a nested mapping; it recurses with
// VisitFields(substruct, v).

template <class V>
void VisitFields(DatasetSettings& d, V& v) {
  v(Field{"kind", "cifar10 (the binary files in `path`) or synthetic (random images, throughput only)", 0, 0,
          "cifar10,synthetic"},
    d.kind);
  v(Field{"path",
          "folder holding data_batch_1.bin ... test_batch.bin; relative to the config file; may use "
          "${TRAINBENCH_DATA}; default: TRAINBENCH_DATA, else where `trainbench data fetch cifar10` installs "
          "(~/.local/share/trainbench/cifar-10-batches-bin)"},
    d.path);
  v(Field{"train_size", "training images used (default: all; synthetic: 50000)", 1, 1e7}, d.train_size);
  v(Field{"test_size", "test images used (default: all; synthetic: 10000)", 1, 1e7}, d.test_size);
  v(Field{"image_size",
          "synthetic only: height and width of the images (default 32, CIFAR's; 224: ImageNet's); model "
          "plugins with an image_size option get it",
          8, 1024},
    d.image_size);
  v(Field{"num_classes",
          "synthetic only: classes of the random labels (default 10; 1000: ImageNet's); model plugins with a "
          "num_classes option get it",
          2, 100000},
    d.num_classes);
}

template <class V>
void VisitFields(OptimizerSettings& o, V& v) {
  v(Field{"name",
          "sgd (fused on CUDA), adam, or adamw (PyTorch's AdamW: decoupled weight decay, bias-corrected moments)", 0, 0,
          "sgd,adam,adamw"},
    o.name);
  v(Field{"lr", "learning rate (default: sgd 0.01; adam and adamw 0.001, as PyTorch's)", 1e-12, 100}, o.lr);
  v(Field{"momentum", "SGD momentum (sgd only)", 0, 0.999999}, o.momentum);
  v(Field{"weight_decay",
          "sgd and adam: L2 penalty added to the gradients; adamw: decoupled, the weights shrunk by lr x this each "
          "step (default: sgd 5e-4; adam 0; adamw 0.01, as PyTorch's)",
          0, 1},
    o.weight_decay);
  v(Field{"betas", "adam and adamw: decay rates of the gradient's first and second moments", 0, 0.999999}, o.betas);
  v(Field{"eps", "adam and adamw: added to the second moment's square root", 1e-30, 1}, o.eps);
  v(Field{"nesterov", "Nesterov momentum (needs momentum > 0)"}, o.nesterov);
  v(Field{"overlap",
          "sgd on one CUDA GPU in a captured step (cuda_graph): update each parameter once its gradient is final, "
          "on a side stream beside the rest of the backward (the same arithmetic; false: after the whole backward). "
          "With one rank and bf16 autocast, the parameters a model of SDK 1.5+ reads through working copies (the "
          "ResNets' convolutions on CUDA) get mixed-precision SGD inside the backward, in eager and captured steps: "
          "one kernel per group reads the bf16 gradients, updates the fp32 weights and writes the next forward's bf16 "
          "copies (the same arithmetic; false: the copies cast each way and this optimizer updates them). "
          "Assumes the model reads no parameter in the backward after its gradient (true of the shipped models)"},
    o.overlap);
}

template <class V>
void VisitFields(ScheduleSettings& s, V& v) {
  v(Field{"name", "learning-rate schedule over epochs", 0, 0, "none,step,cosine"}, s.name);
  v(Field{"step_size", "step: epochs between decays", 1, 100000}, s.step_size);
  v(Field{"gamma", "step: the factor of each decay", 1e-6, 1}, s.gamma);
}

template <class V>
void VisitFields(TrainingSettings& t, V& v) {
  v(Field{"epochs", "epochs to train", 1, 100000}, t.epochs);
  v(Field{"batch_size", "samples per step (over all ranks of a data-parallel cell)", 1, 1 << 20}, t.batch_size);
  v(Field{"augment", "random crop (4-pixel padding) and horizontal flip of training images"}, t.augment);
  v.Section("optimizer", "the optimizer", t.optimizer);
  v.Section("schedule", "the learning-rate schedule", t.schedule);
}

/// The `measurement:` settings a worker applies.
template <class V>
void VisitFields(StepMeasurement& m, V& v) {
  v(Field{"warmup_steps", "untimed steps at the start of each cell (autotuning, graph capture)", 0, 1e6},
    m.warmup_steps);
  v(Field{"max_steps",
          "stop each cell after this many steps (epochs left are projected); a device entry's own "
          "max_steps wins",
          1, 1099511627776.0},
    m.max_steps);
  v(Field{"time_budget_seconds",
          "stop each cell's training after this long (epochs left are projected); a "
          "device entry's own wins",
          0.001, 1e7},
    m.time_budget_seconds);
  v(Field{"progress_interval_seconds", "how often a worker reports progress (and metrics update)", 0.05, 3600},
    m.progress_interval_seconds);
  v(Field{"eval_batch_size", "samples per evaluation batch", 1, 1 << 20}, m.eval_batch_size);
  v(Field{"target_accuracy",
          "record the training time (evaluation excluded, as MLPerf counts it) until the test accuracy first reaches "
          "this (0-1)",
          1e-6, 1},
    m.target_accuracy);
  v(Field{"eval_every_steps", "also evaluate every this many steps (default: at each epoch's end only)", 1, 1e9},
    m.eval_every_steps);
  v(Field{"stop_at_target", "end each cell once it reaches target_accuracy"}, m.stop_at_target);
}

/// Writes settings as JSON, nested as in YAML (null for an unset optional).
struct JsonWriter {
  nlohmann::json& out;
  template <class T>
  void operator()(const Field& f, T& value) {
    out[f.key] = value;
  }
  template <class T>
  void operator()(const Field& f, std::optional<T>& value) {
    out[f.key] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  }
  template <class S>
  void Section(const char* key, const char*, S& sub) {
    nlohmann::json nested = nlohmann::json::object();
    JsonWriter w{nested};
    VisitFields(sub, w);
    out[key] = nested;
  }
};

/// Any settings struct with VisitFields as JSON.
template <class S>
nlohmann::json SettingsToJson(S settings) {
  nlohmann::json out = nlohmann::json::object();
  JsonWriter w{out};
  VisitFields(settings, w);
  return out;
}

}  // namespace trainbench::protocol

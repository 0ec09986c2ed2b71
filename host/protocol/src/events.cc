#include "trainbench/protocol/events.h"

#include <type_traits>

#include "is_optional.h"
#include "strict_reader.h"

namespace trainbench::protocol {
using nlohmann::json;

namespace {

template <class>
struct AlwaysFalse : std::false_type {};  // a type, not a variable: clang's unused-variable warning saw no use

template <class T>
const char* NameOf() {
  if constexpr (std::is_same_v<T, Hello>)
    return "hello";
  else if constexpr (std::is_same_v<T, Started>)
    return "started";
  else if constexpr (std::is_same_v<T, Progress>)
    return "progress";
  else if constexpr (std::is_same_v<T, Epoch>)
    return "epoch";
  else if constexpr (std::is_same_v<T, Result>)
    return "result";
  else if constexpr (std::is_same_v<T, Skipped>)
    return "skipped";
  else if constexpr (std::is_same_v<T, Error>)
    return "error";
  else if constexpr (std::is_same_v<T, Interrupted>)
    return "interrupted";
  else if constexpr (std::is_same_v<T, PluginDescribed>)
    return "plugin";
  else if constexpr (std::is_same_v<T, Info>)
    return "info";
  else
    static_assert(AlwaysFalse<T>::value, "an event without a name");
}

// Each event's fields, both ways. `Fields(event, visitor)` calls
// visitor(key, member) for every member, so writing and reading cannot
// disagree on a name.
template <class V>
void Fields(Hello& e, V&& v) {
  v("protocol", e.protocol);
  v("worker_version", e.worker_version);
}
template <class V>
void Fields(Started& e, V&& v) {
  v("params", e.params);
  v("flops_per_sample", e.flops_per_sample);
  v("hardware", e.hardware);
  v("steps_per_epoch", e.steps_per_epoch);
  v("train_size", e.train_size);
  v("test_size", e.test_size);
  v("ranks", e.ranks);
  v("rank", e.rank);
  v("plugins", e.plugins);
}
template <class V>
void Fields(Progress& e, V&& v) {
  v("epoch", e.epoch);
  v("step", e.step);
  v("steps_per_epoch", e.steps_per_epoch);
  v("steps_done", e.steps_done);
  v("samples_done", e.samples_done);
  v("loss", e.loss);
  v("samples_per_second", e.samples_per_second);
  v("step_seconds", e.step_seconds);
  v("memory_bytes", e.memory_bytes);
  v("peak_memory_bytes", e.peak_memory_bytes);
  v("peak_allocated_bytes", e.peak_allocated_bytes);
  v("elapsed_seconds", e.elapsed_seconds);
}
template <class V>
void Fields(Epoch& e, V&& v) {
  v("epoch", e.epoch);
  v("complete", e.complete);
  v("seconds", e.seconds);
  v("steps", e.steps);
  v("train_loss", e.train_loss);
  v("test_accuracy", e.test_accuracy);
}
template <class V>
void Fields(Result& e, V&& v) {
  v("params", e.params);
  v("flops_per_sample", e.flops_per_sample);
  v("samples_per_second", e.samples_per_second);
  v("achieved_tflops", e.achieved_tflops);
  v("step_seconds_median", e.step_seconds_median);
  v("step_seconds_p90", e.step_seconds_p90);
  v("steps", e.steps);
  v("steady_steps", e.steady_steps);
  v("epoch_seconds", e.epoch_seconds);
  v("measured_epochs", e.measured_epochs);
  v("train_seconds", e.train_seconds);
  v("setup_seconds", e.setup_seconds);
  v("warmup_seconds", e.warmup_seconds);
  v("eval_seconds", e.eval_seconds);
  v("evaluations", e.evaluations);
  v("accuracy_curve", e.accuracy_curve);
  v("time_to_target_seconds", e.time_to_target_seconds);
  v("epochs_to_target", e.epochs_to_target);
  v("target_reason", e.target_reason);
  v("stopped_at_target", e.stopped_at_target);
  v("energy_joules", e.energy_joules);
  v("joules_per_sample", e.joules_per_sample);
  v("average_power_watts", e.average_power_watts);
  v("epoch_energy_joules", e.epoch_energy_joules);
  v("energy_source", e.energy_source);
  v("energy_reason", e.energy_reason);
  v("energy_counter_glitches", e.energy_counter_glitches);
  v("train_loss", e.train_loss);
  v("test_accuracy", e.test_accuracy);
  v("projected", e.projected);
  v("peak_memory_bytes", e.peak_memory_bytes);
  v("peak_allocated_bytes", e.peak_allocated_bytes);
  v("ranks", e.ranks);
  v("rank", e.rank);
  v("backend", e.backend);
  v("hardware", e.hardware);
  v("sync_batchnorm", e.sync_batchnorm);
  v("path_taken", e.path_taken);
}
template <class V>
void Fields(Skipped& e, V&& v) {
  v("reason", e.reason);
}
template <class V>
void Fields(Error& e, V&& v) {
  v("reason", e.reason);
  v("loss_nan", e.loss_nan);
}
template <class V>
void Fields(Interrupted& e, V&& v) {
  v("reason", e.reason);
}
template <class V>
void Fields(PluginDescribed& e, V&& v) {
  v("path", e.path);
  v("loaded", e.loaded);
  v("reason", e.reason);
  v("descriptor", e.descriptor);
  v("available", e.available);
  v("unavailable_reason", e.unavailable_reason);
}
template <class V>
void Fields(Info& e, V&& v) {
  v("torch_version", e.torch_version);
  v("compiler", e.compiler);
  v("cxx_abi", e.cxx_abi);
  v("cuda_version", e.cuda_version);
  v("distributed_backends", e.distributed_backends);
}

struct Writer {
  json& out;
  template <class T>
  void operator()(const char* key, const T& value) {
    if constexpr (IsOptional<T>::value) {
      if (value) out[key] = *value;  // absent when unset
    } else {
      out[key] = value;
    }
  }
};

struct Reader {
  StrictReader& in;
  template <class T>
  void operator()(const char* key, T& value) {
    if constexpr (IsOptional<T>::value) {
      value = in.GetOptional<typename T::value_type>(key);
    } else if constexpr (std::is_same_v<T, json>) {
      value = in.Json(key);
    } else {
      value = in.Get<T>(key);
    }
  }
};

template <class T>
json Write(T event) {
  json j = json::object();
  Fields(event, Writer{j});
  return j;
}

template <class T>
Event Read(const json& j) {
  StrictReader r(j, std::string("event '") + NameOf<T>() + "'");
  r.Get<std::string>("event");
  T event;
  Fields(event, Reader{r});
  r.Finish();
  return event;
}

template <size_t I = 0>
Event ReadNamed(const std::string& name, const json& j) {
  if constexpr (I < std::variant_size_v<Event>) {
    using T = std::variant_alternative_t<I, Event>;
    if (name == NameOf<T>()) return Read<T>(j);
    return ReadNamed<I + 1>(name, j);
  } else {
    throw ProtocolError("event channel: unknown event '" + name + "'");
  }
}

}  // namespace

std::string EventName(const Event& event) {
  return std::visit([](const auto& e) { return std::string(NameOf<std::decay_t<decltype(e)>>()); }, event);
}

json ToJson(const Event& event) {
  return std::visit(
      [](const auto& e) {
        json j = Write(e);
        j["event"] = NameOf<std::decay_t<decltype(e)>>();
        return j;
      },
      event);
}

json ToJson(const Result& result) { return Write(result); }

const std::vector<std::string>& ResultKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    Result r;
    Fields(r, [&](const char* key, auto&) { k.emplace_back(key); });
    return k;
  }();
  return keys;
}

Event EventFromJson(const json& j) {
  if (!j.is_object()) throw ProtocolError("event channel: a message that is not a JSON object");
  auto it = j.find("event");
  if (it == j.end() || !it->is_string()) throw ProtocolError("event channel: a message without its 'event' name");
  return ReadNamed(it->get<std::string>(), j);
}

}  // namespace trainbench::protocol

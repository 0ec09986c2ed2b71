#include "trainbench/protocol/cell_spec.h"

#include "strict_reader.h"
#include "trainbench/protocol/settings.h"
#include "trainbench/protocol/version.h"

namespace trainbench::protocol {
using nlohmann::json;

namespace {
template <class T>
json Nullable(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json ToJson(const PluginRef& p) { return {{"name", p.name}, {"path", p.path}, {"options", p.options}}; }

PluginRef PluginFrom(StrictReader r) {
  PluginRef p;
  p.name = r.Get<std::string>("name");
  p.path = r.Get<std::string>("path");
  p.options = r.Json("options");
  r.Finish();
  return p;
}

// Settings from JSON, field by field from VisitFields (settings.h).
struct JsonReader {
  StrictReader& in;
  template <class T>
  void operator()(const Field& f, T& value) {
    value = in.Get<T>(f.key);
  }
  template <class T>
  void operator()(const Field& f, std::optional<T>& value) {
    value = in.GetNullable<T>(f.key);
  }
  template <class S>
  void Section(const char* key, const char*, S& sub) {
    StrictReader nested = in.Object(key);
    JsonReader r{nested};
    VisitFields(sub, r);
    nested.Finish();
  }
};

template <class S>
json WriteSettings(S settings) {
  return SettingsToJson(settings);
}

template <class S>
S ReadSettings(StrictReader r) {
  S settings;
  JsonReader reader{r};
  VisitFields(settings, reader);
  r.Finish();
  return settings;
}

DistributedSpec DistributedFrom(StrictReader r) {
  DistributedSpec d;
  d.rank = r.Get<int>("rank");
  d.world_size = r.Get<int>("world_size");
  d.store_host = r.Get<std::string>("store_host");
  d.store_port = r.Get<int>("store_port");
  d.timeout_seconds = r.Get<double>("timeout_seconds");
  d.sync_batchnorm = r.Get<bool>("sync_batchnorm");
  r.Finish();
  return d;
}

Diagnostics DiagnosticsFrom(StrictReader r) {
  Diagnostics d;
  d.kernel_trace_steps = r.Get<int64_t>("kernel_trace_steps");
  d.graph_dump = r.Get<bool>("graph_dump");
  d.folder = r.Get<std::string>("folder");
  r.Finish();
  return d;
}
}  // namespace

json ToJson(const DatasetSettings& d) { return WriteSettings(d); }
json ToJson(const TrainingSettings& t) { return WriteSettings(t); }
json ToJson(const StepMeasurement& m) { return WriteSettings(m); }

json ToJson(const CellSpec& s) {
  json j = {{"protocol", s.protocol},
            {"experiment", s.experiment},
            {"cell_index", s.cell_index},
            {"seed", s.seed},
            {"model", ToJson(s.model)},
            {"device", ToJson(s.device)},
            {"dataset", ToJson(s.dataset)},
            {"training", ToJson(s.training)},
            {"measurement", ToJson(s.measurement)}};
  if (s.distributed) {
    const DistributedSpec& d = *s.distributed;
    j["distributed"] = {{"rank", d.rank},
                        {"world_size", d.world_size},
                        {"store_host", d.store_host},
                        {"store_port", d.store_port},
                        {"timeout_seconds", d.timeout_seconds},
                        {"sync_batchnorm", d.sync_batchnorm}};
  }
  if (s.diagnostics) {
    const Diagnostics& d = *s.diagnostics;
    j["diagnostics"] = {
        {"kernel_trace_steps", d.kernel_trace_steps}, {"graph_dump", d.graph_dump}, {"folder", d.folder}};
  }
  return j;
}

CellSpec CellSpecFromJson(const json& j) {
  StrictReader r(j, "cell spec");
  CellSpec s;
  // The version first: another version's fields would only confuse.
  s.protocol = r.Get<int>("protocol");
  if (s.protocol != kProtocolVersion) {
    throw ProtocolError("cell spec: protocol version " + std::to_string(s.protocol) +
                        " from the host, but this worker speaks " + std::to_string(kProtocolVersion) +
                        " (install trainbench and trainbench-worker together)");
  }
  s.experiment = r.Get<std::string>("experiment");
  s.cell_index = r.Get<int64_t>("cell_index");
  s.seed = r.Get<uint64_t>("seed");
  s.model = PluginFrom(r.Object("model"));
  s.device = PluginFrom(r.Object("device"));
  s.dataset = ReadSettings<DatasetSettings>(r.Object("dataset"));
  s.training = ReadSettings<TrainingSettings>(r.Object("training"));
  s.measurement = ReadSettings<StepMeasurement>(r.Object("measurement"));
  if (r.Has("distributed")) s.distributed = DistributedFrom(r.Object("distributed"));
  if (r.Has("diagnostics")) s.diagnostics = DiagnosticsFrom(r.Object("diagnostics"));
  r.Finish();
  return s;
}

}  // namespace trainbench::protocol

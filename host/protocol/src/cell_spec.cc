#include "trainbench/protocol/cell_spec.h"

#include "strict_reader.h"
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

DatasetSettings DatasetFrom(StrictReader r) {
  DatasetSettings d;
  d.kind = r.Get<std::string>("kind");
  d.path = r.Get<std::string>("path");
  d.train_size = r.GetNullable<int64_t>("train_size");
  d.test_size = r.GetNullable<int64_t>("test_size");
  r.Finish();
  return d;
}

TrainingSettings TrainingFrom(StrictReader r) {
  TrainingSettings t;
  t.epochs = r.Get<int64_t>("epochs");
  t.batch_size = r.Get<int64_t>("batch_size");
  t.augment = r.Get<bool>("augment");
  StrictReader o = r.Object("optimizer");
  t.optimizer.name = o.Get<std::string>("name");
  t.optimizer.lr = o.Get<double>("lr");
  t.optimizer.momentum = o.Get<double>("momentum");
  t.optimizer.weight_decay = o.Get<double>("weight_decay");
  t.optimizer.nesterov = o.Get<bool>("nesterov");
  o.Finish();
  StrictReader s = r.Object("schedule");
  t.schedule.name = s.Get<std::string>("name");
  t.schedule.step_size = s.Get<int64_t>("step_size");
  t.schedule.gamma = s.Get<double>("gamma");
  s.Finish();
  r.Finish();
  return t;
}

StepMeasurement MeasurementFrom(StrictReader r) {
  StepMeasurement m;
  m.warmup_steps = r.Get<int64_t>("warmup_steps");
  m.max_steps = r.GetNullable<int64_t>("max_steps");
  m.time_budget_seconds = r.GetNullable<double>("time_budget_seconds");
  m.progress_interval_seconds = r.Get<double>("progress_interval_seconds");
  m.eval_batch_size = r.Get<int64_t>("eval_batch_size");
  r.Finish();
  return m;
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
}  // namespace

json ToJson(const DatasetSettings& d) {
  return {{"kind", d.kind}, {"path", d.path}, {"train_size", Nullable(d.train_size)},
          {"test_size", Nullable(d.test_size)}};
}

json ToJson(const TrainingSettings& t) {
  return {{"epochs", t.epochs},
          {"batch_size", t.batch_size},
          {"augment", t.augment},
          {"optimizer",
           {{"name", t.optimizer.name},
            {"lr", t.optimizer.lr},
            {"momentum", t.optimizer.momentum},
            {"weight_decay", t.optimizer.weight_decay},
            {"nesterov", t.optimizer.nesterov}}},
          {"schedule", {{"name", t.schedule.name}, {"step_size", t.schedule.step_size}, {"gamma", t.schedule.gamma}}}};
}

json ToJson(const StepMeasurement& m) {
  return {{"warmup_steps", m.warmup_steps},
          {"max_steps", Nullable(m.max_steps)},
          {"time_budget_seconds", Nullable(m.time_budget_seconds)},
          {"progress_interval_seconds", m.progress_interval_seconds},
          {"eval_batch_size", m.eval_batch_size}};
}

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
  return j;
}

CellSpec CellSpecFromJson(const json& j) {
  StrictReader r(j, "cell spec");
  CellSpec s;
  // The version first: another version's fields would only confuse.
  s.protocol = r.Get<int>("protocol");
  if (s.protocol != kProtocolVersion) {
    throw ProtocolError("cell spec: protocol version " + std::to_string(s.protocol) + " from the host, but this worker speaks " +
                        std::to_string(kProtocolVersion) + " (install trainbench and trainbench-worker together)");
  }
  s.experiment = r.Get<std::string>("experiment");
  s.cell_index = r.Get<int64_t>("cell_index");
  s.seed = r.Get<uint64_t>("seed");
  s.model = PluginFrom(r.Object("model"));
  s.device = PluginFrom(r.Object("device"));
  s.dataset = DatasetFrom(r.Object("dataset"));
  s.training = TrainingFrom(r.Object("training"));
  s.measurement = MeasurementFrom(r.Object("measurement"));
  if (r.Has("distributed")) s.distributed = DistributedFrom(r.Object("distributed"));
  r.Finish();
  return s;
}

}  // namespace trainbench::protocol

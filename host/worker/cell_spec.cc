#include "cell_spec.h"

namespace trainbench::worker {
namespace {
template <class T>
std::optional<T> Optional(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}
PluginRef Plugin(const nlohmann::json& j) {
  return {j.at("name").get<std::string>(), j.at("path").get<std::string>(), j.at("options")};
}
}  // namespace

CellSpec CellSpec::FromJson(const nlohmann::json& j) {
  CellSpec s;
  s.experiment = j.at("experiment").get<std::string>();
  s.cell_index = j.at("cell_index").get<int64_t>();
  s.seed = j.at("seed").get<uint64_t>();
  s.model = Plugin(j.at("model"));
  s.device = Plugin(j.at("device"));
  const auto& d = j.at("dataset");
  s.dataset_kind = d.at("kind").get<std::string>();
  s.dataset_path = d.value("path", "");
  s.train_size = Optional<int64_t>(d, "train_size");
  s.test_size = Optional<int64_t>(d, "test_size");
  const auto& t = j.at("training");
  s.epochs = t.at("epochs").get<int64_t>();
  s.batch_size = t.at("batch_size").get<int64_t>();
  s.augment = t.at("augment").get<bool>();
  const auto& o = t.at("optimizer");
  s.optimizer = o.at("name").get<std::string>();
  s.lr = o.at("lr").get<double>();
  s.momentum = o.at("momentum").get<double>();
  s.weight_decay = o.at("weight_decay").get<double>();
  s.nesterov = o.at("nesterov").get<bool>();
  const auto& sch = t.at("schedule");
  s.schedule = sch.at("name").get<std::string>();
  s.step_size = sch.at("step_size").get<int64_t>();
  s.gamma = sch.at("gamma").get<double>();
  const auto& m = j.at("measurement");
  s.warmup_steps = m.at("warmup_steps").get<int64_t>();
  s.max_steps = Optional<int64_t>(m, "max_steps");
  s.time_budget_seconds = Optional<double>(m, "time_budget_seconds");
  s.progress_interval_seconds = m.at("progress_interval_seconds").get<double>();
  s.eval_batch_size = m.at("eval_batch_size").get<int64_t>();
  if (auto it = j.find("distributed"); it != j.end() && !it->is_null()) {
    DistributedSpec d;
    d.rank = it->at("rank").get<int>();
    d.world_size = it->at("world_size").get<int>();
    d.store_host = it->value("store_host", d.store_host);
    d.store_port = it->at("store_port").get<int>();
    d.timeout_seconds = it->value("timeout_seconds", d.timeout_seconds);
    d.sync_batchnorm = it->value("sync_batchnorm", false);
    s.distributed = d;
  }
  return s;
}

}  // namespace trainbench::worker

// The supervisor-worker protocol: specs and events survive the trip, and
// whatever does not follow the protocol is refused with the field named.
#include <gtest/gtest.h>
#include <unistd.h>

#include "trainbench/protocol/cell_record.h"
#include "trainbench/protocol/cell_spec.h"
#include "trainbench/protocol/channel.h"
#include "trainbench/protocol/error.h"
#include "trainbench/protocol/events.h"
#include "trainbench/protocol/version.h"

namespace trainbench::protocol {
namespace {
using nlohmann::json;

CellSpec SampleSpec() {
  CellSpec s;
  s.protocol = kProtocolVersion;
  s.experiment = "exp";
  s.cell_index = 3;
  s.seed = 7;
  s.model = {"simple_cnn", "/p/simple_cnn.so", {{"width", 2}}};
  s.device = {"cpu", "/p/cpu.so", {{"threads", 0}}};
  s.dataset.kind = "synthetic";
  s.dataset.train_size = 64;
  s.training.epochs = 2;
  s.training.optimizer.lr = 0.1;
  s.measurement.max_steps = 9;
  s.distributed = DistributedSpec{1, 2, "127.0.0.1", 4242, 600, true};
  return s;
}

// Runs `f` and returns the ProtocolError's message ("" when none).
template <class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "";
}

TEST(CellSpec, RoundTripsThroughJson) {
  const CellSpec s = SampleSpec();
  const CellSpec back = CellSpecFromJson(ToJson(s));
  EXPECT_EQ(ToJson(back), ToJson(s));
  EXPECT_EQ(back.training.optimizer.lr, 0.1);
  EXPECT_EQ(back.measurement.max_steps, 9);
  EXPECT_FALSE(back.measurement.time_budget_seconds.has_value());
  ASSERT_TRUE(back.distributed.has_value());
  EXPECT_TRUE(back.distributed->sync_batchnorm);
}

TEST(CellSpec, DefaultsAreDeclaredOnce) {
  // The supervisor's experiment uses these same structs: the weight decay
  // a worker applies by default is the experiment's default.
  EXPECT_EQ(TrainingSettings{}.optimizer.weight_decay, 5e-4);
}

TEST(CellSpec, AMissingFieldIsNamed) {
  json j = ToJson(SampleSpec());
  j["training"]["optimizer"].erase("momentum");
  EXPECT_EQ(ErrorOf([&] { CellSpecFromJson(j); }), "cell spec: training: optimizer: missing field 'momentum'");
}

TEST(CellSpec, AnUnknownFieldIsNamed) {
  json j = ToJson(SampleSpec());
  j["measurement"]["warmup_stepz"] = 3;
  EXPECT_EQ(ErrorOf([&] { CellSpecFromJson(j); }), "cell spec: measurement: unknown field 'warmup_stepz'");
}

TEST(CellSpec, AWrongTypeIsNamed) {
  json j = ToJson(SampleSpec());
  j["training"]["augment"] = "yes";
  EXPECT_EQ(ErrorOf([&] { CellSpecFromJson(j); }), "cell spec: training: field 'augment' has the wrong type (string)");
}

TEST(CellSpec, AnotherVersionNamesBoth) {
  json j = ToJson(SampleSpec());
  j["protocol"] = 1;
  const std::string message = ErrorOf([&] { CellSpecFromJson(j); });
  EXPECT_NE(message.find("protocol version 1 from the host"), std::string::npos) << message;
  EXPECT_NE(message.find("this worker speaks " + std::to_string(kProtocolVersion)), std::string::npos) << message;
}

TEST(Events, RoundTripThroughJson) {
  Result r;
  r.samples_per_second = 123.5;
  r.epoch_seconds = {1.0, 2.0};
  r.hardware = {{"type", "cpu"}};
  r.sync_batchnorm = true;
  const Event back = EventFromJson(ToJson(Event{r}));
  ASSERT_TRUE(std::holds_alternative<Result>(back));
  EXPECT_EQ(std::get<Result>(back).samples_per_second, 123.5);
  EXPECT_EQ(std::get<Result>(back).epoch_seconds, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(std::get<Result>(back).sync_batchnorm, true);

  Progress p;
  p.step_seconds = {0.1, 0.2};
  EXPECT_EQ(ToJson(EventFromJson(ToJson(Event{p}))), ToJson(Event{p}));
  EXPECT_EQ(EventName(Event{Hello{kProtocolVersion, "x"}}), "hello");
  EXPECT_EQ(ToJson(Event{Error{"boom", true}}).at("event"), "error");
}

TEST(Events, OptionalFieldsAreAbsentWhenUnset) {
  const json j = ToJson(Event{Result{}});
  EXPECT_FALSE(j.contains("sync_batchnorm"));
  EXPECT_TRUE(std::holds_alternative<Result>(EventFromJson(j)));
}

TEST(Events, MissingUnknownAndMistypedFieldsAreRefused) {
  json j = ToJson(Event{Epoch{1, true, 2.0, 10, 0.5, 0.25}});
  json missing = j;
  missing.erase("test_accuracy");
  EXPECT_EQ(ErrorOf([&] { EventFromJson(missing); }), "event 'epoch': missing field 'test_accuracy'");
  json unknown = j;
  unknown["samples_per_second"] = 123456789;
  EXPECT_EQ(ErrorOf([&] { EventFromJson(unknown); }), "event 'epoch': unknown field 'samples_per_second'");
  json mistyped = j;
  mistyped["complete"] = 1;
  EXPECT_EQ(ErrorOf([&] { EventFromJson(mistyped); }), "event 'epoch': field 'complete' has the wrong type (number)");
  EXPECT_EQ(ErrorOf([&] { EventFromJson(json{{"event", "victory"}}); }), "event channel: unknown event 'victory'");
  EXPECT_EQ(ErrorOf([&] { EventFromJson(json::array()); }), "event channel: a message that is not a JSON object");
}

// A result with every field set to something other than its default.
Result FullResult() {
  Result r;
  r.params = 11;
  r.flops_per_sample = 22;
  r.samples_per_second = 3.5;
  r.achieved_tflops = 1.25;
  r.step_seconds_median = 0.5;
  r.step_seconds_p90 = 0.75;
  r.steps = 40;
  r.steady_steps = 30;
  r.epoch_seconds = {2.0, 1.5};
  r.measured_epochs = 2;
  r.train_seconds = 3.5;
  r.train_loss = {2.1, 1.9};
  r.test_accuracy = {0.3, 0.4};
  r.setup_seconds = 0.25;
  r.warmup_seconds = 0.125;
  r.eval_seconds = 0.5;
  r.evaluations = 2;
  r.accuracy_curve = {{1.0, 1.0, 0.3}, {2.0, 2.0, 0.4}};
  r.time_to_target_seconds = 2.0;
  r.epochs_to_target = 2.0;
  r.target_reason = "reached";
  r.stopped_at_target = true;
  r.energy_joules = 100.0;
  r.joules_per_sample = 0.5;
  r.average_power_watts = 50.0;
  r.epoch_energy_joules = {60.0, 40.0};
  r.energy_source = "rapl";
  r.energy_reason = "none";
  r.energy_counter_glitches = 1;
  r.projected = true;
  r.peak_memory_bytes = 1 << 20;
  r.peak_allocated_bytes = 1 << 19;
  r.ranks = 2;
  r.rank = 1;
  r.backend = "gloo";
  r.hardware = {{"name", "x"}};
  r.sync_batchnorm = true;
  r.path_taken = json{{"model", {{"batch_norm", {{"composite", 3}}}}}};
  return r;
}

TEST(CellRecord, TakesEveryFieldOfAResultAndDropsThemAgain) {
  const Result r = FullResult();
  const json event = ToJson(r);
  // The fixture sets every field: a new one must be added to it.
  ASSERT_EQ(event.size(), ResultKeys().size()) << event.dump();
  CellRecord cell;
  cell.Apply(r);
  const json record = ToJson(cell);
  for (const auto& key : ResultKeys()) {
    ASSERT_TRUE(record.contains(key)) << "result key '" << key << "' is not in the cell record";
    EXPECT_EQ(record[key], event[key]) << key;
  }
  EXPECT_TRUE(cell.time_to_train_seconds);
  cell.DropMeasurements();
  const json dropped = ToJson(cell);
  for (const auto& key : ResultKeys()) {
    const bool kept = key == "params" || key == "flops_per_sample" || key == "hardware";
    EXPECT_EQ(dropped.contains(key), kept) << key;
  }
  EXPECT_FALSE(cell.time_to_train_seconds);
}

TEST(CellRecord, SaysOnlyWhatAResultSays) {
  Result r = FullResult();
  r.stopped_at_target = false;
  r.energy_joules.reset();
  r.energy_source.reset();
  CellRecord cell;
  cell.Apply(FullResult());
  cell.Apply(r);  // a second result replaces the first whole
  EXPECT_FALSE(cell.stopped_at_target);
  EXPECT_FALSE(cell.energy_joules);
  EXPECT_FALSE(cell.epoch_energy_joules);
  EXPECT_FALSE(cell.energy_source);
  EXPECT_EQ(*cell.samples_per_second, 3.5);
}

TEST(Channel, FramesSplitAcrossReadsAreJoined) {
  const std::string bytes = Frame(R"({"event":"skipped","reason":"a"})") + Frame(R"({"event":"skipped","reason":"b"})");
  FrameReader reader;
  std::vector<json> got;
  for (char c : bytes) {  // one byte at a time: the worst a pipe can do
    reader.Feed(&c, 1);
    while (auto m = reader.Next()) got.push_back(*m);
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].at("reason"), "b");
  EXPECT_EQ(reader.pending(), 0u);
}

TEST(Channel, OversizedAndNonJsonFramesAreRefused) {
  FrameReader big;
  const std::string header = "\x7f\xff\xff\xff";
  big.Feed(header.data(), header.size());
  EXPECT_NE(ErrorOf([&] { big.Next(); }).find("the limit is"), std::string::npos);
  FrameReader garbage;
  const std::string frame = Frame("{not json");
  garbage.Feed(frame.data(), frame.size());
  EXPECT_EQ(ErrorOf([&] { garbage.Next(); }), "event channel: a frame that is not JSON");
}

TEST(Channel, WriterFramesWholeEventsOnAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EventWriter writer(fds[1]);
  ASSERT_TRUE(writer.Write(Skipped{"not here \xff"}));  // not UTF-8: replaced, still a valid message
  ::close(fds[1]);
  char buffer[256];
  FrameReader reader;
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0) reader.Feed(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  auto message = reader.Next();
  ASSERT_TRUE(message.has_value());
  const Event event = EventFromJson(*message);
  ASSERT_TRUE(std::holds_alternative<Skipped>(event));
  EXPECT_EQ(std::get<Skipped>(event).reason.substr(0, 9), "not here ");
}

}  // namespace
}  // namespace trainbench::protocol
